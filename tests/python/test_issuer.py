"""The thread that issues the data-parallel feed's exchanges
(wspager._issuer.Issuer), without GPUs: what is put runs on that thread,
in order; wait(n) returns once the n-th is done and not before; a failure
reaches every wait after it, naming what failed, and nothing after it
runs; close() runs everything put before it, then ends the thread; a wait
for what the closed thread never ran raises instead of hanging; a wait
with a timeout on a stuck item raises TimeoutError, and close() then
returns without it."""
import threading
import time

from wspager._issuer import Issuer
from checks import check, finish


def wait_fails(iss, n, exc, text, what, timeout=None):
    """iss.wait(n, timeout) must raise `exc` saying `text`."""
    try:
        iss.wait(n, timeout)
    except exc as e:
        check(text in str(e), f"{what}: {e}")
        return
    check(False, f"{what}: wait({n}) returned")

# in order, on a thread of its own; wait(n) is not early
ran, threads = [], set()
gate = threading.Event()


def run(item):
    if item == "slow":
        gate.wait(5)
    threads.add(threading.get_ident())
    ran.append(item)


iss = Issuer(run, "test-issuer")
nums = [iss.put(k) for k in range(5)]
check(nums == [1, 2, 3, 4, 5], f"numbers {nums}")
iss.wait(5)
check(ran == list(range(5)), f"order {ran}")
check(threading.get_ident() not in threads and len(threads) == 1, "not on a thread of its own")
slow = iss.put("slow")
t0 = time.perf_counter()
waiter = threading.Thread(target=iss.wait, args=(slow,))
waiter.start()
waiter.join(0.3)
check(waiter.is_alive(), "wait returned before its item ran")
gate.set()
waiter.join(5)
check(not waiter.is_alive() and ran[-1] == "slow", "wait did not return once its item ran")
iss.wait(0)   # nothing to wait for
iss.close()
check(not iss.thread.is_alive(), "close left the thread running")

# close runs what was put before it
ran.clear()
gate.clear()
iss = Issuer(run, "test-issuer")
iss.put("slow")
for k in range(3):
    iss.put(k)
threading.Timer(0.2, gate.set).start()
iss.close()
check(ran == ["slow", 0, 1, 2], f"close dropped queued work: {ran}")
wait_fails(iss, iss.put("never"), RuntimeError, "closed", "what the closed thread never ran")

# a failure: raised to every wait after it (and to one for an item done
# before it), nothing after it runs, close returns
ran.clear()


def fails(item):
    if item == 2:
        raise ValueError("part 2 is bad")
    ran.append(item)


iss = Issuer(fails, "test-issuer")
for k in range(5):
    iss.put(k)
for n in (3, 5, 1):
    wait_fails(iss, n, ValueError, "part 2 is bad", "after a failure")
check(ran == [0, 1], f"ran after the failure: {ran}")
iss.close()

# setup runs on the thread before the first item; its failure is raised too
seen = []
iss = Issuer(lambda item: seen.append(item), "test-issuer",
             setup=lambda: seen.append(threading.current_thread().name))
iss.wait(iss.put("x"))
check(seen == ["test-issuer", "x"], f"setup: {seen}")
iss.close()


def bad_setup():
    raise OSError("no device")


iss = Issuer(lambda item: None, "test-issuer", setup=bad_setup)
wait_fails(iss, iss.put("x"), OSError, "no device", "a failed setup")
iss.close()

# a wait with a timeout, on an item stuck in the thread (a collective
# whose peer stopped): TimeoutError after about that long, and close()
# does not wait for the stuck thread
stuck = threading.Event()
iss = Issuer(lambda item: stuck.wait(30), "test-issuer")
n = iss.put("x")
iss.wait(0, 0.1)   # nothing to wait for: no timeout
t0 = time.perf_counter()
wait_fails(iss, n, TimeoutError, "not done within 0.3 s", "a stuck item", 0.3)
took = time.perf_counter() - t0
check(0.25 < took < 2, f"the timeout of 0.3 s came after {took:.2f} s")
t0 = time.perf_counter()
iss.close()
check(time.perf_counter() - t0 < 1, "close waited for a stuck thread")
stuck.set()   # let it end
iss.thread.join(5)
check(not iss.thread.is_alive(), "the thread did not end once unstuck")
finish()
