"""Data parallel over a torch.distributed process group: every rank runs
the whole model, so every rank needs every layer.  Instead of each reading
the whole pack, each rank reads 1/N of each layer's stored (compressed)
bytes and the ranks all-gather the parts (over a gloo group of the same
ranks, whatever the caller's backend: the bytes go host to host); each
pager gets the whole layer through ``Pager.provide`` and decodes it as if
it had read it (wsp_provide(3)).

The exchanges are collectives, so every rank must start them in the same
order: they follow a fixed order of the layers (the model's), driven by
the acquires, which are the same on every rank because every rank runs
the same forward.  A layer is exchanged when an acquire needs it and it is
not known to be in the host tier: once per layer when the host tier holds
the whole model (all ranks agree on that at open), else on every pass.
A layer not exchanged (routed experts, heads on demand) is read from the
disk by the pager as usual: never wrong, only not shared.
"""
from __future__ import annotations

import hashlib
import os
import threading
from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import Pager

_PAGE = 2 << 20   # the host tier's default page: a layer takes whole pages


def _manifest_digest(pack_path: str) -> str:
    h = hashlib.sha256()
    with open(os.path.join(pack_path, "manifest.wspm"), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_same_pack(group, pack_path: str) -> None:
    """Every rank must page the same pack (each its own copy, or a shared
    one): their manifests are compared; a difference is refused on every
    rank, naming both."""
    mine = (dist.get_rank(group), os.path.abspath(pack_path), _manifest_digest(pack_path))
    every: List[Tuple[int, str, str]] = [None] * dist.get_world_size(group)   # type: ignore
    dist.all_gather_object(every, mine, group=group)
    first = every[0]
    for other in every[1:]:
        if other[2] != first[2]:
            raise ValueError(f"wspager: the ranks' packs differ: rank {first[0]} pages "
                             f"{first[1]} (manifest sha256 {first[2][:16]}...), rank {other[0]} "
                             f"pages {other[1]} (manifest sha256 {other[2][:16]}...)")


class GroupFeed:
    """The layers of `order` (pack indices, the same on every rank) reach
    `pager` by exchange, over a gloo group of its own: its collectives never
    interleave with the caller's (NCCL collectives issued from two threads
    in different orders on the ranks can deadlock), and the bytes go from
    host memory to host memory, where the pager takes them.  When every
    rank's host tier holds the model, a thread exchanges each layer once,
    in order, up to `window` layers ahead of the forward; otherwise the
    acquires drive the exchanges, `window` of them in flight."""

    def __init__(self, pager: Pager, group, order: List[int], window: int = 4):
        self.pager, self.order = pager, list(order)
        self.rank, self.n = dist.get_rank(group), dist.get_world_size(group)
        self.group = dist.new_group(ranks=dist.get_process_group_ranks(group), backend="gloo")
        self.pos = {layer: k for k, layer in enumerate(self.order)}
        self.window = max(1, window)
        self.pending: Dict[int, tuple] = {}
        self.done: set = set()
        self.cursor = 0
        self.bytes_read = 0         # this rank's own reads of the pack
        self.bytes_received = 0     # stored bytes that came from the other ranks
        self.exchanges = 0
        self.fds: Dict[str, int] = {}
        self.wire = torch.device("cpu")
        # Once per layer when every rank's host tier holds the whole model
        # (then nothing is evicted), else whenever an acquire needs it.
        pk = pager.pack
        need = sum((L.raw_bytes + _PAGE - 1) // _PAGE * _PAGE for L in pk.layers)
        fits = torch.tensor([1 if need <= pager.stats()["host_cache_bytes"] else 0])
        self.once = self._agree(fits)
        self.cv = threading.Condition()
        self.ready: set = set()
        self.wanted = 0             # positions in `order` the forward has reached
        self.waiting = False        # an acquire waits: no window
        self.stop = False
        self.error: Optional[BaseException] = None
        self.thread = None
        if self.once:
            self.thread = threading.Thread(target=self._run, name="wspager-feed", daemon=True)
            self.thread.start()

    def _agree(self, flag: torch.Tensor) -> bool:
        t = flag.to(self.wire)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return bool(t.item())

    def close(self) -> None:
        with self.cv:
            self.stop = True
            self.cv.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=30)   # a collective in flight ends with the group's timeout
        for layer in list(self.pending):
            try:
                self.pending.pop(layer)[0].wait()
            except Exception:   # closing after a failure: nothing left to report to
                pass
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def _share(self, layer: int):
        """This rank's part of the layer's stored bytes, read into a tensor
        (zero-padded to the part size), and (its bytes, the layer's)."""
        path, offset, n = self.pager.pack.layer_extent(layer)
        part = (n + self.n - 1) // self.n
        lo, hi = min(n, self.rank * part), min(n, (self.rank + 1) * part)
        share = torch.zeros(max(part, 1), dtype=torch.uint8)
        fd = self.fds.get(path)
        if fd is None:
            fd = self.fds[path] = os.open(path, os.O_RDONLY)
        view, done = memoryview(share.numpy()), 0
        while done < hi - lo:   # straight into the tensor; pread may return less
            got = os.preadv(fd, [view[done:hi - lo]], offset + lo + done)
            if got <= 0:
                raise OSError(f"{path}: the file ended at {offset + lo + done}, "
                              f"{hi - lo - done} bytes short of layer data")
            done += got
        self.bytes_read += hi - lo
        return share.to(self.wire), hi - lo, n

    def _failed(self, layer: int, e: BaseException) -> RuntimeError:
        return RuntimeError(f"wspager: rank {self.rank}: exchanging layer "
                            f"{self.pager.pack.layers[layer].name} with the process group "
                            f"failed (did another rank stop?): {e}")

    def _provide(self, layer: int, parts, n: int, mine: int) -> None:
        whole = torch.cat(parts)[:n]
        if whole.device.type != "cpu":
            whole = whole.cpu()
        self.bytes_received += n - mine
        self.pager.provide(layer, whole)
        self.exchanges += 1

    # Once: a thread, in order ---------------------------------------------
    def _run(self) -> None:
        for k, layer in enumerate(self.order):
            with self.cv:
                while k >= self.wanted + self.window and not self.waiting and not self.stop:
                    self.cv.wait()
                if self.stop:
                    return
            try:
                share, mine, n = self._share(layer)
                parts = [torch.empty_like(share) for _ in range(self.n)]
                dist.all_gather(parts, share, group=self.group)
                self._provide(layer, parts, n, mine)
            except BaseException as e:   # reported by the acquire that needs a layer
                with self.cv:
                    self.error = self._failed(layer, e)
                    self.cv.notify_all()
                return
            with self.cv:
                self.ready.add(layer)
                self.cv.notify_all()

    # Otherwise: the acquires drive it ---------------------------------------
    def _start_next(self) -> None:
        layer = self.order[self.cursor]
        self.cursor += 1
        if self.cursor == len(self.order):
            self.cursor = 0
            self.done.clear()   # a new pass: each layer is exchanged again
        share, mine, n = self._share(layer)
        parts = [torch.empty_like(share) for _ in range(self.n)]
        work = dist.all_gather(parts, share, group=self.group, async_op=True)
        self.pending[layer] = (work, parts, n, mine)

    def _finish(self, layer: int) -> None:
        work, parts, n, mine = self.pending.pop(layer)
        try:
            work.wait()
        except Exception as e:
            raise self._failed(layer, e) from e
        self._provide(layer, parts, n, mine)
        self.done.add(layer)

    def need(self, layer: int) -> None:
        """Before `layer` is acquired: its bytes handed to the pager (unless
        known present), and the next exchanges started."""
        if layer not in self.pos:
            return
        if self.once:
            with self.cv:
                self.wanted = max(self.wanted, self.pos[layer] + 1)
                self.cv.notify_all()
                while layer not in self.ready and self.error is None:
                    self.waiting = True
                    self.cv.wait()
                self.waiting = False
                if layer not in self.ready:
                    raise self.error
            return
        if layer in self.done:
            return
        while layer not in self.pending:
            self._start_next()
        self._finish(layer)
        while len(self.pending) < self.window:
            self._start_next()

    def stats(self) -> Dict[str, int]:
        return {"bytes_read": self.bytes_read, "bytes_received": self.bytes_received,
                "exchanges": self.exchanges, "once": int(self.once)}


class GradientSum:
    """Data-parallel training: after each backward (outside
    :func:`wspager.torch.no_sync`), every rank's gradients are summed over
    the group and divided by its size, as DistributedDataParallel averages
    them, before anything reads them (clipping, the step): the paged
    layers' fp32 accumulators in the pager, and the ``.grad`` of parameters
    kept on the device.  Every rank then steps the same masters alike."""

    def __init__(self, group, resident: List[torch.nn.Parameter]):
        self.group, self.resident = group, resident
        self.n = dist.get_world_size(group)
        nccl = dist.get_backend(group) == "nccl"
        self.wire = torch.device("cuda", torch.cuda.current_device()) if nccl else None
        self.no_sync = False

    def _sum(self, t: torch.Tensor) -> None:
        if self.wire is None or t.device == self.wire:
            dist.all_reduce(t, group=self.group)
        else:   # NCCL reduces device memory: through the GPU and back
            w = t.to(self.wire)
            dist.all_reduce(w, group=self.group)
            t.copy_(w)
        t.div_(self.n)

    def after_backward(self, pager, groups) -> None:
        if self.no_sync:
            return
        accs = [pager.grads(g.index) for g in groups]
        # The same layers must have gradients on every rank (the same model,
        # the same forward): checked, so that the collectives pair up.
        have = torch.tensor([1 if pushes else 0 for _, pushes in accs], dtype=torch.int32)
        lo, hi = have.clone(), have.clone()
        for t, op in ((lo, dist.ReduceOp.MIN), (hi, dist.ReduceOp.MAX)):
            w = t if self.wire is None else t.to(self.wire)
            dist.all_reduce(w, op=op, group=self.group)
            t.copy_(w)
        if not torch.equal(lo, hi):
            odd = [g.name for g, a, b in zip(groups, lo.tolist(), hi.tolist()) if a != b]
            raise RuntimeError(f"wspager: the ranks' backward passes differ: layer {odd[0]} has "
                               "gradients on some ranks only (every rank must run the same "
                               "model the same way)")
        for g, (acc, pushes) in zip(groups, accs):
            if not pushes:
                continue
            for _, name, _, _ in g.params:
                a = acc.get(name)
                if a is not None:
                    self._sum(torch.from_numpy(a))
        for p in self.resident:
            if p.grad is not None:
                self._sum(p.grad)
