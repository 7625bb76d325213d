"""An installed wspager works on its own: run with no WSPAGER_LIBRARY and
no PYTHONPATH into a clone, it loads the library its wheel carries,
converts a checkpoint written by hand (no safetensors package needed),
pages it on the host backend, and on CUDA when torch has a GPU.
argv[1]: a scratch directory."""
import json
import os
import struct
import sys

import numpy as np

import wspager
from wspager import _lib

here = os.path.dirname(wspager.__file__)
assert os.path.exists(os.path.join(here, "py.typed")), "no py.typed"
loaded = _lib.lib()._name
assert os.path.dirname(loaded) == os.path.join(here, "_native"), f"loaded {loaded}"
w = np.arange(48, dtype=np.float32).reshape(6, 8)
head = json.dumps({"model.layers.0.w": {"dtype": "F32", "shape": [6, 8],
                                         "data_offsets": [0, w.nbytes]}}).encode()
ck = os.path.join(sys.argv[1], "ckpt.safetensors")
with open(ck, "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head + w.tobytes())
pack = wspager.convert(ck, os.path.join(sys.argv[1], "m.wsp"), force=True)
with wspager.Pager(pack.path, device="host") as pg, pg.acquire(0) as layer:
    assert np.array_equal(layer["w"], w), "values differ on the host backend"
devices = ["host"]
try:
    import torch
    if torch.cuda.is_available():
        with wspager.Pager(pack.path, device="cuda") as pg, pg.acquire(0) as layer:
            d = layer["w"]   # read-only; torch wants the flag False: a copy of the interface
            view = type("View", (), {"__cuda_array_interface__": dict(
                d.__cuda_array_interface__, data=(d.ptr, False)), "owner": d})()
            t = torch.as_tensor(view, device="cuda")
            assert torch.equal(t.cpu(), torch.from_numpy(w)), "values differ on CUDA"
        devices.append("cuda")
except ImportError:
    pass
print(f"wspager {wspager.version()} from {loaded}: {', '.join(devices)} ok")
