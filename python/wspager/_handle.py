"""One C handle, shared safely by every Python object that uses it.

A pager's memory is reached from many Python objects: the :class:`Pager`,
its :class:`Pack`, acquired layers, numpy arrays and torch tensors over
slot or accumulator memory.  Freeing the handle under any of them would
crash the interpreter, so they all go through one :class:`Handle`:

* a library call runs inside :meth:`Handle.call`, which refuses once the
  handle is closed and is counted, so that :meth:`Handle.close` waits for
  the calls in flight (other threads) before it frees anything;
* memory handed out as a view (:meth:`Handle.host_buffer`,
  :meth:`Handle.view_owner`) holds the handle, and is counted: a closed
  handle is freed only once its last view is gone (collected) and no call
  is in flight (a release may still run after close()), never under a live
  array or a running call;
* objects that borrow the handle hold it, so collecting the owner while
  a borrower lives frees nothing;
* nothing here can be copied or pickled: two owners of one C handle, or
  a raw address in a pickle, are exactly the crashes this prevents.
"""
from __future__ import annotations

import ctypes
import threading
import warnings
import weakref
from typing import Callable


class NoCopy:
    """Refuses copy.copy, copy.deepcopy and pickle with a TypeError."""

    def _no_copy(self, *_args):
        raise TypeError(f"{type(self).__name__} objects own library memory and cannot be copied "
                        "or pickled (open the pack again by its path instead)")

    __copy__ = __deepcopy__ = __reduce__ = __reduce_ex__ = _no_copy


class _ViewOwner(NoCopy):
    """Keeps a handle alive for one view; the count drops when it goes."""

    def __init__(self, handle: "Handle"):
        self.handle = handle


class _CallScope:
    """One counted call of a :class:`Handle` (a class rather than a
    generator: it is on every acquire's path, and costs half as much)."""
    __slots__ = ("handle", "release")

    def __init__(self, handle: "Handle", release: bool):
        self.handle, self.release = handle, release

    def __enter__(self) -> int:
        return self.handle._enter_call(self.release)

    def __exit__(self, *exc) -> None:
        self.handle._exit_call()


class Handle(NoCopy):
    """A C handle (`ptr`) freed by `free(ptr)` exactly once: at
    :meth:`close` once no view is alive, else when the last view goes, or
    when the handle itself is collected (or the interpreter exits).
    `what` names it in errors ("pager model.wsp")."""

    def __init__(self, ptr: int, free: Callable[[int], None], what: str,
                 closed_error: Callable[[str], Exception]):
        self.what = what
        self._ptr = ptr
        self._closed_error = closed_error
        self._cond = threading.Condition(threading.RLock())
        self._calls = 0
        self._views = 0
        self._closed = False       # close() began: no new calls but releases
        self._freeing = False      # the C handle is being or was freed: no call at all
        # Holds no reference to self: runs at collection or exit too.
        self._free = weakref.finalize(self, free, ptr)

    @property
    def closed(self) -> bool:
        return self._closed

    def call(self, release: bool = False) -> "_CallScope":
        """``with handle.call() as ptr:`` the pointer, for the duration of
        one library call (or a few that belong together); raises once the
        handle is closed.  A `release` (handing back what an earlier call
        took) still goes through while close() waits for the calls in
        flight: they may be waiting for exactly that."""
        return _CallScope(self, release)

    def _enter_call(self, release: bool) -> int:
        with self._cond:
            if self._freeing or (self._closed and not release):
                raise self._closed_error(f"{self.what} is closed")
            self._calls += 1
        return self._ptr

    def _exit_call(self) -> None:
        with self._cond:
            self._calls -= 1
            if self._calls == 0:
                self._cond.notify_all()
            last = self._last_user_gone()
        if last:
            self._free()

    def _last_user_gone(self) -> bool:
        """Under the lock: is the handle closed with no call in flight and
        no view left, and not yet freed?  Then the caller frees it (whoever
        comes last: close(), a release finishing after it, a view's end)."""
        if self._closed and not self._freeing and not self._calls and not self._views:
            self._freeing = True
            return True
        return False

    def _new_view(self) -> _ViewOwner:
        with self._cond:
            if self._closed:
                raise self._closed_error(f"{self.what} is closed")
            self._views += 1
        owner = _ViewOwner(self)
        weakref.finalize(owner, self._view_gone)
        return owner

    def _view_gone(self) -> None:
        with self._cond:
            self._views -= 1
            last = self._last_user_gone()
        if last:
            self._free()

    def host_buffer(self, address: int, nbytes: int):
        """A ctypes byte array over `nbytes` of library memory at
        `address` that keeps the handle (and so the memory) alive; numpy
        and torch views made from it keep it alive in turn.  Call inside
        :meth:`call`."""
        buf = (ctypes.c_uint8 * nbytes).from_address(address)
        buf._wsp_owner = self._new_view()
        return buf

    def view_owner(self) -> object:
        """An object to store in a view of device memory (a
        ``__cuda_array_interface__`` provider): it keeps the handle alive
        while the view lives.  Call inside :meth:`call`."""
        return self._new_view()

    def close(self) -> None:
        """Refuse new calls, wait for those in flight, and free the handle;
        with views still alive, free it when the last one goes."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._calls:
                self._cond.wait()
            views = self._views
            last = self._last_user_gone()
        if last:
            self._free()
        else:
            warnings.warn(f"{self.what}: closed with {views} views of its memory alive; it is "
                          "freed when the last one goes", ResourceWarning, stacklevel=3)

