"""The pager opened while transformers builds the model (from_pretrained).

Cold, nothing is read until a pager is open and told which layers come
first (`_open_pagers`' hint), and `offload` opens it only after the model
exists: on a 6 GB Llama the skeleton and the open took 0.16-0.26 s, the disk
idle meanwhile (bench/torch_ttft.py --timeline).  The layers and the
on-demand set come from the pack and the module structure alone, so the
meta-device probe that from_pretrained builds first gives the same ones:
the pager opens from them on a thread (the library call releases the GIL)
while the skeleton is built, and `offload` takes it when its own plan has
the same on-demand set, else closes it and opens its own."""
import threading
from typing import List, Optional

from . import Pack, Pager
from . import _plan


class EarlyOpen:
    def __init__(self, probe, names, pack, device, resident, on_demand, host_cache, gpu_slots,
                 options):
        from .torch import _open_pagers, _wanted
        with Pack(pack) as p:
            plan = _plan.plan(probe, p, names, set(resident), False, values=False)
        wanted, unknown = _wanted(plan, on_demand)
        self.wanted = wanted   # the plan's layers are the pack's: only this can differ
        self.pagers: Optional[List[Pager]] = None
        if unknown:            # offload reports it
            self.thread = None
            return

        def run():
            try:
                self.pagers = _open_pagers(pack, plan, [device], None, wanted, host_cache,
                                           gpu_slots, options)
            except Exception:   # offload opens again, and reports what fails
                self.pagers = None
        self.thread = threading.Thread(target=run, name="wspager-open", daemon=True)
        self.thread.start()

    def _wait(self) -> Optional[List[Pager]]:
        if self.thread is not None:
            self.thread.join()
        pagers, self.pagers = self.pagers, None
        return pagers

    def take(self, wanted) -> Optional[List[Pager]]:
        """The pagers, where `offload`'s plan has the same on-demand set;
        else None (and they are closed)."""
        pagers = self._wait()
        if pagers is not None and self.wanted != set(wanted):
            self._close(pagers)
            return None
        return pagers

    def discard(self) -> None:
        """The load failed before `offload` took them."""
        self._close(self._wait())

    @staticmethod
    def _close(pagers) -> None:
        for pg in pagers or []:
            pg.close()
