"""The thread that reads the data-parallel feeds' parts ahead
(wspager._readahead.ReadAhead), without GPUs: items come in the layers'
order, once each or cyclically; it runs at most `depth` items ahead of the
taker; a failed read is handed over in its item's place and ends the
thread; close() returns while the thread is blocked on a full queue.  And
two of them chained, as the feeds chain their pinning thread and their
reader (the reader's read takes its buffer from the pinning thread with
take()): buffers and reads meet in order, the next buffer is made while a
read runs, a failure of the first reaches the taker of the second, and
closing the reader, then the pinning thread, does not hang."""
import threading
import time

from wspager._readahead import ReadAhead
from checks import check, finish

order = [3, 1, 4, 0]

# once: each layer one item, in order, what read returned
ra = ReadAhead(order, lambda layer: layer * 10, True, 2, "test-ra")
got = [ra.get() for _ in order]
check(got == [(3, 30), (1, 10), (4, 40), (0, 0)], f"once: {got}")
ra.thread.join(5)
check(not ra.thread.is_alive(), "once: the thread did not end after the last layer")
ra.close()

# cyclic, and never more than `depth` ahead of the taker
reads = []
ra = ReadAhead(order, lambda layer: reads.append(layer) or layer, False, 2, "test-ra")
time.sleep(0.3)
check(len(reads) <= 3, f"depth 2: {len(reads)} read before any was taken")
got = [ra.get()[0] for _ in range(9)]
check(got == (order * 3)[:9], f"cyclic: {got}")
ra.close()
check(not ra.thread.is_alive(), "close left the thread running")

# a failure is handed over in its item's place and ends the thread
def fails(layer):
    if layer == 4:
        raise OSError("disk gone")
    return layer


ra = ReadAhead(order, fails, False, 2, "test-ra")
got = [ra.get() for _ in range(3)]
check(got[:2] == [(3, 3), (1, 1)] and got[2][0] == 4 and isinstance(got[2][1], OSError),
      f"failure: {got}")
ra.thread.join(5)
check(not ra.thread.is_alive(), "the thread went on after a failed read")
ra.close()

# close() while the thread is blocked on a full queue (nothing taken)
ra = ReadAhead(order, lambda layer: layer, False, 1, "test-ra")
time.sleep(0.2)
t0 = time.perf_counter()
ra.close()
check(time.perf_counter() - t0 < 2 and not ra.thread.is_alive(), "close hung on a full queue")

# chained: buffers made ahead by one thread, read into by another; each
# read holds its buffer until the next one is made, which only a thread
# making buffers while the reads run can do (else: timeouts, counted)
made, threads, late = [], {}, []
made_cv = threading.Condition()


def make(layer):
    threads["pin"] = threading.get_ident()
    with made_cv:
        made.append(layer)
        made_cv.notify_all()
    return bytearray([layer])


def read_into(pins, overlap=False):
    def read(layer):
        threads["read"] = threading.get_ident()
        buf = pins.take(layer, "pinned memory for the part")
        k = order.index(layer)
        if overlap and k + 1 < len(order):
            with made_cv:
                if not made_cv.wait_for(lambda: len(made) >= k + 2, timeout=10):
                    late.append(layer)
        return bytes(buf)
    return read


pins = ReadAhead(order, make, True, 1, "test-pins")
reader = ReadAhead(order, read_into(pins, overlap=True), True, 2, "test-parts")
got = [reader.get() for _ in order]
check(got == [(k, bytes([k])) for k in order], f"chained: {got}")
check(made == order, f"chained: buffers made for {made}")
check(threads["pin"] != threads["read"], "chained: not two threads")
check(not late, f"chained: no buffer was made while layers {late} were read")
reader.close()
pins.close()

# chained, the first failing: the failure reaches the reader's taker
def make_fails(layer):
    if layer == 1:
        raise MemoryError("no pinned memory left")
    return bytearray([layer])


pins = ReadAhead(order, make_fails, False, 1, "test-pins")
reader = ReadAhead(order, read_into(pins), False, 2, "test-parts")
got = [reader.get() for _ in range(2)]
check(got[0] == (3, bytes([3])) and got[1][0] == 1 and isinstance(got[1][1], RuntimeError)
      and "no pinned memory left" in str(got[1][1]), f"chained failure: {got}")
t0 = time.perf_counter()
reader.close()
pins.close()
check(time.perf_counter() - t0 < 2, "closing the chain after a failure hung")

# chained, closed mid-way (reader first, as DeviceFeed.close does)
pins = ReadAhead(order, make, False, 1, "test-pins")
reader = ReadAhead(order, read_into(pins), False, 2, "test-parts")
reader.get()
t0 = time.perf_counter()
reader.close()
pins.close()
check(time.perf_counter() - t0 < 2 and not reader.thread.is_alive() and
      not pins.thread.is_alive(), "closing the chain mid-way hung or left a thread")
finish()
