"""Data parallel over a torch.distributed process group: every rank runs
the whole model, so every rank needs every layer.  Instead of each reading
the whole pack, each rank reads 1/N of each layer's stored (compressed)
bytes and the ranks all-gather the parts (gloo, or NCCL through the GPUs);
each pager gets the whole layer through ``Pager.provide`` and decodes it as
if it had read it (wsp_provide(3)).

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
import queue
import threading
from typing import Dict, List, Tuple

import torch
import torch.distributed as dist

from . import Pager


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
    `pager` by exchange.  A thread reads this rank's shares from the pack
    ahead, in the fixed order (file reads only); the collectives are issued
    by the caller's thread, in the same order, `window` of them ahead of the
    forward, on the caller's group - so they never interleave differently
    on two ranks with the caller's own collectives (gloo, or NCCL through
    the GPU).  When every rank's host tier holds the model each layer is
    exchanged once; otherwise at each use."""

    def __init__(self, pager: Pager, group, order: List[int], window: int = 4):
        self.pager, self.group, self.order = pager, group, list(order)
        self.rank, self.n = dist.get_rank(group), dist.get_world_size(group)
        self.pos = {layer: k for k, layer in enumerate(self.order)}
        self.window = max(1, min(window, len(self.order)))
        nccl = dist.get_backend(group) == "nccl"
        self.wire = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        self.issued: Dict[int, tuple] = {}
        self.done: set = set()
        self.seq = 0                # exchanges issued so far (the fixed order, cyclic)
        self.bytes_read = 0         # this rank's own reads of the pack
        self.bytes_received = 0     # stored bytes that came from the other ranks
        self.exchanges = 0
        self.fds: Dict[str, int] = {}
        # Once per layer when every rank's host tier holds the whole model
        # (then nothing is evicted), else whenever an acquire needs it.
        pk = pager.pack
        page = pager.page_bytes
        need = sum((L.raw_bytes + page - 1) // page * page for L in pk.layers)
        fits = torch.tensor([1 if need <= pager.stats()["host_cache_bytes"] else 0])
        self.once = self._agree(fits)
        self.shares: "queue.Queue" = queue.Queue(maxsize=self.window)
        self.stop = False
        self.reader = threading.Thread(target=self._read_ahead, name="wspager-shares",
                                       daemon=True)
        if self.order:   # nothing to exchange: no reader
            self.reader.start()

    def _agree(self, flag: torch.Tensor) -> bool:
        t = flag.to(self.wire)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return bool(t.item())

    def close(self) -> None:
        self.stop = True
        while self.reader.is_alive():   # unblock its put, then let it see stop
            try:
                self.shares.get(timeout=0.1)
            except queue.Empty:
                pass
        for layer in list(self.issued):
            try:
                self.issued.pop(layer)[0].wait()
            except Exception:   # closing after a failure: nothing left to report to
                pass
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def _share(self, layer: int):
        """This rank's part of the layer's stored bytes, read into a tensor
        (zero-padded to the part size; pinned for a GPU's copy)."""
        path, offset, n = self.pager.pack.layer_extent(layer)
        part = (n + self.n - 1) // self.n
        lo, hi = min(n, self.rank * part), min(n, (self.rank + 1) * part)
        share = torch.zeros(max(part, 1), dtype=torch.uint8,
                            pin_memory=self.wire.type == "cuda")
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
        return share, hi - lo, n

    def _read_ahead(self) -> None:
        """The shares, in the order the exchanges are issued, `window` ahead."""
        k = 0
        while not self.stop and (not self.once or k < len(self.order)):
            layer = self.order[k % len(self.order)]
            try:
                item = (layer,) + self._share(layer)
            except BaseException as e:   # given to the exchange that needs it
                item = (layer, e)
            while not self.stop:
                try:
                    self.shares.put(item, timeout=0.1)
                    break
                except queue.Full:
                    pass
            if len(item) == 2:
                return
            k += 1

    def _failed(self, layer: int, e: BaseException) -> RuntimeError:
        return RuntimeError(f"wspager: rank {self.rank}: exchanging layer "
                            f"{self.pager.pack.layers[layer].name} with the process group "
                            f"failed (did another rank stop?): {e}")

    def _issue_next(self) -> None:
        item = self.shares.get()
        layer = item[0]
        if len(item) == 2:
            raise self._failed(layer, item[1]) from item[1]
        _, share, mine, n = item
        if not self.once and self.seq and self.seq % len(self.order) == 0:
            self.done.clear()   # a new pass: each layer is exchanged again
        self.seq += 1
        w = share.to(self.wire, non_blocking=True)
        parts = [torch.empty_like(w) for _ in range(self.n)]
        work = dist.all_gather(parts, w, group=self.group, async_op=True)
        self.issued[layer] = (work, parts, n, mine, share)   # share: alive until sent

    def _finish(self, layer: int) -> None:
        work, parts, n, mine, _ = self.issued.pop(layer)
        try:
            work.wait()
            whole = torch.cat(parts)[:n]
            if whole.device.type != "cpu":
                whole = whole.cpu()
        except Exception as e:
            raise self._failed(layer, e) from e
        self.bytes_received += n - mine
        self.pager.provide(layer, whole)
        self.exchanges += 1
        self.done.add(layer)

    def _more(self) -> bool:
        return not self.once or self.seq < len(self.order)

    def need(self, layer: int) -> None:
        """Before `layer` is acquired: its bytes handed to the pager (unless
        known present), and the next exchanges issued."""
        if layer not in self.pos or layer in self.done:
            return
        while layer not in self.issued:
            if not self._more():
                return   # exchanged once already (once: never evicted)
            self._issue_next()
        self._finish(layer)
        while len(self.issued) < self.window and self._more():
            self._issue_next()

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
        ranks = have if self.wire is None else have.to(self.wire)
        dist.all_reduce(ranks, group=self.group)   # how many ranks have each: 0 or all
        ranks = ranks.tolist()
        if any(k not in (0, self.n) for k in ranks):
            odd = [g.name for g, k in zip(groups, ranks) if k not in (0, self.n)]
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
