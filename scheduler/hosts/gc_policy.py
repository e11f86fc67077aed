"""The host manager's policy for CPython's cyclic garbage collector, for the whole process.

The host manager's cache is long-lived and free of reference cycles: HostStates, their
service dicts, decoded reports, and (made on first use, after the first read) each host's
lockutils semaphore (~9 GC-tracked objects) and instance-list snapshot. Every full collection
walks whatever of it is not frozen: at 10k hosts 35-55k objects after a few hundred requests,
6-9 ms of CPU with the interpreter stopped (at 100k hosts: 18-25 full collections per 200
requests of the core benchmark, the longest 270-470 ms on a busy machine), growing with every
host updated until the next whole read of a cell freezes it (``gc.freeze()``, every five
minutes: ``CellReads._read_cell``). Objects frozen are still freed by reference counting;
only a reference cycle among them is never collected, and the scheduler's own structures have
none (no request of the core benchmark leaves cyclic garbage).

So, once installed (``install_gc_policy``, by the host manager's refresher when it starts):

- a full collection that took ``_GC_FREEZE_AFTER`` or longer freezes what survived it
  (``freeze_survivors``, a ``gc.callbacks`` hook), so that the next ones walk only what was
  made since;
- the youngest generation is collected less often (``_GC_YOUNG_THRESHOLD``): a window read
  allocates a row per changed service and node, and each young collection also walks the
  containers a request holds meanwhile.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

# A full collection that takes longer than this freezes what it kept (``freeze_survivors``).
_GC_FREEZE_AFTER = 0.002
# The youngest generation is collected after this many more allocations than frees of
# tracked objects (CPython's default: 700). A window read allocates a row per changed
# service and node (at 100k hosts ~36k rows each second: some 50 young collections), and
# each young collection also walks the containers a request holds meanwhile (lists of every
# candidate host). At 10k hosts the benchmark's GC time drops from ~0.3 to ~0.07 ms of CPU
# per request (3 young collections of ~4 ms per 200 requests instead of ~100 of 0.4 ms and
# ~10 of 2 ms), at 100k from ~15 to ~10 ms.
_GC_YOUNG_THRESHOLD = 10_000
_gc_full_started = 0.0
_gc_policy_lock = threading.Lock()


def freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    """``gc.callbacks`` hook: after a full collection that took ``_GC_FREEZE_AFTER`` or
    longer, freeze what survived it (everything reachable: the collection just removed the
    garbage), so that the next full collections walk only what was made since. CPython's
    own rule (a full collection once the objects that came into the oldest generation since
    the last one are a quarter of those it kept) then keeps them rare and small."""
    global _gc_full_started
    if info.get("generation") != 2:
        return
    if phase == "start":
        _gc_full_started = time.perf_counter()
    elif time.perf_counter() - _gc_full_started >= _GC_FREEZE_AFTER:
        gc.freeze()


def install_gc_policy() -> None:
    """Keep the long-lived cache out of the cyclic GC's way in this process (idempotent):
    the service's host manager installs it when its refresher starts. The youngest
    generation's threshold is raised to ``_GC_YOUNG_THRESHOLD`` unless it is already higher
    or collection is off (0)."""
    with _gc_policy_lock:
        if freeze_survivors not in gc.callbacks:
            gc.callbacks.append(freeze_survivors)
        young, middle, old = gc.get_threshold()
        if 0 < young < _GC_YOUNG_THRESHOLD:
            gc.set_threshold(_GC_YOUNG_THRESHOLD, middle, old)
