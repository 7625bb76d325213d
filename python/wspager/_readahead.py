"""A thread that reads each rank's shares of the layers ahead of the
exchanges, in their fixed order, for the data-parallel feeds (_group.py,
_devfeed.py): each layer's item once when `once`, else cyclically, at most
`depth` ahead.  A read that fails is handed over in the item's place and
ends the thread: the exchange that needs it raises."""
from __future__ import annotations

import queue
import threading
from typing import Callable, List, Tuple


class ReadAhead:
    def __init__(self, order: List[int], read: Callable[[int], object], once: bool,
                 depth: int, name: str):
        self.order, self.read, self.once = order, read, once
        self.items: "queue.Queue" = queue.Queue(maxsize=max(1, depth))
        self.stop = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        if order:
            self.thread.start()

    def _run(self) -> None:
        k = 0
        while not self.stop and (not self.once or k < len(self.order)):
            layer = self.order[k % len(self.order)]
            try:
                item, failed = (layer, self.read(layer)), False
            except BaseException as e:   # given to the exchange that needs it
                item, failed = (layer, e), True
            while not self.stop:
                try:
                    self.items.put(item, timeout=0.1)
                    break
                except queue.Full:
                    pass
            if failed:
                return
            k += 1

    def get(self) -> Tuple[int, object]:
        """(layer, what read returned, or the exception it raised)."""
        return self.items.get()

    def take(self, layer: int, what: str):
        """What read returned for `layer`, the next item (the taker follows
        the same order); its exception raised again, saying `what`."""
        got_for, item = self.items.get()
        if isinstance(item, BaseException):
            raise RuntimeError(f"{what}: {item}") from item
        assert got_for == layer, (got_for, layer)
        return item

    def close(self) -> None:
        self.stop = True
        while self.thread.is_alive():   # unblock its put, then let it see stop
            try:
                self.items.get(timeout=0.1)
            except queue.Empty:
                pass
