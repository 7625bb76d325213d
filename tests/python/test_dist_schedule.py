"""Which exchanges the data-parallel feed over the GPUs issues, and when
(wspager._devfeed.Schedule: pure Python, the same on every rank because it
depends on the sequence of needs alone).  A model's passes in its order:
each layer exchanged once a pass, `window` ahead, nothing else.  Tied
embeddings (the embedding's layer needed again at the end of a pass): the
second use within a cycle left to the pager, never a cycle of exchanges.
A layer the forward skips: exchanged and dropped, the pass goes on.  A
first need far into the order: the layers before it issued once.  A layer
outside the order: nothing.  The window is never exceeded.  And the
feed's own group takes the caller's timeout."""
import datetime
import os

import torch
import torch.distributed as dist

from wspager._devfeed import Schedule, group_timeout
from checks import check, finish, free_port


def run(order, needs, window=2):
    issued = []
    sch = Schedule(order, window, issued.append)
    got = []
    for layer in needs:
        got.append(sch.need(layer))
        check(len(sch.ahead) <= window, f"{len(sch.ahead)} ahead, window {window}")
    return issued, got, sch


order = list(range(6))

# passes in order: the order itself, cyclically, and two ahead
issued, got, sch = run(order, order * 3)
check(issued == (order * 4)[:18 + 2], f"plain passes issued {issued}")
check(all(got) and sch.repeats == 0, f"plain: {got}, repeats {sch.repeats}")

# tied: 0 again at the end of each pass (7 passes of 6 layers)
needs = (order + [0]) * 7
issued, got, sch = run(order, needs)
print(f"tied: {len(issued)} exchanges, {sch.repeats} uses left to the pager")
check(sch.repeats == 6 and got.count(False) == 6, f"tied: repeats {sch.repeats}")
check(len(issued) == 7 * 7 - 6 + 2, f"tied: {len(issued)} exchanges")
# each pass after the first: its first need of 0 is not an exchange
check(all(not g for g, n, k in zip(got, needs, range(len(needs)))
          if n == 0 and k % 7 == 0 and k > 0), "tied: a pass's first use exchanged")

# a skipped layer (3): issued in its turn and dropped, one cycle a pass
needs = [0, 1, 2, 4, 5] * 3
issued, got, sch = run(order, needs)
check(issued == (order * 4)[:18 + 2], f"skipped layer: issued {issued}")
check(all(got) and sch.repeats == 0, f"skipped layer: {got}")

# the first need far into the order, then the pass goes on from there
issued, got, sch = run(order, [4, 5, 0, 1])
check(issued == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3], f"late start: issued {issued}")

# a layer outside the order (read by the pager itself): nothing issued
issued, got, sch = run(order, [9])
check(issued == [] and got == [False], f"outside the order: {issued} {got}")

# a window as large as the order
issued, got, sch = run(order, order * 2, window=6)
check(issued[:6] == order and len(issued) == 12 + 6, f"window 6: {issued}")

# the feed's own group is made with the caller's timeout (a rank that
# stops ends the others when the caller asked): read from a gloo group
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0",
                  WORLD_SIZE="1")
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=17))
got = group_timeout(dist.group.WORLD, torch.device("cpu"))
check(got == datetime.timedelta(seconds=17), f"the caller's timeout read as {got}")
check(group_timeout(object(), torch.device("cpu")) is None, "no timeout to read: not None")
dist.destroy_process_group()

finish()
