"""wspager.torch.from_pretrained as a new user meets it: a missing local
path fails at once naming it (no Hub, no network), a Hub id is tried only
when it can be one; the device defaults to CUDA when torch has it, else
the CPU, and says which; concrete model classes work; train is a keyword;
generation_config.json is what transformers loads; the first conversion
shows progress and says where the pack went.  argv[1]: the device the
default is expected to pick ("cpu" or "cuda")."""
import contextlib
import inspect
import io
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"   # nothing here may need the network
import torch
import transformers

import wspager.torch as wt
from checks import check, finish
from configs import llama

T = os.environ["WSP_TEST_TMP"]
want_device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if want_device == "cuda" and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)
os.chdir(T)


def fails(path, *texts):
    t0 = time.monotonic()
    try:
        wt.from_pretrained(path)
    except FileNotFoundError as e:
        took = time.monotonic() - t0
        ok = all(x in str(e) for x in texts)
        return ok, f"{type(e).__name__}: {e} ({took:.1f} s)"
    except Exception as e:
        return False, f"{type(e).__name__}: {e}"
    return False, "no exception"


# 1. paths that do not exist
os.makedirs("models")
for path, texts in (("./tiny-lama", ("./tiny-lama", "no such")),
                    (os.path.join(T, "missing", "dir"), ("missing/dir",)),
                    ("models/tiny-lama", ("models/tiny-lama", "no such checkpoint")),
                    ("no-such-org/no-such-model", ("no-such-org/no-such-model", "Hub"))):
    ok, what = fails(path, *texts)
    check(ok, f"from_pretrained({path!r}): {what}")
    print(f"{path!r}: {what}")

# 2. a checkpoint with its own generation config
torch.manual_seed(0)
d = os.path.join(T, "llama")
m = transformers.LlamaForCausalLM(llama(64, 2, 256))
m.generation_config = transformers.GenerationConfig(max_new_tokens=5, do_sample=False,
                                                    eos_token_id=3, bos_token_id=1,
                                                    repetition_penalty=1.3)
m.save_pretrained(d)
ref = transformers.AutoModelForCausalLM.from_pretrained(d).eval()

notes, err = [], io.StringIO()
with contextlib.redirect_stderr(err):
    model = wt.from_pretrained(os.fsencode(d), model_class=transformers.LlamaForCausalLM,
                               host_cache="16M", log=notes.append)
check(isinstance(model, transformers.LlamaForCausalLM), f"model class {type(model).__name__}")
check(model.device.type == want_device, f"default device {model.device}, wanted {want_device}")
check(any(f"device {want_device}" in n for n in notes), f"the device chosen is not said: {notes}")
check(any("packed" in n and d + ".wsp" in n for n in notes), f"where the pack went: {notes}")
check("Packing" in err.getvalue() and "100%" in err.getvalue(),
      f"no progress bar for the conversion: {err.getvalue()[-300:]!r}")
check(model.generation_config.to_dict() == ref.generation_config.to_dict(),
      f"generation config {model.generation_config.to_dict()} != transformers' "
      f"{ref.generation_config.to_dict()}")
ids = torch.randint(0, 256, (1, 8))
with torch.no_grad():
    want_gen = ref.generate(ids)
    got_gen = model.generate(ids.to(model.device)).cpu()
check(torch.equal(got_gen, want_gen), f"generate with the checkpoint's generation config: "
      f"{got_gen.tolist()} != {want_gen.tolist()}")
wt.remove(model)

# 3. train is a keyword of its own
check("train" in inspect.signature(wt.from_pretrained).parameters, "train not in the signature")
model = wt.from_pretrained(d, host_cache="16M", train=True)
check(model._wspager.trainer is not None, "train=True did not make a trainer")
wt.remove(model)
print("notes:", notes)
finish()
