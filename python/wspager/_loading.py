"""First contact of :func:`wspager.torch.from_pretrained`: where the
checkpoint is, which device, which model class, and the conversion's
progress.  What transformers decides (configs, model classes, generation
configs, the Hub) is asked of transformers and huggingface_hub."""
from __future__ import annotations

import errno
import logging
import os
import re
from typing import Callable, Optional

import torch

logger = logging.getLogger("wspager")

# huggingface_hub's repo ids: "name" or "namespace/name", [\w.-], no "--"
# or "..", not starting or ending with "-" or ".", at most 96 characters.
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9](?:[\w.-]{0,94}[\w])?/)?[A-Za-z0-9](?:[\w.-]{0,94}[\w])?$")


def notify(log: Optional[Callable[[str], object]], message: str) -> None:
    """`message` to the user's `log` callable, and to the "wspager" logger."""
    logger.info(message)
    if log is not None:
        log(message)


def default_device(device, log=None) -> torch.device:
    """`device`, or CUDA when torch has it, else the CPU (the host backend),
    saying which."""
    if device is not None:
        return torch.device(device)
    d = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    notify(log, f"wspager: device {d} ({'CUDA is available' if d.type == 'cuda' else 'no CUDA device: the host backend'})")
    return d


def _is_hub_id(name: str) -> bool:
    if not _HUB_ID.match(name) or "--" in name or ".." in name:
        return False
    # "models/tiny-lama" where ./models is a local folder: a path with a typo
    first = name.split("/")[0]
    return "/" not in name or not os.path.isdir(first)


def local_checkpoint(path, log=None) -> str:
    """A local directory (a checkpoint or a pack) for `path`: the path
    itself when it exists; a Hub snapshot only for what can be a Hub id;
    otherwise FileNotFoundError naming the path, without any network."""
    p = os.fsdecode(os.fspath(path))
    if "\0" in p:
        raise ValueError(f"path {p!r} contains a NUL character")
    if os.path.exists(p):
        if not os.path.isdir(p):
            raise NotADirectoryError(errno.ENOTDIR, "not a checkpoint directory or a pack", p)
        return p
    if not _is_hub_id(p):
        raise FileNotFoundError(errno.ENOENT, "no such checkpoint directory or pack", p)
    from huggingface_hub import snapshot_download
    notify(log, f"wspager: {p} is no local path; fetching it from the Hugging Face Hub")
    try:
        return snapshot_download(p, allow_patterns=["*.json", "*.safetensors", "*.model",
                                                    "*.txt", "*.tiktoken"])
    except Exception as e:   # offline, unknown repo, gated...: say both
        raise FileNotFoundError(
            errno.ENOENT, f"no such local path, and the Hub gave no model {p!r} "
            f"({type(e).__name__}: {e})", p) from e


def build_model(cls, config, dtype=None):
    """An instance of `cls` from `config` (in `dtype` if given): an Auto
    class (``from_config``) or a concrete transformers model class
    (``LlamaForCausalLM``)."""
    import transformers
    kw = {} if dtype is None else {"dtype": dtype}
    if hasattr(cls, "from_config"):
        return cls.from_config(config, **kw)
    if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
        return cls._from_config(config, **kw)
    raise TypeError(f"model_class must be a transformers Auto class or model class, not {cls!r}")


def load_generation_config(model, directory: Optional[str]) -> None:
    """generation_config.json of `directory`, as transformers' from_pretrained
    loads it (a model that cannot generate, or no file: left as built)."""
    import transformers
    if directory is None or not model.can_generate() or \
            not os.path.isfile(os.path.join(directory, "generation_config.json")):
        return
    model.generation_config = transformers.GenerationConfig.from_pretrained(directory)


_BIN_INDEX = "pytorch_model.bin.index.json"


def bin_files(checkpoint: str):
    """The PyTorch (torch.save) shards of a checkpoint directory that has
    no safetensors: pytorch_model.bin, or those its index names."""
    index = os.path.join(checkpoint, _BIN_INDEX)
    if os.path.isfile(index):
        import json
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(checkpoint, f) for f in files]
    single = os.path.join(checkpoint, "pytorch_model.bin")
    return [single] if os.path.isfile(single) else []


def safetensors_from_bin(files, out_dir: str, log=None) -> None:
    """Each shard in `files` as a .safetensors file in `out_dir`, read as
    transformers reads it: ``torch.load(weights_only=True)``, which builds
    tensors and never runs code from the file; one shard in memory at a
    time (file-backed where torch can map it)."""
    from safetensors.torch import save_file
    for f in files:
        notify(log, f"wspager: reading {f} with torch.load(weights_only=True)")
        try:
            try:
                sd = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:   # the legacy (non-zip) format cannot be mapped
                sd = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:     # corrupt, or holds more than tensors (code)
            raise ValueError(f"{f}: torch.load(weights_only=True) refuses it: "
                             f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        if not isinstance(sd, dict) or not all(isinstance(k, str) and torch.is_tensor(t)
                                               for k, t in sd.items()):
            raise ValueError(f"{f}: not a state dict of tensors")
        out, seen = {}, set()
        for k, t in sd.items():
            # safetensors holds each tensor once: tied names get a copy
            at = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
            out[k] = t.contiguous() if at not in seen else t.clone(memory_format=torch.contiguous_format)
            seen.add(at)
        name = os.path.basename(f)
        name = name[:-4] if name.endswith(".bin") else name
        save_file(out, os.path.join(out_dir, name + ".safetensors"), metadata={"format": "pt"})
        del sd, out


def progress_bar(checkpoint: str, out: str):
    """A progress callback for the conversion, shown as transformers shows
    its own (tqdm; off with transformers' disable_progress_bar), and a
    function that closes it."""
    from transformers.utils import logging as hf_logging
    bar = hf_logging.tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024,
                          desc=f"Packing {os.path.basename(checkpoint.rstrip('/'))} into {out}")

    def progress(done: int, total: int) -> bool:
        bar.total = total
        bar.update(done - bar.n)
        return False
    return progress, bar.close
