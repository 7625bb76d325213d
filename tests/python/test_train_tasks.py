"""Task-specific training through the pager: a trunk and two task heads,
each head a pack layer read only on demand.  Three AdamW steps on task "a"
acquire only the trunk and head a (at most twice a step each: forward and
backward; the masters are made, and the statistics reset, before the
steps), update only those two layers (the saved pack unpacks to head b's
original weights and changed trunk and head a), and equal the same steps
on the resident model exactly.  Host backend."""
import os

import torch

import wspager
import wspager.torch as wt
from checks import check, finish
from safetensors.torch import load_file, save_file

T = os.environ["WSP_TEST_TMP"]


class MultiTask(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Linear(64, 64)
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(64, 8), "b": torch.nn.Linear(64, 8)})

    def forward(self, x, task):
        return self.heads[task](torch.relu(self.trunk(x)))


torch.manual_seed(0)
ref = MultiTask()
ck = os.path.join(T, "tasks")
os.makedirs(ck)
save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, os.path.join(ck, "model.safetensors"))
pack = ck + ".wsp"
wspager.convert(ck, pack)
layers = {L.name: L for L in wspager.Pack(pack).layers}
check(set(layers) == {"trunk", "heads.a", "heads.b"}, f"layers {sorted(layers)}")

model = MultiTask()
wt.offload(model, pack, device="cpu", host_cache="16M", train=True, on_demand=["heads"])
opt = torch.optim.AdamW(wt.parameters(model), lr=1e-2)
opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
pg = model._wspager.pager
pg.reset_stats()
same = True
for step in range(3):
    x = torch.randn(16, 64)
    want, got = ref(x, "a"), model(x, "a")
    same &= torch.equal(want, got)
    want.square().mean().backward()
    got.square().mean().backward()
    opt_ref.step()
    opt.step()
    opt_ref.zero_grad()
    opt.zero_grad()
check(same, "outputs differ from the resident model's")
st = pg.stats()
print(f"3 steps on task a: {st['acquires']} acquires, {st['updated_layers']} layers updated "
      f"({st['updated_bytes']} bytes)")
check(0 < st["acquires"] <= 3 * 2 * 2, f"{st['acquires']} acquires: more than trunk and head a")
check(st["updated_layers"] == 2, f"{st['updated_layers']} layers updated, want 2")
out = os.path.join(T, "tuned.wsp")
wt.save(model, out)
wspager.Pack(out).unpack(out + ".st")
got = load_file(os.path.join(out + ".st", "model.safetensors"))
orig = load_file(os.path.join(ck, "model.safetensors"))
for k, v in ref.state_dict().items():
    check(torch.equal(got[k], v), f"{k}: saved weights differ from resident training")
check(torch.equal(got["heads.b.weight"], orig["heads.b.weight"]), "head b was written")
check(not torch.equal(got["heads.a.weight"], orig["heads.a.weight"]), "head a did not change")
wt.remove(model)
finish()
