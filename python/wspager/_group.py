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
import time
from typing import Dict, List, Tuple

import torch
import torch.distributed as dist

from . import Pager
from ._readahead import ReadAhead


def agree_min(group, device, value: int) -> int:
    """The smallest of every rank's `value` (a collective on `group`)."""
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return int(t.item())


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


class _Exchange:
    """One layer's all-gather in flight, until the receiver has handed its
    bytes to the pager (`handed` set; `error` if that failed), which it does
    once they are `wanted`."""

    def __init__(self, layer: int, work, whole: torch.Tensor, n: int, mine: int,
                 share: torch.Tensor, wanted: bool):
        self.layer, self.work, self.whole, self.n, self.mine = layer, work, whole, n, mine
        self.share = share                  # alive until sent
        self.wanted = threading.Event()
        if wanted:
            self.wanted.set()
        self.handed = threading.Event()
        self.error = None


class GroupFeed:
    """The layers of `order` (pack indices, the same on every rank) reach
    `pager` by exchange.  A thread reads this rank's shares from the pack
    ahead, in the fixed order (file reads only); the collectives are issued
    by the caller's thread, in the same order, `window` of them ahead of the
    forward, on the caller's group - so they never interleave differently
    on two ranks with the caller's own collectives (gloo, or NCCL through
    the GPU); a second thread waits for each in turn and hands its bytes to
    the pager (a copy of the whole layer: off the forward's thread).  When
    every rank's host tier holds the model each layer is exchanged once;
    otherwise at each use."""

    def __init__(self, pager: Pager, group, order: List[int], window: int = 4):
        self.pager, self.group, self.order = pager, group, list(order)
        self.rank, self.n = dist.get_rank(group), dist.get_world_size(group)
        self.pos = {layer: k for k, layer in enumerate(self.order)}
        self.window = max(1, min(window, len(self.order)))
        nccl = dist.get_backend(group) == "nccl"
        self.wire = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        # The exchanges and their copies run on a stream of their own, so
        # that neither waits for the forward's queued compute, nor the
        # forward for them (NCCL's collectives follow the issuing stream).
        self.side = torch.cuda.Stream(self.wire) if nccl else None
        self.issued: Dict[int, _Exchange] = {}   # in the order issued
        self.done: set = set()
        self.fresh: set = set()     # provided, not yet needed: their loads use the bytes given
        self.last = None            # the layer needed last (a lower one starts a new pass)
        self.seq = 0                # exchanges issued so far (the fixed order, cyclic)
        self.bytes_read = 0         # this rank's own reads of the pack
        self.bytes_received = 0     # stored bytes that came from the other ranks
        self.exchanges = 0
        # Seconds, for finding what a pass waits on (stats() says which).
        self.read_s = self.share_wait_s = self.wait_s = self.provide_s = self.need_s = 0.0
        self.received: "queue.Queue" = queue.Queue()   # _Exchange, then None to stop
        self.fds: Dict[str, int] = {}
        # Once per layer when every rank's host tier holds the whole model
        # (then nothing is evicted), else whenever an acquire needs it: from
        # the smallest rank's tier, so that every rank issues the same
        # collectives.
        pk = pager.pack
        page = pager.page_bytes
        need = sum((L.raw_bytes + page - 1) // page * page for L in pk.layers)
        self.once = need <= agree_min(self.group, self.wire, pager.stats()["host_cache_bytes"])
        self.slots = pager.stats()["gpu_slots"]
        # Over NCCL a share goes up from pinned memory, and making a pinned
        # buffer costs about as much as reading into it (85-98 ms against
        # 118-121 ms a part on two H200s, cold; _devfeed.py): a thread makes
        # the next one while the reader reads.  The receiver lands every
        # layer in one pinned buffer, kept: the pager copies what it is given.
        self.pins = (ReadAhead(self.order, self._pin, self.once, 1, "wspager-share-pins")
                     if nccl else None)
        self.landing = None
        self.reader = ReadAhead(self.order, self._share, self.once, self.window,
                                "wspager-shares")
        self.receiver = threading.Thread(target=self._receive, name="wspager-received",
                                         daemon=True)
        if self.order:   # nothing to exchange: no threads
            self.receiver.start()

    def close(self) -> None:
        self.reader.close()
        if self.pins is not None:
            self.pins.close()
        for ex in self.issued.values():
            ex.wanted.set()
        self.received.put(None)   # after the exchanges issued: each is waited for
        if self.receiver.is_alive():
            self.receiver.join()
        self.issued.clear()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def _bounds(self, layer: int) -> Tuple[str, int, int, int, int, int]:
        """Where `layer`'s stored bytes are, the part size, and this rank's
        part of them [lo, hi)."""
        path, offset, n = self.pager.pack.layer_extent(layer)
        part = (n + self.n - 1) // self.n
        return path, offset, n, part, min(n, self.rank * part), min(n, (self.rank + 1) * part)

    def _pin(self, layer: int) -> torch.Tensor:
        """The pinned buffer of this rank's share of `layer` (zeros)."""
        part = self._bounds(layer)[3]
        return torch.zeros(max(part, 1), dtype=torch.uint8, pin_memory=True)

    def _share(self, layer: int):
        """This rank's part of the layer's stored bytes, read into a tensor
        (zero-padded to the part size; over NCCL the pinning thread's, which
        follows the same order)."""
        path, offset, n, part, lo, hi = self._bounds(layer)
        if self.pins is None:
            share = torch.zeros(max(part, 1), dtype=torch.uint8)
        else:
            share = self.pins.take(layer, "pinned memory for the share")
        fd = self.fds.get(path)
        if fd is None:
            fd = self.fds[path] = os.open(path, os.O_RDONLY)
        view, done = memoryview(share.numpy()), 0
        t0 = time.perf_counter()
        while done < hi - lo:   # straight into the tensor; pread may return less
            got = os.preadv(fd, [view[done:hi - lo]], offset + lo + done)
            if got <= 0:
                raise OSError(f"{path}: the file ended at {offset + lo + done}, "
                              f"{hi - lo - done} bytes short of layer data")
            done += got
        self.bytes_read += hi - lo
        self.read_s += time.perf_counter() - t0
        return share, hi - lo, n

    def _failed(self, layer: int, e: BaseException) -> RuntimeError:
        return RuntimeError(f"wspager: rank {self.rank}: exchanging layer "
                            f"{self.pager.pack.layers[layer].name} with the process group "
                            f"failed (did another rank stop?): {e}")

    def _issue_next(self) -> None:
        t0 = time.perf_counter()
        layer, got = self.reader.get()
        self.share_wait_s += time.perf_counter() - t0
        if isinstance(got, BaseException):
            raise self._failed(layer, got) from got
        share, mine, n = got
        self.seq += 1
        if self.side is None:   # gloo: straight into the parts of one buffer
            whole = torch.empty(self.n * share.numel(), dtype=torch.uint8)
            work = dist.all_gather(list(whole.chunk(self.n)), share, group=self.group,
                                   async_op=True)
        else:
            with torch.cuda.stream(self.side):
                w = share.to(self.wire, non_blocking=True)
                whole = torch.empty(self.n * w.numel(), dtype=torch.uint8, device=self.wire)
                work = dist.all_gather_into_tensor(whole, w, group=self.group, async_op=True)
        # Handed over as soon as it arrives when the host tier holds the
        # model; else only when needed: a layer present in a smaller tier
        # when its bytes arrive takes none of them, and could be evicted
        # before its use and read from the disk after all.
        ex = _Exchange(layer, work, whole, n, mine, share, wanted=self.once)
        self.issued[layer] = ex
        self.received.put(ex)

    def _hand_over(self, ex: _Exchange) -> None:
        """Wait for `ex` (only for it: not for the forward's compute) and,
        once wanted, hand its bytes to the pager, whose load starts now."""
        if self.side is None:
            ex.work.wait()
            got = ex.whole[:ex.n]
        else:
            with torch.cuda.device(self.wire), torch.cuda.stream(self.side):
                ex.work.wait()   # the side stream waits for the collective
                if self.landing is None:   # the largest layer's size, once
                    largest = max(self.pager.pack.layer_extent(k)[2] for k in self.order)
                    self.landing = torch.empty(largest, dtype=torch.uint8, pin_memory=True)
                got = self.landing[:ex.n]
                got.copy_(ex.whole[:ex.n], non_blocking=True)
                copied = torch.cuda.Event()
                copied.record()
            copied.synchronize()
        ex.wanted.wait()
        t0 = time.perf_counter()
        self.pager.provide(ex.layer, got)
        self.provide_s += time.perf_counter() - t0

    def _receive(self) -> None:
        """The receiver's thread: the exchanges in the order issued."""
        while True:
            ex = self.received.get()
            if ex is None:
                return
            try:
                self._hand_over(ex)
            except BaseException as e:   # given to the acquire that needs it
                ex.error = e
            ex.whole = ex.share = None
            ex.handed.set()

    def _finish(self, layer: int) -> None:
        """`layer`'s exchange handed over: wait for it if it is not."""
        for ex in self.issued.values():   # those issued before it too: the
            ex.wanted.set()               # receiver takes them in order
            if ex.layer == layer:
                break
        ex = self.issued.pop(layer)
        t0 = time.perf_counter()
        ex.handed.wait()
        self.wait_s += time.perf_counter() - t0
        if ex.error is not None:
            raise self._failed(layer, ex.error) from ex.error
        self.bytes_received += ex.n - ex.mine
        self.exchanges += 1
        self.done.add(layer)
        self.fresh.add(layer)

    def _finish_arrived(self) -> None:
        """Count as arrived the exchanges issued ahead that are handed over
        already, oldest first, without waiting."""
        while self.issued:
            layer, ex = next(iter(self.issued.items()))
            if not ex.handed.is_set():
                return
            self._finish(layer)

    def _fill_ahead(self, layer: int) -> None:
        """Explicit read-ahead of the next layers in order, only those whose
        bytes the pager has (its own read-ahead is off: it would read them
        from the disk): into slots now, as many as a lone pager fills ahead
        (all slots but the one in use; more would evict each other)."""
        k, have = self.pos[layer], self.done if self.once else self.fresh
        for d in range(1, min(self.window, self.slots - 1) + 1):
            nxt = self.order[(k + d) % len(self.order)]
            if nxt in have:
                self.pager.prefetch(nxt)

    def _more(self) -> bool:
        return not self.once or self.seq < len(self.order)

    def _room(self) -> bool:
        """Whether the next exchange may be issued ahead of need: at most
        `window` layers ahead, exchanged or not.  That count is the same on
        every rank (an exchange arriving early only moves a layer from
        issued to fresh), so every rank issues the same collectives."""
        return len(self.issued) + len(self.fresh) < self.window and self._more()

    def need(self, layer: int) -> None:
        """Before `layer` is acquired: its bytes handed to the pager (unless
        known present), the next exchanges issued, and the next layers
        moved up the tiers where their bytes are at hand."""
        if layer not in self.pos:
            return
        t0 = time.perf_counter()
        try:
            self._need(layer)
        finally:
            self.need_s += time.perf_counter() - t0

    def _need(self, layer: int) -> None:
        if not self.once and self.last is not None and self.pos[layer] < self.pos[self.last]:
            # A new pass: each layer is exchanged again, but those exchanged
            # ahead for it are here already.
            self.done = set(self.fresh)
        self.last = layer
        if layer not in self.done:
            while layer not in self.issued and self._more():
                self._issue_next()
            if layer in self.issued:
                self._finish(layer)
        self.fresh.discard(layer)
        self._finish_arrived()
        while self._room():
            self._issue_next()
        self._fill_ahead(layer)

    def stats(self) -> Dict[str, float]:
        """Counts, and seconds: the reader's file reads (read_s); the
        caller's time in need() (need_s), of which waiting for the reader
        (share_wait_s) and for exchanges to be handed over
        (exchange_wait_s); the receiver's time in handing bytes to the
        pager (provide_s)."""
        return {"bytes_read": self.bytes_read, "bytes_received": self.bytes_received,
                "exchanges": self.exchanges, "once": int(self.once),
                "read_s": self.read_s, "share_wait_s": self.share_wait_s,
                "exchange_wait_s": self.wait_s, "provide_s": self.provide_s,
                "need_s": self.need_s}


class GradientSum:
    """Data-parallel training: after each backward (outside
    :func:`wspager.torch.no_sync`, and outside the ``no_sync`` of a
    DistributedDataParallel wrapping the model), every rank's gradients
    are summed over the group and divided by its size, as
    DistributedDataParallel averages them, before anything reads them
    (clipping, the step): the paged layers' fp32 accumulators in the
    pager, and the ``.grad`` of parameters kept on the device (those a DDP
    does not average itself).  Every rank then steps the same masters
    alike."""

    def __init__(self, group, resident: List[torch.nn.Parameter]):
        self.group, self.resident = group, resident
        self.n = dist.get_world_size(group)
        nccl = dist.get_backend(group) == "nccl"
        self.wire = torch.device("cuda", torch.cuda.current_device()) if nccl else None
        self.no_sync = False       # inside wspager.torch.no_sync
        self.ddp = None            # weakref to a DistributedDataParallel wrapping the model
        self.summed = 0            # backward passes whose gradients were averaged

    def _sum(self, t: torch.Tensor) -> None:
        if self.wire is None or t.device == self.wire:
            dist.all_reduce(t, group=self.group)
        else:   # NCCL reduces device memory: through the GPU and back
            w = t.to(self.wire)
            dist.all_reduce(w, group=self.group)
            t.copy_(w)
        t.div_(self.n)

    def after_backward(self, pager, groups) -> None:
        ddp = self.ddp() if self.ddp is not None else None
        if self.no_sync or (ddp is not None and not ddp.require_backward_grad_sync):
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
        self.summed += 1
