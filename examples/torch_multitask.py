"""A multi-task model whose per-task heads are read from disk only when
their task runs: a shared trunk and one large head per task, paged through
wspager with the heads on demand (never read ahead), so only the modules
that run are read; the trunk is prefetched as usual.

    PYTHONPATH=python python3 examples/torch_multitask.py [DIR]
"""
import os
import sys

import torch
from safetensors.torch import save_file

import wspager.torch as wt

TASKS = ("sentiment", "topic", "language", "toxicity")


class MultiTask(torch.nn.Module):
    # Page the trunk as one unit (as transformers' decoder layers are):
    # wspager.torch.convert groups by these modules.
    _no_split_modules = ["Sequential"]

    def __init__(self, hidden=512, classes=2048):
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.GELU(),
                                         torch.nn.Linear(hidden, hidden))
        self.heads = torch.nn.ModuleDict({t: torch.nn.Linear(hidden, classes) for t in TASKS})

    def forward(self, x, task):
        return self.heads[task](self.trunk(x))


d = sys.argv[1] if len(sys.argv) > 1 else "multitask"
os.makedirs(d, exist_ok=True)
torch.manual_seed(0)
resident = MultiTask().eval()
save_file(resident.state_dict(), os.path.join(d, "model.safetensors"))
pack = wt.convert(MultiTask(), d, d + ".wsp", force=os.path.exists(d + ".wsp"))
print("layers:", [L.name for L in pack.layers])

model = wt.offload(MultiTask().eval(), d + ".wsp", device="cpu", host_cache="64M",
                   on_demand=["heads"])
x = torch.randn(4, 512)
with torch.no_grad():
    out = model(x, "topic")
    same = torch.equal(out, resident(x, "topic"))
read = model._wspager.pager.stats()["bytes_read"]
stored = {L.name: L.stored_bytes for L in pack.layers}
print(f"task 'topic': logits identical to the resident model: {same}; read {read} bytes")
print("stored bytes per layer:", stored)
unread = [t for t in TASKS if t != "topic"]
bound = sum((stored[n] + 4095) // 4096 * 4096 for n in ("trunk", "heads.topic"))
print(f"read only the trunk and the topic head: {read <= bound} (at most {bound} bytes); "
      f"never read: {', '.join('heads.' + t for t in unread)}")
sys.exit(0 if same and 0 < read <= bound else 1)
