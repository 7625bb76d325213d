"""wspager.torch.AdamW (the library's wsp_adamw_step) against
torch.optim.AdamW: the same gradients for ten steps, at gradient scales
from 1e-8 to 10, with and without weight decay: parameters within 1e-6
relative (max |diff| / max |w|).  Not bit for bit: torch's vectorised CPU
sqrt is not correctly rounded.  Also: a non-fp32 or non-CPU parameter is a
TypeError naming it."""
import torch

import wspager.torch as wt
from checks import check, finish

torch.manual_seed(0)
print(f"torch {torch.__version__}")
worst = 0.0
for wd in (0.0, 1e-2):
    for scale in (1e-8, 1e-4, 1e-1, 10.0):
        n = 200003
        p0 = torch.randn(n) * 0.02
        a, b = torch.nn.Parameter(p0.clone()), torch.nn.Parameter(p0.clone())
        oa = torch.optim.AdamW([a], lr=1e-3, weight_decay=wd)
        ob = wt.AdamW([b], lr=1e-3, weight_decay=wd)
        for _ in range(10):
            g = torch.randn(n) * scale
            a.grad, b.grad = g.clone(), g.clone()
            oa.step()
            ob.step()
        rel = ((a - b).abs().max() / a.abs().max()).item()
        worst = max(worst, rel)
        print(f"weight decay {wd}, gradients ~{scale:g}: after 10 steps max |diff| / max |w| "
              f"{rel:.3g}, {int((a != b).sum())} of {n} elements not bit-identical")
check(worst <= 1e-6, f"native AdamW {worst:.3g} relative from torch's after 10 steps")

bad = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
bad.grad = torch.zeros(4, dtype=torch.bfloat16)
try:
    wt.AdamW([bad]).step()
    check(False, "a bf16 parameter was accepted")
except TypeError as e:
    check("fp32" in str(e) and "bfloat16" in str(e), f"unclear error: {e}")
finish()
