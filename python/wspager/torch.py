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
model train as ordinary parameters.  Parameters keep the ``requires_grad``
transformers gave them (torch.matmul picks its algorithm by a weight's
flag, even under ``no_grad``), but paged weights take no gradient unless
the model is offloaded with ``train=True``: without it they are frozen
while a forward records, and get their flag back after; with it their
gradients leave through the pager's write-back path (see
:mod:`wspager._train`, :func:`grads`).
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from . import Pager, Pack, parse_size
from ._optim import AdamW  # noqa: F401  (wspager.torch.AdamW: the native host AdamW)
from . import _ddp, _hf, _loading, _plan
from ._bind import bind
from ._convert import convert, is_pack, pack_for
from ._empty import init_empty
from ._offload import Offload, resolve_device
from ._placement import place
from ._plan import MismatchError, TORCH_DTYPES, inside
from ._probe import FirstForward
from ._saved import SavedWeights
from ._weights import StateDictSource, forbid_forward, guard_conversions

__all__ = ["offload", "remove", "from_pretrained", "convert", "init_empty", "MismatchError",
           "TORCH_DTYPES", "grads", "zero_grad", "no_sync", "parameters", "named_parameters",
           "save", "AdamW",
           "step_in_backward", "paged_parameters"]


def offload(model: torch.nn.Module, pack: Union[str, os.PathLike], device=None, *,
            host_cache=None, gpu_slots: Optional[int] = None, resident: Sequence[str] = (),
            on_demand: Sequence[str] = (), train: bool = False, process_group=None,
            keep_small: bool = True, _early=None, **pager_options) -> torch.nn.Module:
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
    device : "cuda", "cuda:N", "cpu", None, "auto", a list of devices, or a dict
        Where the weights are used; "cpu" runs the host backend; None: CUDA
        when torch has it, else the CPU; "auto": every GPU torch sees.
        Several devices (``["cuda:0", "cuda:1"]``): consecutive blocks go
        to each, balanced by bytes, or
        as an Accelerate-style ``device_map`` places them (module path ->
        device, e.g. ``{"model.embed_tokens": 0, "model.layers.0": 0, ...,
        "lm_head": 1}``); each device has a pager of its own that reads,
        caches and fills its slots with only its own layers (so each layer
        is read from disk once and cached once, and each GPU is fed over its
        own link), and activations move between devices as Accelerate's
        dispatch moves them; outputs come back to the inputs' device.
        `host_cache` is split between the pagers by their layers' bytes.
        Not with ``train=True`` yet.  ``["cpu", "cpu"]`` gives two host
        pagers (how the placement is tested without GPUs).
    host_cache, gpu_slots, **pager_options
        As :class:`wspager.Pager` takes them, except that `host_cache`
        bounds all the pager's host memory here (``host_total=True``: the
        cache, read staging and decode buffers together) unless
        ``host_total=False`` is given.  `gpu_slots` None: 3 on one device;
        over several, enough for four fifths of the layers a GPU serves (so
        that its link streams them while the others compute), at most what
        a quarter of its free memory holds, at least 3.
    resident : names
        Pack layers (or module paths) loaded once into ordinary tensors on
        `device` instead of being paged, e.g. ``["model.embed_tokens"]``.
        Parameters the pack lacks are an error unless named here; then they
        keep the values they have.
    on_demand : names
        Pack layers, or module paths whose layers, are read only when their
        module runs, never ahead of need (task-specific heads).  Routed
        experts are always on demand: a module that never runs is never read.
    keep_small : bool
        Pack layers of at most 1/256 of the largest layer's bytes (a final
        norm) are kept resident, all of them together at most 1/16 of the
        largest layer: paged, each would take a whole GPU slot, a fill and a
        visit at every use.  Not with ``train=True`` (a resident parameter
        trains on the device, not through the pager's fp32 masters) nor a
        `process_group`.  False pages them as any other layer.
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
    process_group : torch.distributed process group, optional
        Data parallel (one process a device, every process the whole
        model, ``torchrun``): each rank reads only its 1/N share of each
        layer's stored bytes, from its own copy of the pack or a shared one,
        and the ranks all-gather the shares (gloo on the CPU, NCCL between
        GPUs), so the group reads the pack once, not N times.  Every rank
        must offload the same pack (their manifests are compared at open)
        with the same options, and run the same forwards.  For inference
        over NCCL with a GPU that decodes the pack (exponent-rANS), the
        shares meet on the GPUs: each rank sends only its share over its
        host->GPU link and decodes the whole layer from the gathered
        shares, at every use; the shares stay in pinned host memory when
        this rank's part of the model fits `host_cache` beside the pager's
        own (then the pack is read once); the exchanges run over a group
        of their own (``new_group`` over the same ranks, with its
        timeout).  Otherwise a layer is exchanged once when every rank's
        host tier holds the model, else at each use, and reaches the GPU
        from the host tier.  Layers read only sometimes (routed experts,
        `on_demand`) are read by each rank.  A collective that fails (a
        rank stopped) raises on the others within the group's timeout
        (``init_process_group(timeout=...)``).  One device a process.
        With ``train=True``: after each backward the gradients are summed
        over the group and divided by its size (as DistributedDataParallel
        averages them) before clipping or a step reads them, and every rank
        steps its masters alike; :func:`no_sync` skips that for the
        micro-batches before the last of an accumulation.  To share the
        step and its state (ZeRO-1): torch's
        ``ZeroRedundancyOptimizer(parameters(model),
        optimizer_class=AdamW)`` (its process group gloo where masters are
        host memory and the group is NCCL).  Not with routed experts or
        :func:`step_in_backward` yet.

        torch's ``DistributedDataParallel`` (and transformers' Trainer,
        which wraps in it) may wrap the model, with or without a process
        group here: paged parameters are named in
        ``_ddp_params_and_buffers_to_ignore``, so DDP averages only what it
        owns (adapters, resident parameters); each rank's pack is compared
        over DDP's group when it is built; with ``train=True`` the pager
        averages the paged gradients over this group, or DDP's, outside
        DDP's ``no_sync`` (:mod:`wspager._ddp`).

    Returns the model, hooked.  Every disagreement between pack and model
    (missing tensors, shapes, tensors that match nothing, buffers without
    a value) is found before anything is bound and raised as one
    :class:`MismatchError`.
    """
    if getattr(model, "_wspager", None) is not None:
        raise ValueError("this model is already offloaded (wspager.torch.remove first)")
    for h in model.__dict__.pop("_wspager_removed", []):   # offloaded again after remove
        h.remove()
    devices, device_map = _devices(device)
    if len(devices) > 1 and train:
        raise NotImplementedError("train=True over several devices is not supported yet: "
                                  "offload to one device to train")
    if process_group is not None and len(devices) > 1:
        raise NotImplementedError("process_group: one device a process (not several devices "
                                  "in each)")
    dev = devices[0]
    names = _hf.Names(model)
    with Pack(pack) as p:
        plan = _plan.plan(model, p, names, set(resident), train)
        path = p.path
    wanted, unknown = _wanted(plan, on_demand)
    if unknown:
        raise MismatchError(f"{path}: on_demand names no pack layer: {', '.join(unknown)}")
    if keep_small and not train and process_group is None:
        _plan.keep_small(plan, wanted)
    if process_group is not None:
        from ._group import check_same_pack
        check_same_pack(process_group, path)
        pager_options["prefetch"] = False   # every layer comes by exchange or on demand
        # The exchanges are built around what the GPU decodes (packed parts
        # meet on the GPUs or in the host tier): no per-rank trial of raw
        # copies, which would pin memory on every rank at once mid-run.
        pager_options.setdefault("host_decode", False)
    homes = path_device = None
    if len(devices) > 1:
        homes, path_device = place(model, plan.layers, devices, device_map)
    pagers = _early.take(wanted) if _early is not None else None
    if pagers is None:
        pagers = _open_pagers(pack, plan, devices, homes, wanted, host_cache, gpu_slots,
                              pager_options)
    off = Offload(model, pagers[0], dev)
    off.names = names
    off.pagers = pagers
    off.pack_path = path
    if homes is not None:
        off.homes = {i: (pagers[k], devices[k]) for i, k in homes.items()}
        off.path_device = path_device
    try:
        if process_group is not None:
            from ._devfeed import DeviceFeed, usable
            from ._group import GroupFeed
            order = [i for i in sorted(plan.layers) if plan.layers[i].name not in wanted]
            # Inference over NCCL with GPU decode: the parts meet on the
            # GPUs; else (gloo, host decode, training) in the host tier.
            if not train and usable(pagers[0], process_group, order):
                off.feed = DeviceFeed(pagers[0], process_group, order, budget=None
                                      if host_cache is None else parse_size(host_cache))
            else:
                off.feed = GroupFeed(pagers[0], process_group, order)
        bind(model, off, plan)
        off.handles += StateDictSource(off, model).attach(model)
        off.handles += _ddp.attach(off, model)
        off.saved = SavedWeights(off, model)
        guard_conversions(off, model)
        off.handles += FirstForward(off).attach(model)
        if train:
            from ._train import Trainer
            off.trainer = Trainer(off, model)
            if process_group is not None:
                if off.experts:
                    raise NotImplementedError("process_group with train=True: routed experts "
                                              "(each rank routes its own tokens) are not "
                                              "supported yet")
                from ._group import GradientSum
                tr = off.trainer
                resident = [p for p in model.parameters() if p.requires_grad and
                            id(p) not in tr.by_param and id(p) not in tr.stacked]
                tr.gsum = GradientSum(process_group, resident)
    except BaseException:
        for h in off.handles:
            h.remove()
        if off.feed is not None:
            off.feed.close()
        for pg in off.pagers:
            pg.close()
        raise
    model._wspager = off
    return model


def _wanted(plan, on_demand) -> Tuple[set, List[str]]:
    """The pack layers read only when their module runs (routed experts,
    and the layers `on_demand` names), and the names in it that match no
    layer."""
    wanted = set(plan.on_demand())
    unknown = []
    for prefix in on_demand:
        hit = [L.name for i, L in plan.layers.items() if inside(L.name, prefix) or any(
            inside(e.name, prefix) for e in plan.paged.get(i, []) + plan.kept.get(i, []))]
        wanted.update(hit)
        if not hit:
            unknown.append(prefix)
    return wanted, unknown


def _devices(device) -> Tuple[List[torch.device], Optional[Dict[str, torch.device]]]:
    """The devices `device` names, in order, and the device_map it is (or
    None).  Accelerate's device_map values: GPU numbers or device names;
    "auto": every GPU torch sees (the host backend when it sees none)."""
    if isinstance(device, str) and device == "auto":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        device = [f"cuda:{i}" for i in range(n)] if n > 1 else None
    if isinstance(device, dict):
        if not device:
            raise ValueError("device_map is empty")
        bad = [v for v in device.values() if str(v) in ("disk", "meta")]
        if bad:
            raise ValueError(f"device_map: {bad[0]!r} is not a device wspager pages to "
                             "(the pack on disk is the disk tier already)")
        dmap = {str(k): resolve_device(f"cuda:{v}" if isinstance(v, int) else v)
                for k, v in device.items()}
        devices = list(dict.fromkeys(dmap.values()))
        return devices, (dmap if len(devices) > 1 else None)
    if isinstance(device, (list, tuple)):
        if not device:
            raise ValueError("device: an empty list")
        devices = [resolve_device(f"cuda:{d}" if isinstance(d, int) else d) for d in device]
        cuda = [d for d in devices if d.type == "cuda"]
        if len(set(cuda)) != len(cuda):
            raise ValueError(f"device: {list(map(str, devices))} names a GPU twice")
        return devices, None
    return [resolve_device(_loading.default_device(device))], None


def _slots_for(device: torch.device, layers) -> int:
    """Slots for a device among several: four fifths of the layers it
    serves, so that its link streams ahead while the devices before it
    compute (two GPUs of 10 layers each, against one GPU: 1.37x with 3
    slots, 1.83x with 5, 1.89x with 8), bounded by a quarter of its free
    memory over its largest layer; at least 3."""
    want = (len(layers) * 4 + 4) // 5
    if device.type == "cuda" and layers:
        free, _ = torch.cuda.mem_get_info(device)
        largest = max(L.raw_bytes for L in layers) or 1
        want = min(want, free // 4 // largest)
    return max(3, int(want))


def _pager_notice(message: str) -> None:
    _loading.logger.info("wspager: %s", message)


def _open_pagers(pack, plan, devices, homes, wanted, host_cache, gpu_slots, options):
    """A pager a device (homes: pack layer -> position in `devices`), each
    reading ahead only its own layers (the others are on demand to it: it
    never reads them); `host_cache` split by the raw bytes each serves, and
    bounding all of a pager's host memory unless ``host_total=False``."""
    # host_cache: what a user budgets RAM for; the library's notices (who
    # decodes, pinning refused, ...) to the "wspager" logger unless given
    options = {"host_total": True, "log": _pager_notice, **options}
    pagers: List[Pager] = []
    names = {i: L.name for i, L in plan.layers.items()}
    total = sum(L.raw_bytes for L in plan.layers.values()) or 1
    try:
        for k, d in enumerate(devices):
            mine = [i for i in names if homes is None or homes[i] == k]
            others = {names[i] for i in names if homes is not None and homes[i] != k}
            budget = host_cache
            if host_cache is not None and homes is not None:
                share = sum(plan.layers[i].raw_bytes for i in mine) / total
                budget = max(int(parse_size(host_cache) * share), 1 << 20)
            slots = gpu_slots
            if slots is None:
                slots = 3 if homes is None else _slots_for(d, [plan.layers[i] for i in mine])
            pagers.append(Pager(pack, device="host" if d.type == "cpu" else d.index,
                                host_cache=budget, gpu_slots=slots,
                                on_demand=sorted(set(wanted) | others), **options))
    except BaseException:
        for pg in pagers:
            pg.close()
        raise
    # Cold, a pager would start reading at the first forward, after the
    # hooks are put on (0.5-0.9 s for a 6 GB Llama on an H100): say now that
    # the forward takes each pager's layers in pack order, so that they are
    # read meanwhile (the first token, cold, went from 1.34x to 1.12x the
    # pack's disk read: bench/torch_ttft.py).  What the tiers cannot hold
    # is dropped; from the second forward the learned order leads.
    if options.get("prefetch", True):
        for k, pg in enumerate(pagers):
            pg.hint_next([i for i in sorted(names) if (homes is None or homes[i] == k)
                          and names[i] not in wanted])
    return pagers


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


@contextlib.contextmanager
def no_sync(model: torch.nn.Module):
    """Within it, backward passes of a model offloaded with a process group
    and ``train=True`` leave their gradients local (accumulating), as
    DistributedDataParallel's ``no_sync``: the first backward after it sums
    everything accumulated over the ranks.  A model wrapped in DDP follows
    DDP's own ``no_sync`` (which also covers what DDP averages)."""
    tr = _trainer(model)
    if tr.gsum is None:
        yield
        return
    was, tr.gsum.no_sync = tr.gsum.no_sync, True
    try:
        yield
    finally:
        tr.gsum.no_sync = was


def zero_grad(model: torch.nn.Module) -> None:
    """Start the gradient accumulators of every paged layer over: the next
    backward's gradients replace what they hold, and ``grads(model)`` reads
    zeros until then.  As torch's own ``zero_grad()``, the ``.grad`` of the
    paged parameters (and of their masters, :func:`parameters`) is set to
    None; the next backward binds them again."""
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


def paged_parameters(model: torch.nn.Module) -> set:
    """The parameters of `model` (an offloaded model, or any module
    holding one, such as peft's wrapper) whose weights the pager holds:
    placeholders that a framework sharding or broadcasting parameters must
    leave alone.  torch's FSDP2 over a paged model::

        fully_shard(model, ignored_params=wspager.torch.paged_parameters(model))

    (DistributedDataParallel finds them itself.)"""
    from ._ddp import offloaded_in, paged_ids
    ids = set().union(*(paged_ids(off) for off in offloaded_in(model)))
    if not ids:
        raise ValueError("paged_parameters: this model holds no offloaded model")
    return {p for p in model.parameters() if id(p) in ids}


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
    for a global clip, use :func:`parameters` with an optimizer on the host.
    Returns an object whose ``step()`` waits until the last layers' new
    weights are in the pager (the next forward also does; their masters and
    state may still be on their way out) and whose ``zero_grad()`` does
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
        g.slot_views.clear()
    if off.feed is not None:
        off.feed.close()
    for pg in off.pagers:
        pg.close()
    model._wspager = None
    model._wspager_removed = forbid_forward(off.hooked)


def from_pretrained(path: Union[str, bytes, os.PathLike], device=None, *, config=None,
                    host_cache=None, gpu_slots: Optional[int] = None, resident: Sequence[str] = (),
                    on_demand: Sequence[str] = (), model_class=None, dtype="auto",
                    train: bool = False, keep_small: bool = True, log=None,
                    **pager_options) -> torch.nn.Module:
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
    device : "cuda", "cuda:N", "cpu", None, or several devices
        None: CUDA when torch has it, else the host backend (logged to the
        "wspager" logger and to `log`).  Several: a list or a device_map,
        as :func:`offload` takes them.
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

    several = isinstance(device, (list, tuple, dict)) or device == "auto"
    dev = device if several else _loading.default_device(device, log)
    path = _loading.local_checkpoint(path, log)
    given_pack = is_pack(path)
    if given_pack and config is None:
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
    pack = path if given_pack else pack_for(path, log, probe)
    with Pack(pack) as p:
        tensors = [(t.name, tuple(t.shape), TORCH_DTYPES.get(t.dtype)) for t in p.tensors()]
    dtype = _hf.resolve_dtype(dtype, config, [d for _, _, d in tensors])
    names = _hf.Names(probe)
    provided = names.provided([t for t in tensors if t[2] is not None])
    # the pagers' notices as the loader's notes: to `log` and the logger
    pager_options.setdefault("log", lambda m: _loading.notify(log, f"wspager: {m}"))
    early = _open_early(probe, names, pack, dev, several, train, provided, resident, on_demand,
                        host_cache, gpu_slots, pager_options)
    try:
        # transformers builds the model and computes its buffers; the
        # pack's parameters arrive as placeholders, the rest as transformers
        # makes weights a checkpoint lacks (and reports them as it does)
        model = _hf.skeleton(cls, config, dtype, provided)
        # where it came from, as transformers records it (peft reads it)
        model.config.name_or_path = model.name_or_path = \
            path if not given_pack else (config_dir or path)
        _loading.load_generation_config(model, path if not given_pack else config_dir)
        given = {id(q) for n, q in model.named_parameters(remove_duplicate=False)
                 if n in provided}
        made = [n for n, q in model.named_parameters() if id(q) not in given]
        return offload(model, pack, dev, host_cache=host_cache, gpu_slots=gpu_slots,
                       resident=list(resident) + made, on_demand=on_demand, train=train,
                       keep_small=keep_small, _early=early, **pager_options)
    except BaseException:
        if early is not None:
            early.discard()
        raise


def _open_early(probe, names, pack, dev, several, train, provided, resident, on_demand,
                host_cache, gpu_slots, pager_options):
    """The pager opened now, on a thread, from the probe's plan, so that
    the pack is read while the model is built (_early.py); None where
    offload would open another kind (several devices, a process group,
    training) or the probe's plan fails (offload reports it)."""
    if several or train or pager_options.get("process_group") is not None or \
            not pager_options.get("prefetch", True):
        return None
    from ._early import EarlyOpen
    made = [n for n, _ in probe.named_parameters() if n not in provided]
    try:
        devices, _ = _devices(dev)
        return EarlyOpen(probe, names, pack, devices[0], list(resident) + made, on_demand,
                         host_cache, gpu_slots, pager_options)
    except Exception:
        return None
