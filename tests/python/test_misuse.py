"""Misuse of the Python package raises, never kills the interpreter.

Each case runs in a subprocess of its own (a crash must not take the test
with it): it prints "RAISED <exception type>" when the expected exception
came, "OK" when the case is meant to succeed, and the parent checks both
that line and that the child exited normally (no signal, no hang).  Host
backend; with argv[1] "cuda", also views of GPU slots through torch."""
import os
import subprocess
import sys
import textwrap

import numpy as np
from safetensors.numpy import save_file

import wspager
from checks import check, finish

T = os.environ["WSP_TEST_TMP"]
rng = np.random.default_rng(3)
ckpt = os.path.join(T, "ckpt")
os.makedirs(ckpt)
save_file({f"model.layers.{i}.w": rng.standard_normal((64, 32)).astype(np.float32)
           for i in range(4)}, os.path.join(ckpt, "model.safetensors"))
P = os.path.join(T, "m.wsp")
wspager.convert(ckpt, P).close()

PRELUDE = f"""
import copy, gc, os, pathlib, pickle, sys, threading, warnings
import numpy as np
import wspager
P = {P!r}
def pager(**kw):
    return wspager.Pager(P, device="cpu", host_cache="4M", gpu_slots=2, **kw)
def expect(exc, fn):
    try:
        fn()
    except exc as e:
        print("RAISED", type(e).__name__, "|", e)
        return
    print("NO EXCEPTION")
"""

# (name, code, the last line wanted)
CASES = [
    # borrowed handles keep their owner alive, or raise once it is closed
    ("temporary pager's pack", "wspager.Pager(P, device='cpu').pack.verify(); print('OK')", "OK"),
    ("pack of a collected pager",
     "pk = pager().pack; gc.collect(); pk.verify(); print('OK' if pk.layers else 'empty')", "OK"),
    ("pack after pager.close()",
     "pg = pager(); pk = pg.pack; pg.close(); expect(wspager.WspError, pk.verify)",
     "RAISED WspError"),
    ("pack after its own close()",
     "pk = wspager.Pack(P); pk.close(); expect(wspager.WspError, pk.verify)", "RAISED WspError"),
    # copies and pickles of handles
    ("copy.copy(pack)", "expect(TypeError, lambda: copy.copy(wspager.Pack(P)))", "RAISED TypeError"),
    ("copy.deepcopy(pack)", "expect(TypeError, lambda: copy.deepcopy(wspager.Pack(P)))",
     "RAISED TypeError"),
    ("pickle(pack)", "expect(TypeError, lambda: pickle.dumps(wspager.Pack(P)))", "RAISED TypeError"),
    ("copy.copy(pager)", "pg = pager(); expect(TypeError, lambda: copy.copy(pg))", "RAISED TypeError"),
    ("pickle(pager)", "pg = pager(); expect(TypeError, lambda: pickle.dumps(pg))", "RAISED TypeError"),
    ("copy.copy(acquired layer)", "pg = pager(); L = pg.acquire(0); "
     "expect(TypeError, lambda: copy.copy(L))", "RAISED TypeError"),
    ("pickle(pager.pack)", "pg = pager(); expect(TypeError, lambda: pickle.dumps(pg.pack))",
     "RAISED TypeError"),
    # acquired layers and views past close
    ("layer[name] after close", "pg = pager(); L = pg.acquire(0); pg.close(); "
     "expect(wspager.WspError, lambda: L['w'])", "RAISED WspError"),
    ("release after close is a no-op", "pg = pager(); L = pg.acquire(0); pg.close(); L.release(); "
     "print('OK')", "OK"),
    ("view of a collected temporary pager",
     "a = pager().acquire(1)['w']; gc.collect(); b = pager().acquire(1)['w']; "
     "print('OK' if np.array_equal(a, b) else 'DIFFERENT')", "OK"),
    ("view after close: readable, freed when it goes",
     "pg = pager(); L = pg.acquire(2); a = L['w']; want = a.copy(); L.release()\n"
     "with warnings.catch_warnings(record=True) as w:\n"
     "    warnings.simplefilter('always'); pg.close()\n"
     "ok = np.array_equal(a, want) and any(x.category is ResourceWarning for x in w)\n"
     "alive = pg._owner._free.alive; del a, L; gc.collect()\n"
     "print('OK' if ok and alive and not pg._owner._free.alive else 'BAD')", "OK"),
    ("use after close", "pg = pager(); pg.close(); expect(wspager.WspError, lambda: pg.acquire(0))",
     "RAISED WspError"),
    ("stats after close", "pg = pager(); pg.close(); expect(wspager.WspError, pg.stats)",
     "RAISED WspError"),
    ("grads written after close",
     "pg = pager(); g = np.ones((64, 32), np.float32)\n"
     "pg.grad_push(0, [g.ctypes.data]); pg.grad_wait(0); acc = pg.grads(0)[0]['model.layers.0.w']\n"
     "pg.close(); acc[:] = 7; print('OK' if acc.sum() == 7 * acc.size else 'BAD')", "OK"),
    ("close() twice", "pg = pager(); pg.close(); pg.close(); print('OK')", "OK"),
    # close while other threads are inside acquire
    # (ten rounds: the races it catches show in some runs only)
    ("close while threads acquire",
     "bad = []\n"
     "for rnd in range(10):\n"
     "    pg = pager(); errs = []; stop = threading.Event()\n"
     "    def run(k):\n"
     "        while not stop.is_set():\n"
     "            try:\n"
     "                with pg.acquire(k % 4, timeout=1) as L:\n"
     "                    L['w'].sum()\n"
     "            except wspager.WspError as e:\n"
     "                errs.append(e); return\n"
     "    ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]\n"
     "    [t.start() for t in ts]\n"
     "    import time; time.sleep(0.05); pg.close(); stop.set(); [t.join() for t in ts]\n"
     "    bad += [e for e in errs if 'closed' not in str(e)]\n"
     "print('OK' if not bad else bad)",
     "OK"),
    # integers are range-checked, never wrapped or truncated
    ("acquire(2**32)", "pg = pager(); expect(wspager.WspError, lambda: pg.acquire(2**32))",
     "RAISED WspError | /"),
    ("acquire(-1)", "pg = pager(); expect(wspager.WspError, lambda: pg.acquire(-1))",
     "RAISED WspError"),
    ("acquire(1.7)", "pg = pager(); expect(TypeError, lambda: pg.acquire(1.7))", "RAISED TypeError"),
    ("acquire(True)", "pg = pager(); expect(TypeError, lambda: pg.acquire(True))",
     "RAISED TypeError"),
    ("acquire(name) unknown", "pg = pager(); expect(KeyError, lambda: pg.acquire('nope'))",
     "RAISED KeyError"),
    ("acquire(stream=-1)", "pg = pager(); expect(ValueError, lambda: pg.acquire(0, stream=-1))",
     "RAISED ValueError"),
    ("acquire(timeout=-1)", "pg = pager(); expect(ValueError, lambda: pg.acquire(0, timeout=-1))",
     "RAISED ValueError"),
    ("state_acquire(0, -1)", "pg = pager(); expect(ValueError, lambda: pg.state_acquire(0, -1))",
     "RAISED ValueError"),
    ("state_acquire(0, 2**64 - 1)",
     "pg = pager(); expect(ValueError, lambda: pg.state_acquire(0, 2**64 - 1))", "RAISED ValueError"),
    ("state_acquire(0, 2**63 - 1)",
     "pg = pager(); expect(wspager.WspError, lambda: pg.state_acquire(0, 2**63 - 1))",
     "RAISED WspError"),
    ("gpu_slots=-1", "expect(ValueError, lambda: wspager.Pager(P, device='cpu', gpu_slots=-1))",
     "RAISED ValueError"),
    ("host_cache=-5", "expect(ValueError, lambda: wspager.Pager(P, device='cpu', host_cache=-5))",
     "RAISED ValueError"),
    ("hint_next([99])", "pg = pager(); expect(wspager.WspError, lambda: pg.hint_next([99]))",
     "RAISED WspError"),
    ("verify(threads=-1)", "expect(ValueError, lambda: wspager.Pack(P).verify(threads=-1))",
     "RAISED ValueError"),
    ("convert(level='x')",
     "expect(ValueError, lambda: wspager.convert(P, P + '.x', level='x'))", "RAISED ValueError"),
    # paths: str, bytes, os.PathLike; NUL refused
    ("NUL inside a path", "expect(ValueError, lambda: wspager.Pager(P + '\\0junk', device='cpu'))",
     "RAISED ValueError"),
    ("NUL inside a Pack path", "expect(ValueError, lambda: wspager.Pack(P + '\\0'))",
     "RAISED ValueError"),
    ("bytes path", "print('OK' if wspager.Pack(os.fsencode(P)).layers else 'BAD')", "OK"),
    ("pathlib path", "print('OK' if wspager.Pager(pathlib.Path(P), device='cpu').pack.layers "
     "else 'BAD')", "OK"),
    ("int path", "expect(TypeError, lambda: wspager.Pack(3))", "RAISED TypeError"),
    ("missing pack", "expect(wspager.WspError, lambda: wspager.Pack(P + '.nope'))",
     "RAISED WspError"),
]

if len(sys.argv) > 1 and sys.argv[1] == "cuda":
    import torch
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        sys.exit(77)
    # torch takes no read-only CUDA arrays: a writable interface over the
    # DeviceTensor, which the wrapper (and so the tensor) keeps alive, as
    # wspager.torch's own views do
    CUDA = ("import torch\ngp = wspager.Pager(P, device='cuda', host_cache='4M', gpu_slots=2)\n"
            "class W:\n"
            "    def __init__(self, d):\n"
            "        self.d = d\n"
            "        self.__cuda_array_interface__ = dict(d.__cuda_array_interface__, data=(d.ptr, False))\n")
    CASES += [
        ("a torch view of a slot outlives close",
         CUDA + "L = gp.acquire(1); t = torch.as_tensor(W(L['w']), device='cuda'); want = t.clone()\n"
         "L.release(); gp.close(); torch.cuda.synchronize()\n"
         "print('OK' if torch.equal(t, want) else 'DIFFERENT')", "OK"),
        ("a DeviceTensor kept past close, then viewed",
         CUDA + "L = gp.acquire(2); d = L['w']; gp.close()\n"
         "t = torch.as_tensor(W(d), device='cuda'); print('OK' if t.shape == (64, 32) else 'BAD')",
         "OK"),
        ("copy.copy(DeviceTensor)", CUDA + "d = gp.acquire(0)['w']; "
         "expect(TypeError, lambda: copy.copy(d))", "RAISED TypeError"),
        ("layer[name] after close (CUDA)", CUDA + "L = gp.acquire(0); gp.close(); "
         "expect(wspager.WspError, lambda: L['w'])", "RAISED WspError"),
    ]

for name, code, want in CASES:
    src = PRELUDE + textwrap.dedent(code) + "\n"
    try:
        r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired:
        check(False, f"{name}: hung (no exit within 120 s)")
        continue
    lines = r.stdout.strip().splitlines()
    last = lines[-1] if lines else ""
    ok = r.returncode == 0 and last.startswith(want)
    check(ok, f"{name}: exit {r.returncode}, last line {last!r}, wanted {want!r}\n"
              f"{r.stderr[-2000:]}")
    if ok:
        print(f"ok: {name}: {last[:100]}")
finish()
