"""Page a PyTorch model's weights through wspager.

:func:`offload` hooks an existing ``torch.nn.Module``: the module of each
pack layer (``model.layers.7``) gets a forward pre-hook that acquires the
layer on the current CUDA stream and binds the module's parameters to
zero-copy tensors over the slot memory, and a forward hook that releases it
on the same stream.  No host synchronisation in the steady state, no copy
beyond the pager's own.  :func:`from_pretrained` builds a transformers model
with no weights in memory and offloads it.

>>> import wspager.torch as wt
>>> model = wt.from_pretrained("llama-dir", device="cuda", host_cache="16G")
>>> out = model.generate(ids, max_new_tokens=32)

What a bound parameter may and may not do: between a module's pre-hook and
its forward hook, its parameters are tensors over slot memory, read-only
(the pager holds the only copy, and the next user of the slot sees any
write).  Outside its forward a paged parameter holds a placeholder of the
right shape, dtype and device whose elements are NaN (zeros for integer
types): it costs no memory and makes any use outside a hooked forward
visible.  ``state_dict()`` (so ``save_pretrained``) reads the true
weights through the pager instead, a layer at a time, into CPU tensors;
``.to(dtype)``, ``.half()`` or ``.to(other device)`` raise (they would
convert buffers but not the pager's weights); after :func:`remove` a
forward raises (see :mod:`wspager._weights`).  Autograd keeps handles in
place of paged weights, and the backward re-acquires a layer while it
needs its weights (see :mod:`wspager._saved`): gradients reach the inputs
of paged modules, so adapters (peft's LoRA) or heads around a frozen paged
model train as ordinary parameters.  Offloaded parameters have
``requires_grad=False``, unless the model is offloaded with
``train=True``: then gradients of the paged weights themselves leave
through the pager's write-back path (see :mod:`wspager._train`,
:func:`grads`).
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from . import Pager, Pack, convert as _convert
from ._optim import AdamW  # noqa: F401  (wspager.torch.AdamW: the native host AdamW)
from . import _experts, _hf, _loading, _plan
from ._plan import MismatchError, TORCH_DTYPES, inside as _inside, placeholder as _placeholder
from ._saved import SavedWeights
from ._weights import StateDictSource, forbid_forward, guard_conversions

__all__ = ["offload", "remove", "from_pretrained", "convert", "init_empty", "MismatchError",
           "TORCH_DTYPES", "grads", "zero_grad", "parameters", "named_parameters", "save", "AdamW",
           "step_in_backward"]

class _Group:
    """One pack layer: its parameters and the views over its slot."""

    def __init__(self, index: int, name: str):
        self.index, self.name = index, name
        self.params: List[Tuple[torch.nn.Parameter, str, torch.dtype, Tuple[int, ...]]] = []
        self.depth = 0            # hooks holding it now (nested uses)
        self.layer = None         # the AcquiredLayer while held
        self.views: Dict[Tuple[int, str], torch.Tensor] = {}   # (slot address, name) -> view
        self.placeholders: List[torch.Tensor] = []


class Offload:
    """What :func:`offload` attached to a model (``model._wspager``)."""

    def __init__(self, model: torch.nn.Module, pager: Pager, device: torch.device):
        self.model, self.pager, self.device = model, pager, device
        self.groups: List[_Group] = []
        self.handles = []
        self.restore = []          # (module, attribute) set on the instance
        self.trainer = None        # wspager._train.Trainer with train=True
        self.experts = []          # (stacked-experts module, its _plan.Experts)
        self.hooked: List[torch.nn.Module] = []   # modules whose forward acquires
        self.names = None          # _hf.Names of the model
        self.saved = None          # _saved.SavedWeights: weights autograd keeps
        self.by_index: Dict[int, _Group] = {}     # views of layers read outside hooks

    def group_for(self, index: int) -> "_Group":
        """A group holding views of pack layer `index` for reads outside the
        hooks (kept tensors, experts): views are cached per group."""
        g = self.by_index.get(index)
        if g is None:
            g = self.by_index[index] = _Group(index, "")
        return g

    def _stream(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.current_stream(self.device).cuda_stream
        return 0

    def _view(self, g: _Group, layer, name: str, dtype: torch.dtype, shape) -> torch.Tensor:
        return self._span(g, layer.address(name), layer.info(name).nbytes, dtype, shape)

    def _span(self, g: _Group, ptr: int, nbytes: int, dtype: torch.dtype, shape) -> torch.Tensor:
        """A tensor over `nbytes` of slot memory at `ptr` (no copy)."""
        key = (ptr, nbytes, dtype, tuple(shape))
        t = g.views.get(key)
        if t is not None:
            return t
        if nbytes == 0:
            t = torch.empty(shape, dtype=dtype, device=self.device)
        elif self.device.type == "cuda":
            raw = torch.as_tensor(_CudaBytes(ptr, nbytes, self.pager._view_owner()),
                                  device=self.device)
            t = raw.view(dtype).view(shape)
        else:
            buf = self.pager._host_buffer(ptr, nbytes)
            t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).view(shape)
        # Slots never move: the same layer in the same slot reuses its views.
        g.views[key] = t
        return t

    def acquire(self, g: _Group, routed: bool = False) -> None:
        g.depth += 1
        if g.depth > 1:
            return
        layer = self.pager.acquire(g.index, self._stream(), routed=routed)
        g.layer = layer
        for (p, name, dtype, shape), ph in zip(g.params, g.placeholders):
            v = self._view(g, layer, name, dtype, shape)
            # a weight the model keeps in another dtype: cast on the device,
            # as transformers casts it at load
            p.data = v if v.dtype == ph.dtype else v.to(ph.dtype)

    def release(self, g: _Group) -> None:
        g.depth -= 1
        if g.depth > 0:
            return
        for (p, _, _, _), ph in zip(g.params, g.placeholders):
            p.data = ph
        layer, g.layer = g.layer, None
        layer.release(self._stream())


class _CudaBytes:
    """`nbytes` bytes of device memory for torch.as_tensor (no copy); torch
    keeps this object, and so `owner` (the pager's memory), alive as long
    as the tensor."""

    def __init__(self, ptr: int, nbytes: int, owner: object):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None,
                                         "stream": None}


def _module_names(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    return dict(model.named_modules(remove_duplicate=False))


def _owners(model: torch.nn.Module) -> Dict[int, List[Tuple[str, torch.nn.Module, str]]]:
    """id(parameter) -> every (module path, module, attribute) holding it
    directly: tied weights appear under several modules."""
    out: Dict[int, List[Tuple[str, torch.nn.Module, str]]] = {}
    for mname, m in model.named_modules(remove_duplicate=False):
        for pname, p in m.named_parameters(recurse=False):
            out.setdefault(id(p), []).append((mname, m, pname))
    return out


def _resolve_device(device) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    if d.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be cuda[:N] or cpu, not {device}")
    return d


def offload(model: torch.nn.Module, pack: Union[str, os.PathLike], device=None, *,
            host_cache=None, gpu_slots: int = 3, resident: Sequence[str] = (),
            on_demand: Sequence[str] = (), train: bool = False,
            **pager_options) -> torch.nn.Module:
    """Page `model`'s weights from the pack through the pager.

    Parameters
    ----------
    model : torch.nn.Module
        Its parameters may be real or on the meta device; the pack provides
        every parameter it holds, and persistent buffers it holds (cast to
        the buffer's dtype).  Pack tensors keep their checkpoint names; a
        transformers model matches them as its own loader does (renamed
        keys, per-expert tensors stacked by its converters).  A weight the
        model keeps in another dtype than the pack's is cast on the device
        for each use, as transformers casts it at load.  Buffers on the
        meta device are an error (build with :func:`init_empty`).
    pack : path
        A pack made by ``wspack convert`` or :func:`wspager.convert`.
    device : "cuda", "cuda:N", "cpu" or None
        Where the weights are used; "cpu" runs the host backend; None: CUDA
        when torch has it, else the CPU.
    host_cache, gpu_slots, **pager_options
        As :class:`wspager.Pager` takes them, except that `host_cache`
        bounds all the pager's host memory here (``host_total=True``: the
        cache, read staging and decode buffers together) unless
        ``host_total=False`` is given.
    resident : names
        Pack layers (or module paths) loaded once into ordinary tensors on
        `device` instead of being paged, e.g. ``["model.embed_tokens"]``.
        Parameters the pack lacks are an error unless named here; then they
        keep the values they have.
    on_demand : names
        Pack layers, or module paths whose layers, are read only when their
        module runs, never ahead of need (task-specific heads).  Routed
        experts are always on demand: a module that never runs is never read.
    train : bool
        Paged parameters require gradients; the backward re-acquires each
        layer and hands its gradients to the pager, which adds them into
        fp32 host accumulators (:func:`grads`).  Layers an optimizer step
        changed are kept in memory up to ``updated_cache`` (a Pager option;
        default a quarter of `host_cache`), the rest in an unnamed overflow
        file (``overflow_dir``).  Parameters kept resident train on the
        device as ordinary parameters (:func:`parameters` includes them).
        Routed experts train too: each routed expert's gradient leaves as
        a paged weight's does, :func:`parameters` gives every expert's
        master in place of the stacked parameter, and an expert no token
        chose gets a zero gradient, as in the resident model (checked with
        host masters; with :func:`step_in_backward` an expert steps only
        when routed, untested).  Paged weights must have the pack's dtype.
        An optimizer over the model's own ``parameters()`` (a plain loop,
        transformers' Trainer) trains the paged ones as their masters:
        their ``.grad`` after a backward are the accumulators, and for
        the optimizer's step they hold the masters' data (not with routed
        experts: build that optimizer over :func:`parameters`).

    Returns the model, hooked.  Every disagreement between pack and model
    (missing tensors, shapes, tensors that match nothing, buffers without
    a value) is found before anything is bound and raised as one
    :class:`MismatchError`.
    """
    if getattr(model, "_wspager", None) is not None:
        raise ValueError("this model is already offloaded (wspager.torch.remove first)")
    for h in model.__dict__.pop("_wspager_removed", []):   # offloaded again after remove
        h.remove()
    dev = _resolve_device(_loading.default_device(device))
    names = _hf.Names(model)
    with Pack(pack) as p:
        plan = _plan.plan(model, p, names, set(resident), train)
        path = p.path
    wanted = set(plan.on_demand())
    unknown = []
    for prefix in on_demand:
        hit = [L.name for i, L in plan.layers.items() if _inside(L.name, prefix) or any(
            _inside(e.name, prefix) for e in plan.paged.get(i, []) + plan.kept.get(i, []))]
        wanted.update(hit)
        if not hit:
            unknown.append(prefix)
    if unknown:
        raise MismatchError(f"{path}: on_demand names no pack layer: {', '.join(unknown)}")
    pager_options.setdefault("host_total", True)   # host_cache: what a user budgets RAM for
    pager = Pager(pack, device="host" if dev.type == "cpu" else dev.index,
                  host_cache=host_cache, gpu_slots=gpu_slots, on_demand=sorted(wanted),
                  **pager_options)
    off = Offload(model, pager, dev)
    off.names = names
    try:
        _bind(model, off, plan, dev)
        off.handles += StateDictSource(off, model).attach(model)
        guard_conversions(off, model)
        off.saved = SavedWeights(off, model)
        if train:
            from ._train import Trainer
            off.trainer = Trainer(off, model)
    except BaseException:
        for h in off.handles:
            h.remove()
        pager.close()
        raise
    model._wspager = off
    return model


def _replace(owners, p: torch.nn.Parameter, data: torch.Tensor) -> torch.nn.Parameter:
    """A new Parameter over `data` in place of `p` in every module holding
    it (tied weights stay tied).  Assigning .data cannot take a meta
    parameter to another device; a new Parameter can."""
    new = torch.nn.Parameter(data, requires_grad=False)
    for _, m, attr in owners.get(id(p), []):
        m._parameters[attr] = new
    return new


def _read(off: Offload, layer, e: "_plan.Entry") -> torch.Tensor:
    """Pack tensor `e` of the held `layer`, as a view, in its pack dtype."""
    t = e.tensor
    return off._span(off.group_for(e.layer.index), layer.address(t.name), t.nbytes,
                     TORCH_DTYPES[t.dtype], tuple(t.shape))


def _bind(model: torch.nn.Module, off: Offload, plan: "_plan.Plan", dev: torch.device) -> None:
    owners = _owners(model)
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = _module_names(model)
    # Kept tensors (buffers, resident parameters) and converted parameters:
    # read once, cast to the model's dtype as transformers casts them.
    for index, entries in plan.kept.items():
        with off.pager.acquire(index, off._stream()) as layer:
            for e in entries:
                value = _read(off, layer, e).to(dev, e.dtype, copy=True)
                if e.name in params:
                    _replace(owners, params[e.name], value)
                else:
                    owner, attr = e.name.rsplit(".", 1) if "." in e.name else ("", e.name)
                    modules[owner]._buffers[attr] = value
            if dev.type == "cuda":
                torch.cuda.current_stream(dev).synchronize()   # before the slot is reused
    for name, (converter, sources) in plan.converted.items():
        tensors = {}
        for pattern, entries in sources.items():
            tensors[pattern] = []
            for e in entries:
                with off.pager.acquire(e.layer.index, off._stream()) as layer:
                    tensors[pattern].append(_read(off, layer, e).to(dev, e.dtype, copy=True))
        made = off.names.convert(converter, name, tensors)
        for target, value in made.items():
            if target in params:
                _replace(owners, params[target], value)
    for x in plan.experts:
        _experts.bind(off, x, off.names, owners, _replace, _Group)
    # Everything not paged goes to the device as it is (buffers such as
    # rotary inv_freq, parameters kept resident).
    params = dict(model.named_parameters(remove_duplicate=False))
    paged_ids = {id(params[e.name]) for es in plan.paged.values() for e in es}
    for name, p in params.items():
        if id(p) not in paged_ids and p.device != dev:
            _replace(owners, p, p.data.to(dev))
    for mname, m in modules.items():
        for bname, b in list(m._buffers.items()):
            if b is not None and b.device != dev and b.device.type != "meta":
                m._buffers[bname] = b.to(dev)
    # Paged layers: a group each, hooked on the deepest module holding all
    # its parameters and on every module outside it that holds one of them
    # (tied weights).
    hooks: Dict[int, Tuple[torch.nn.Module, List[_Group]]] = {}
    for index, entries in plan.paged.items():
        L = plan.layers[index]
        g = _Group(index, L.name)
        home = _plan.home(L.name, [e.name for e in entries], modules)
        users = {home}
        for e in entries:
            old = params[e.name]
            for mpath, _, _ in owners.get(id(old), []):
                if not _inside(mpath, home):
                    users.add(mpath)
            t = e.tensor
            ph = _placeholder(tuple(t.shape), e.dtype, dev)
            p = _replace(owners, old, ph)
            g.params.append((p, t.name, TORCH_DTYPES[t.dtype], tuple(t.shape)))
            g.placeholders.append(ph)
        off.groups.append(g)
        for mpath in sorted(users):
            m = modules[mpath]
            hooks.setdefault(id(m), (m, []))[1].append(g)
    off.hooked = [m for m, _ in hooks.values()] + [m for m, _ in off.experts]
    for m, groups in hooks.values():
        def pre(_mod, _args, _kwargs=None, groups=groups):
            for g in groups:
                if off.trainer is not None and torch.is_grad_enabled():
                    off.trainer.strip(g)
                off.acquire(g)

        def post(_mod, _args, _out, groups=groups):
            for g in reversed(groups):
                off.release(g)
        off.handles.append(m.register_forward_pre_hook(pre))
        off.handles.append(m.register_forward_hook(post, always_call=True))

def _unit_of(path: str, units: Sequence[str]) -> Optional[str]:
    for u in units:
        if _inside(path, u):
            return u
    return None


def convert(model: torch.nn.Module, checkpoint, out, *, force: bool = False,
            progress=None, log=None) -> Pack:
    """Convert `checkpoint` into the pack `out`, grouped by the modules the
    hooks of :func:`offload` sit on: each module whose class the model names
    in ``_no_split_modules`` (transformers' decoder layers and the like), each
    routed expert of a mixture-of-experts block, and for every other
    parameter the module that holds it; layers in the model's module order.
    Tensors keep their checkpoint names; where they belong in the model is
    asked of transformers (:class:`wspager._hf.Names`).  The grouping goes
    to the C converter as an explicit tensor->layer map."""
    names = _hf.Names(model)
    split = set(getattr(model, "_no_split_modules", None) or [])
    modules = _module_names(model)
    units = [p for p, m in modules.items() if type(m).__name__ in split]
    units.sort(key=len, reverse=True)          # the innermost unit wins
    order = {p: i for i, (p, _) in enumerate(model.named_modules())}
    keys = _checkpoint_keys(os.fspath(checkpoint))
    mapped = {k: names(k) for k in keys}
    # the keys feeding each converter target, in the loader's order: the
    # n-th is expert n's where the target's module holds one per expert
    feeding: Dict[Tuple[str, str], List[str]] = {}
    for k, (name, pattern) in mapped.items():
        if pattern is not None:
            feeding.setdefault((name, pattern), []).append(k)
    expert_of = {}
    for (name, _), ks in feeding.items():
        path = name.rsplit(".", 1)[0] if "." in name else ""
        count = getattr(modules.get(path), "num_experts", None)
        if isinstance(count, int) and len(ks) == count:
            expert_of.update({k: (path, e) for e, k in enumerate(names.order(ks))})
    pairs = []
    for k in keys:
        if k in expert_of:
            path, e = expert_of[k]
            pairs.append((k, f"{path}.{e}"))
            continue
        name = mapped[k][0]
        owner = name.rsplit(".", 1)[0] if "." in name else name
        pairs.append((k, _unit_of(owner, units) or owner))
    experts_at = {f"{p}.{e}": (p, e) for p, e in expert_of.values()}

    def rank(layer):   # the pack's layer order: the model's module order,
        if layer in experts_at:        # a block's routed experts after it
            p, e = experts_at[layer]
            return order.get(p, len(order)), e + 1
        p = layer
        while p and p not in order:
            p = p.rsplit(".", 1)[0] if "." in p else ""
        return order.get(p, len(order)), 0
    pairs.sort(key=lambda kl: rank(kl[1]))
    return _convert(checkpoint, out, groups=pairs, force=force, progress=progress, log=log)


def _checkpoint_keys(checkpoint: str) -> List[str]:
    """The tensor names of a checkpoint directory or .safetensors file."""
    import struct
    files = [checkpoint] if os.path.isfile(checkpoint) else sorted(
        os.path.join(checkpoint, f) for f in os.listdir(checkpoint) if f.endswith(".safetensors"))
    keys: List[str] = []
    for f in files:
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            if n > 100 << 20:
                raise ValueError(f"{f}: header of {n} bytes above 100 MB: not a safetensors file")
            keys += [k for k in json.loads(fh.read(n)) if k != "__metadata__"]
    return keys


def _trainer(model: torch.nn.Module):
    off = getattr(model, "_wspager", None)
    if off is None or off.trainer is None:
        raise ValueError("this model is not offloaded with train=True")
    return off.trainer


def grads(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """The gradients the backward passes since the last :func:`zero_grad`
    accumulated, by parameter name: fp32 tensors in host memory, views of
    the pager's accumulators (waits for copies still in flight)."""
    return _trainer(model).grads()


def zero_grad(model: torch.nn.Module) -> None:
    """Start the gradient accumulators of every paged layer over."""
    _trainer(model).zero_grad()


def named_parameters(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Parameter]]:
    """The parameters to train, by name, in the model's
    ``named_parameters()`` order, for an optimizer: parameters kept on the
    device (``resident=``) as they are, and for paged parameters their fp32
    host masters, whose ``.grad`` are the
    pager's accumulators, real as soon as a backward is over (clip, unscale
    or log them there; micro-batches accumulate into them), and after each
    step of an optimizer over them the stepped values, in each parameter's
    dtype, become the weights the next forward uses."""
    return _trainer(model).named_parameters()


def parameters(model: torch.nn.Module) -> List[torch.nn.Parameter]:
    """:func:`named_parameters` without the names."""
    return [p for _, p in named_parameters(model)]


def step_in_backward(model: torch.nn.Module, optimizer=torch.optim.AdamW, *,
                     clip_per_layer: Optional[float] = None, **kwargs):
    """Step the model's paged parameters on its device, one layer at a time,
    inside the backward: as soon as a layer's gradients are complete,
    ``optimizer(params, **kwargs)`` (any torch optimizer; one per layer)
    steps its fp32 masters there, and the new weights, in each parameter's
    dtype, become what the next forward uses.  Masters and optimizer state
    are kept by the pager between steps, one buffer a layer
    (``wsp_state_acquire``): page-locked host memory up to the pager's
    ``state_cache`` (a quarter of `host_cache` unless given), the rest in
    an unnamed overflow file, so that weights and optimizer state larger
    than host memory train within a bound.  A layer's buffer crosses the
    link while its backward runs; gradients never leave the device.

    Each backward is one optimizer step (no accumulation across backward
    passes).  There is no global gradient clipping: a layer steps as soon
    as its own gradients are complete, before the gradients of the layers
    below it exist, so the global norm is not known in time.
    ``clip_per_layer=max_norm`` clips each layer's gradients to its own
    norm (``clip_grad_norm_`` over the layer's parameters) before its step;
    for a global clip, use :func:`parameters` with an optimizer on the host.  Returns an object whose ``step()`` waits for the last layers'
    copies (the next forward also does) and whose ``zero_grad()`` does
    nothing, so a usual training loop keeps its shape::

        opt = wt.step_in_backward(model, torch.optim.AdamW, lr=1e-4)
        model(ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad()

    Not with :func:`parameters` (host masters) on the same model."""
    if not (isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer)):
        raise TypeError(f"step_in_backward: optimizer must be a torch.optim.Optimizer class, "
                        f"not {optimizer!r}")
    if clip_per_layer is not None and not clip_per_layer > 0:
        raise ValueError(f"clip_per_layer must be a positive norm, not {clip_per_layer!r}")
    return _trainer(model).step_in_backward(optimizer, kwargs, clip_per_layer)


def save(model: torch.nn.Module, out, *, force: bool = False, progress=None) -> None:
    """Write the model's current weights (stepped or not) as a new pack at
    `out`, atomically; ``wspack unpack`` of it gives safetensors."""
    _trainer(model).save(out, force=force, progress=progress)


def remove(model: torch.nn.Module) -> None:
    """Take the hooks off and close the pager.  Paged parameters keep their
    placeholders: the model has no weights of its own afterwards, and a
    forward of it raises (save its ``state_dict()`` first to keep them)."""
    off = getattr(model, "_wspager", None)
    if off is None:
        return
    for h in off.handles:
        h.remove()
    if off.trainer is not None:
        from ._train import _TRAINERS
        _TRAINERS.discard(off.trainer)
        off.trainer.wait()
    for m, attr in off.restore:
        m.__dict__.pop(attr, None)
    for g in off.groups:
        g.views.clear()
    off.pager.close()
    model._wspager = None
    model._wspager_removed = forbid_forward(off.hooked)


_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
                   "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
                   "kaiming_normal_", "orthogonal_", "sparse_")


@contextmanager
def init_empty():
    """Build modules with their parameters on the meta device (no memory)
    and their buffers as usual (so computed buffers such as rotary
    ``inv_freq`` are real).  Initialisers do nothing meanwhile: a layer's
    parameter is allocated before it can be moved to meta, and an untouched
    allocation costs no resident memory, while a random init of an
    embedding would cost its whole size for a moment."""
    orig = torch.nn.Module.register_parameter
    inits = {n: getattr(torch.nn.init, n) for n in _INIT_FUNCTIONS if hasattr(torch.nn.init, n)}

    def register(self, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        return orig(self, name, param)

    def skip(tensor, *args, **kwargs):
        return tensor
    torch.nn.Module.register_parameter = register
    for n in inits:
        setattr(torch.nn.init, n, skip)
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = orig
        for n, f in inits.items():
            setattr(torch.nn.init, n, f)


def _is_pack(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "manifest.wspm"))


def _pack_for(checkpoint: str, log, model=None) -> str:
    """The pack cached beside a checkpoint directory (``DIR.wsp``),
    converted again when any input is newer than it.  A directory with
    only PyTorch .bin shards is read as transformers reads it, through a
    temporary safetensors copy removed afterwards."""
    out = checkpoint.rstrip("/") + ".wsp"
    inputs = [os.path.join(checkpoint, f) for f in os.listdir(checkpoint)
              if f.endswith(".safetensors") or f == "model.safetensors.index.json"]
    bins = [] if inputs else _loading.bin_files(checkpoint)
    if not inputs and not bins:
        raise FileNotFoundError(f"{checkpoint}: no .safetensors and no pytorch_model.bin files "
                                "(is it a checkpoint directory?)")
    manifest = os.path.join(out, "manifest.wspm")
    if os.path.exists(manifest):
        newest = max(os.path.getmtime(p) for p in inputs + bins)
        if os.path.getmtime(manifest) >= newest:
            return out
    source = checkpoint
    if bins:
        import tempfile
        source = tempfile.mkdtemp(prefix=os.path.basename(out) + ".bin-",
                                  dir=os.path.dirname(os.path.abspath(out)))
    try:
        if bins:
            _loading.safetensors_from_bin(bins, source, log)
        progress, done = _loading.progress_bar(checkpoint, out)
        try:
            if model is not None:   # grouped by the modules the hooks sit on
                p = convert(model, source, out, force=os.path.exists(out), log=log,
                            progress=progress)
            else:
                p = _convert(source, out, force=os.path.exists(out), log=log, progress=progress)
        finally:
            done()
    finally:
        if bins:
            import shutil
            shutil.rmtree(source, ignore_errors=True)
    with p:
        ratio = p.summary["raw_bytes"] / max(p.summary["stored_bytes"], 1)
    _loading.notify(log, f"wspager: packed {checkpoint} into {out} ({ratio:.2f}x smaller); "
                         "later loads reuse it while it is newer than the checkpoint")
    return out


def from_pretrained(path: Union[str, bytes, os.PathLike], device=None, *, config=None,
                    host_cache=None, gpu_slots: int = 3, resident: Sequence[str] = (),
                    on_demand: Sequence[str] = (), model_class=None, dtype="auto",
                    train: bool = False, log=None, **pager_options) -> torch.nn.Module:
    """A transformers model whose weights are paged, never loaded whole.

    Parameters
    ----------
    path : path or Hub id
        A checkpoint directory (``config.json`` and safetensors files; the
        pack is made beside it as ``DIR.wsp``, with a progress bar, and
        reused while up to date), or a pack (then give `config`: a
        directory, file or PretrainedConfig).  A path that does not exist
        is an error naming it, unless it can be a Hugging Face Hub id: then
        the Hub's snapshot is used.
    device : "cuda", "cuda:N", "cpu" or None
        None: CUDA when torch has it, else the host backend (logged to the
        "wspager" logger and to `log`).
    model_class : optional
        A transformers Auto class (default ``AutoModelForCausalLM``) or a
        model class (``LlamaForCausalLM``).
    dtype : torch.dtype, str or "auto"
        As transformers' ``from_pretrained`` takes it ("auto": the config's
        dtype, else the checkpoint's).  The model is the one that call
        makes: transformers builds it and computes its buffers; the pack
        gives the weights, each cast to the dtype the model keeps it in
        (on the device, per use, where that differs from the pack's).
    train : bool
        As :func:`offload`: paged parameters train through the pager.
    log : callable(str), optional
        Receives notes: the device chosen, where the pack went, the
        converter's notes on the inputs.
    Other parameters as :func:`offload`.  The generation config is
    ``generation_config.json`` of the checkpoint (or of `config`'s
    directory), loaded as transformers loads it.
    """
    import transformers

    dev = _loading.default_device(device, log)
    path = _loading.local_checkpoint(path, log)
    is_pack = _is_pack(path)
    if is_pack and config is None:
        raise ValueError(f"{path} is a pack: give config= (the checkpoint's config.json or its "
                         "directory)")
    if config is None:
        config = path
    config_dir = None
    if not isinstance(config, transformers.PretrainedConfig):
        config = os.fspath(config)
        config_dir = config if os.path.isdir(config) else os.path.dirname(config)
        config = transformers.AutoConfig.from_pretrained(config)
    cls = model_class or transformers.AutoModelForCausalLM
    with torch.device("meta"):     # module and parameter names (no memory)
        probe = _loading.build_model(cls, config)
    pack = path if is_pack else _pack_for(path, log, probe)
    with Pack(pack) as p:
        tensors = [(t.name, TORCH_DTYPES.get(t.dtype)) for t in p.tensors()]
    dtype = _hf.resolve_dtype(dtype, config, [d for _, d in tensors])
    names = _hf.Names(probe)
    provided = {names(k)[0] for k, _ in tensors}
    # transformers builds the model and computes its buffers; the pack's
    # parameters arrive as placeholders, the rest as transformers makes
    # weights a checkpoint lacks (and reports them as it does)
    model = _hf.skeleton(cls, config, dtype, provided)
    # where it came from, as transformers records it (peft reads it)
    model.config.name_or_path = model.name_or_path = path if not is_pack else (config_dir or path)
    _loading.load_generation_config(model, path if not is_pack else config_dir)
    given = {id(q) for n, q in model.named_parameters(remove_duplicate=False) if n in provided}
    made = [n for n, q in model.named_parameters() if id(q) not in given]
    return offload(model, pack, dev, host_cache=host_cache, gpu_slots=gpu_slots,
                   resident=list(resident) + made, on_demand=on_demand, train=train,
                   **pager_options)
