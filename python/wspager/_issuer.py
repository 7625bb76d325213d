"""A thread that does queued work in order, for the data-parallel feed over
the GPUs (_devfeed.py): its forward's thread puts the exchanges there and
waits only for one it needs that is not done yet.  The first failure ends
the thread and is raised to every wait after it; close() lets the thread
finish what was put (every rank put the same collectives: none may be left
unmatched), then ends it.  A wait given a timeout that passes raises
TimeoutError: the thread is then taken to be stuck (a collective whose
peer stopped may never return), and close() no longer waits for it."""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Optional


class Issuer:
    def __init__(self, run: Callable[[object], None], name: str,
                 setup: Optional[Callable[[], None]] = None):
        self.run, self.setup = run, setup
        self.items: "queue.SimpleQueue" = queue.SimpleQueue()
        self.put_count = self.done = 0
        self.failed: Optional[BaseException] = None
        self.stuck = False
        self.cv = threading.Condition()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def put(self, item) -> int:
        """Queue `item`; its number, for wait()."""
        self.put_count += 1
        self.items.put(item)
        return self.put_count

    def wait(self, n: int, timeout: Optional[float] = None) -> None:
        """Until item `n` is done; raises the thread's failure (also for an
        item done before it), or once the thread has ended without it, or
        TimeoutError once `timeout` seconds have passed without it."""
        if self.done < n and self.failed is None:
            end = None if timeout is None else time.monotonic() + timeout
            with self.cv:
                while self.done < n and self.failed is None:
                    if not self.thread.is_alive():
                        self.failed = RuntimeError("the issuing thread was closed")
                        break
                    left = 0.5 if end is None else min(0.5, end - time.monotonic())
                    if left <= 0:
                        self.stuck = True
                        raise TimeoutError(f"item {n} not done within {timeout:g} s "
                                           f"(item {self.done + 1} still running)")
                    self.cv.wait(left)
        if self.failed is not None:
            raise self.failed

    def close(self) -> None:
        """Runs what was put, then ends the thread; when a wait found the
        thread stuck, returns at once (the thread ends if it ever gets
        unstuck)."""
        if self.thread.is_alive():
            self.items.put(_END)
            if not self.stuck:
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
