"""Data parallel over NCCL with the exchange on the GPUs: each rank reads
1/N of each layer (``Pack.read_part``: whole chunks, checked by their
reader), sends only that part over its own host->GPU link, the parts are
all-gathered between the GPUs, and each pager decodes the whole layer from
device memory into a slot (``Pager.provide_device``).  So each link carries
1/N of the weights, where with :class:`wspager._group.GroupFeed` every link
carries all of them.

The parts are kept in pinned host memory when this rank's share of the
model fits its host budget beside the pager's own (then the pack is read
once, and each later pass only exchanges); otherwise they are read again
at every use.  Every rank issues the same collectives in the same order:
they follow the model's order of the layers, driven by the sequence of the
forward's acquires, which is the same on every rank (:class:`Schedule`).
The parts hold whole chunks, so a layer's parts differ in size (a
one-chunk layer is one part): which rank reads which part is chosen layer
by layer so that the ranks read about as much.  For
inference: a backward pass needs the layers in the other order (training
uses GroupFeed).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Dict, List, Optional

import torch
import torch.distributed as dist

from . import Pager
from ._group import agree_min
from ._issuer import Issuer
from ._readahead import ReadAhead


def usable(pager: Pager, group, order: List[int]) -> bool:
    """Whether every rank's pager can take every layer of `order` from
    device memory (NCCL, a GPU that decodes the pack): agreed on all ranks."""
    if dist.get_backend(group) != "nccl" or not order:
        return False
    ok = all(pager.provide_device(i, None) for i in order)
    return agree_min(group, torch.device("cuda", torch.cuda.current_device()), int(ok)) == 1


def group_timeout(group, dev: torch.device):
    """The timeout `group` was made with (None, torch's default, where this
    torch does not say)."""
    try:
        return group._get_backend(dev).options._timeout
    except (AttributeError, RuntimeError):
        return None


class Schedule:
    """Which exchanges a feed issues, and when: the layers of `order` in
    that order, cyclically, `window` of them ahead of the one needed.
    need(layer) issues up to it (those skipped before it are dropped),
    then refills the window; a layer needed again within one cycle of the
    order (tied embeddings: the head uses the embedding's layer) is not
    exchanged: its next exchange is a cycle away, so the pager brings it
    itself (`repeats`).  Everything depends on the sequence of needs
    alone, so every rank issues the same exchanges.  `issue(layer)`
    starts the exchange (DeviceFeed queues it for its thread); need() is
    reach() and then refill_one() until the window is full."""

    def __init__(self, order: List[int], window: int, issue):
        self.order, self.window, self.issue = list(order), window, issue
        self.pos = set(self.order)
        self.ahead: "OrderedDict[int, None]" = OrderedDict()   # issued, not yet needed
        self.seq = 0                # exchanges issued
        self.used: Dict[int, int] = {}   # layer -> self.seq when it was last needed
        self.repeats = 0

    def _next(self) -> None:
        layer = self.order[self.seq % len(self.order)]
        self.seq += 1
        self.issue(layer)
        self.ahead[layer] = None

    def need(self, layer: int) -> bool:
        """Before `layer` is acquired; False when it is not exchanged."""
        if not self.reach(layer):
            return False
        while self.refill_one():
            pass
        return True

    def reach(self, layer: int) -> bool:
        """`layer`'s exchange issued (with those before it in order), or
        False when it is not exchanged; the window is not refilled (a
        refill after a False issues nothing that need() would not)."""
        if layer not in self.pos:
            return False
        if layer not in self.ahead and \
                self.seq - self.used.get(layer, -len(self.order)) < len(self.order):
            self.repeats += 1
            return False
        self.used[layer] = self.seq
        for _ in range(len(self.order)):   # at most a cycle to reach it
            if layer in self.ahead:
                break
            self._next()
        while self.ahead:   # those issued before it were not needed this pass
            first = next(iter(self.ahead))
            del self.ahead[first]
            if first == layer:
                break
        return True

    def refill_one(self) -> bool:
        """One more exchange issued if the window is not full."""
        if len(self.ahead) >= self.window:
            return False
        self._next()
        return True


class DeviceFeed:
    """The layers of `order` (pack indices, the same on every rank) reach
    `pager` through the GPUs: `window` of them in flight ahead of the
    forward, each exchanged and handed to the pager as soon as it is
    issued (no host waits: the pager's decode follows the exchange's
    stream).

    The forward's thread only decides which exchanges to issue (the
    :class:`Schedule`, bookkeeping) and queues them; a thread of its own
    issues them in that order, on a communicator of its own over the same
    ranks, and counts them done.  The forward waits for a layer only while
    its exchange is not yet issued (never in the steady state: it was
    queued a window ago), and at most the group's timeout: then it raises,
    naming the layer (a collective whose peer stopped may never return).
    The exchanges' host work (a dozen torch calls, the collective, the
    hand-over to the pager) then runs beside the model's, not before it;
    the communicator of their own keeps their collectives out of the
    order of the caller's own, which a second thread on the caller's
    communicator could not keep.  Two more threads make pinned buffers
    and read this rank's parts into them ahead, in the same order."""

    def __init__(self, pager: Pager, group, order: List[int], window: int = 4,
                 budget: Optional[int] = None):
        self.pager, self.group, self.order = pager, group, list(order)
        self.rank, self.n = dist.get_rank(group), dist.get_world_size(group)
        self.dev = torch.device("cuda", torch.cuda.current_device())
        pk = pager.pack
        # Each layer's parts (wspager.Part: where in its packed form, and
        # how many stored bytes their reader reads).
        self.parts: Dict[int, list] = {}
        self.shift: Dict[int, int] = {}   # rank r reads part (r + shift) mod n
        totals = [0] * self.n
        for layer in self.order:
            parts = self.parts[layer] = [pk.read_part(layer, k, self.n) for k in range(self.n)]
            self.shift[layer] = min(range(self.n), key=lambda s: (max(
                totals[r] + parts[(r + s) % self.n].stored_bytes for r in range(self.n)), s))
            for r in range(self.n):
                totals[r] += parts[(r + self.shift[layer]) % self.n].stored_bytes
        self.mine = {i: (self.rank + self.shift[i]) % self.n for i in self.order}
        page = 4096
        share = sum((self.parts[i][self.mine[i]].bytes + page - 1) // page * page
                    for i in self.order)
        # The parts are kept beside the pager's own host memory within
        # `budget` (host_cache: all the host memory the user gives), or,
        # with no budget given, when they fit as much as the host tier.
        st = pager.stats()
        room = st["host_cache_bytes"] if budget is None else \
            budget - st["host_cache_bytes"] - st["staging_bytes"]
        self.keep = share <= agree_min(group, self.dev, room)
        # The slots in use: one for the layer acquired, the rest ahead.
        self.window = max(1, min(window, pager.stats()["gpu_slots"] - 1, len(self.order)))
        self.kept: Dict[int, torch.Tensor] = {}
        self.schedule = Schedule(self.order, self.window, self._queue)
        self.copy = torch.cuda.Stream(self.dev)   # parts up the link
        self.side = torch.cuda.Stream(self.dev)   # the pager's decode follows the exchange
        self.bytes_read = self.reads = self.exchanges = self.not_taken = 0
        self.bytes_received = 0
        self.read_s = self.share_wait_s = self.need_s = 0.0
        # Every rank of `group` makes it, as it makes the feed; the others
        # of the world need not (local synchronization).  With the caller's
        # timeout: a rank that stops must end the others as soon as the
        # caller asked of its own group.
        timeout = group_timeout(group, self.dev)
        self.comm = dist.new_group(dist.get_process_group_ranks(group), backend="nccl",
                                   timeout=timeout, use_local_synchronization=True)
        # NCCL makes a communicator at its first collective, and that waits
        # for every rank with no timeout: made now, while every rank is
        # here, a rank that stops later leaves collectives that time out.
        agree_min(self.comm, self.dev, 1)
        # The forward waits this long for an exchange not yet issued before
        # it says that the thread is stuck (torch's NCCL default: 10 min).
        self.wait_s = timeout.total_seconds() if timeout is not None else 600.0
        # Making a part's pinned buffer costs about as much as reading it
        # (85-98 ms against 118-121 ms a part on two H200s, cold): a
        # thread makes the next one while the reader reads.
        self.pins = ReadAhead(self.order, self._pin, self.keep, 1, "wspager-pins")
        self.reader = ReadAhead(self.order, self._read, self.keep, self.window, "wspager-parts")
        # The exchanges, issued in the order queued; seq[layer]: the
        # number of the layer's latest one.
        self.seq: Dict[int, int] = {}
        self.issuer = Issuer(self._exchange, "wspager-exchanges",
                             setup=lambda: torch.cuda.set_device(self.dev))

    def close(self) -> None:
        self.issuer.close()   # what was queued is issued first: every rank queued the same
        self.reader.close()
        self.pins.close()
        self.kept.clear()
        if self.issuer.stuck:   # in a collective that may never end: left as it is
            return
        try:
            dist.destroy_process_group(self.comm)
        except Exception:   # the default group went first (interpreter exit)
            pass

    def _queue(self, layer: int) -> None:
        """Schedule's issue(): `layer`'s exchange to the issuing thread."""
        self.seq[layer] = self.issuer.put(layer)

    def _pin(self, layer: int) -> torch.Tensor:
        """A pinned buffer for this rank's part of `layer`."""
        return torch.empty(max(self.parts[layer][self.mine[layer]].bytes, 1), dtype=torch.uint8,
                           pin_memory=True)

    def _read(self, layer: int) -> torch.Tensor:
        """This rank's part of `layer`, read and checked, in pinned memory
        (the buffer from the pinning thread, which follows the same order)."""
        part = self.pins.take(layer, "pinned memory for the part")
        t0 = time.perf_counter()
        got = self.pager.pack.read_part(layer, self.mine[layer], self.n, out=part)
        self.read_s += time.perf_counter() - t0
        self.bytes_read += got.stored_bytes
        self.reads += 1
        return part

    def _part(self, layer: int) -> torch.Tensor:
        part = self.kept.get(layer)
        if part is not None:
            return part
        t0 = time.perf_counter()
        got, part = self.reader.get()
        self.share_wait_s += time.perf_counter() - t0
        if isinstance(part, BaseException):
            raise RuntimeError(f"wspager: rank {self.rank}: reading its part of layer "
                               f"{self.pager.pack.layers[got].name} failed: {part}") from part
        assert got == layer, (got, layer)   # the reader follows the same order
        if self.keep:
            self.kept[layer] = part
        return part

    def _exchange(self, layer: int) -> None:
        """`layer`'s part up the link into its place in the packed form,
        the other ranks' parts gathered into theirs, and the whole handed
        to the pager, on the GPU (the thread's)."""
        part = self._part(layer)
        parts = self.parts[layer]
        total = parts[-1].offset + parts[-1].bytes
        mine = parts[self.mine[layer]]
        try:
            with torch.cuda.stream(self.copy):
                whole = torch.empty(max(total, 1), dtype=torch.uint8, device=self.dev)
                # rank r sent part (r + shift) mod n: the parts of unequal
                # sizes are gathered straight into their places
                into = [whole[p.offset:p.offset + p.bytes] for p in
                        (parts[(r + self.shift[layer]) % self.n] for r in range(self.n))]
                into[self.rank].copy_(part[:mine.bytes], non_blocking=True)
                work = dist.all_gather(into, into[self.rank], group=self.comm, async_op=True)
            with torch.cuda.stream(self.side):
                work.wait()   # the side stream waits for the all-gather
                # Not reused on the copy stream before the pager's decode,
                # which the side stream waits for, has read it.
                whole.record_stream(self.side)
                taken = self.pager.provide_device(layer, whole[:total], self.side)
        except BaseException as e:
            raise RuntimeError(f"wspager: rank {self.rank}: exchanging layer "
                               f"{self.pager.pack.layers[layer].name} with the process group "
                               f"failed (did another rank stop?): {e}") from e
        self.exchanges += 1
        self.bytes_received += total - mine.bytes
        if not taken:   # in a slot already, or updated: its acquire brings it
            self.not_taken += 1

    def need(self, layer: int) -> None:
        """Before `layer` is acquired: its exchange queued (with those
        before it in order) and issued by the thread, and the next
        `window` queued behind it."""
        t0 = time.perf_counter()
        mine = 0
        if self.schedule.reach(layer):
            mine = self.seq[layer]
            while self.schedule.refill_one():
                pass
        try:
            self.issuer.wait(mine, self.wait_s)   # raises what ended the issuing thread
        except TimeoutError as e:
            raise RuntimeError(f"wspager: rank {self.rank}: exchanging layer "
                               f"{self.pager.pack.layers[layer].name} with the process group "
                               f"did not start within {self.wait_s:g} s, the group's timeout: "
                               f"the exchanges' thread is still in a collective (did another "
                               f"rank stop?)") from e
        except Exception as e:
            if str(e).startswith("wspager:"):   # _exchange's own, naming the layer
                raise
            raise RuntimeError(f"wspager: rank {self.rank}: the exchanges' thread "
                               f"failed: {e}") from e
        finally:
            self.need_s += time.perf_counter() - t0

    def stats(self) -> Dict[str, float]:
        """Counts (bytes_read: the stored bytes this rank read; reads: parts
        read; exchanges; not_taken: exchanged layers the pager did not
        need; repeats: needs within a cycle, left to the pager) and
        seconds (read_s: the reader's; share_wait_s: the exchanges'
        thread waiting for the reader; need_s: the forward's time in
        need(), waiting for the exchanges' thread)."""
        return {"device": 1, "keep": int(self.keep), "bytes_read": self.bytes_read,
                "bytes_received": self.bytes_received, "reads": self.reads,
                "exchanges": self.exchanges, "not_taken": self.not_taken,
                "repeats": self.schedule.repeats,
                "read_s": self.read_s, "share_wait_s": self.share_wait_s,
                "need_s": self.need_s}
