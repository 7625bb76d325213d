"""A thread that does queued work in order, for the data-parallel feed over
the GPUs (_devfeed.py): its forward's thread puts the exchanges there and
waits only for one it needs that is not done yet.  The first failure ends
the thread and is raised to every wait after it; close() lets the thread
finish what was put (every rank put the same collectives: none may be left
unmatched), then ends it."""
from __future__ import annotations

import queue
import threading
from typing import Callable, Optional


class Issuer:
    def __init__(self, run: Callable[[object], None], name: str,
                 setup: Optional[Callable[[], None]] = None):
        self.run, self.setup = run, setup
        self.items: "queue.SimpleQueue" = queue.SimpleQueue()
        self.put_count = self.done = 0
        self.failed: Optional[BaseException] = None
        self.cv = threading.Condition()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def put(self, item) -> int:
        """Queue `item`; its number, for wait()."""
        self.put_count += 1
        self.items.put(item)
        return self.put_count

    def wait(self, n: int) -> None:
        """Until item `n` is done; raises the thread's failure (also for an
        item done before it), or once the thread has ended without it."""
        if self.done < n and self.failed is None:
            with self.cv:
                while self.done < n and self.failed is None:
                    if not self.thread.is_alive():
                        self.failed = RuntimeError("the issuing thread was closed")
                        break
                    self.cv.wait(0.5)
        if self.failed is not None:
            raise self.failed

    def close(self) -> None:
        if self.thread.is_alive():
            self.items.put(_END)
            self.thread.join()

    def _main(self) -> None:
        try:
            if self.setup is not None:
                self.setup()
            while True:
                item = self.items.get()
                if item is _END:
                    return
                self.run(item)
                with self.cv:
                    self.done += 1
                    self.cv.notify_all()
        except BaseException as e:
            with self.cv:
                self.failed = e
                self.cv.notify_all()


_END = object()
