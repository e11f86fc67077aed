"""Decision records: what each ``select_destinations`` decided, kept in a database so that
"why did my instance land there?" can be answered after the logs are gone
(``novasched-manage decision show``; docs/operations.md, "Decision records").

* ``record.py``: ``DecisionRecord`` (request id, instances, time, outcome, chosen hosts and
  the driver's document, which this package treats as opaque JSON, but for its ``Deferred``
  parts, which it computes when it writes the document, off the request's thread).
* ``store.py``: ``DecisionStore``, our ``novasched_*`` tables in any SQLAlchemy database:
  add a batch, find by instance or request (as nova writes them: lower-case uuids), list by
  host, outcome and time (and, reading the documents, by values inside them), prune.
* ``recorder.py``: ``DecisionRecorder``, which takes records on the request's thread without
  ever waiting and writes them on its own thread, bounded by ``[decision_records]``'s
  retention; ``recorder_from_conf``.

It uses the options, the request model, the exceptions and the metrics; never the RPC
layer, the drivers, explain, the host cache, the plugins or ``db/``
(``tests/unit/test_import_rules.py``).
"""

from typing import TYPE_CHECKING, Any

from scheduler.records.record import (
    ERROR,
    NO_VALID_HOST,
    OUTCOMES,
    SCHEDULED,
    DecisionRecord,
    Deferred,
)

if TYPE_CHECKING:
    from scheduler.records.recorder import (
        DecisionRecorder,
        recorder_from_conf,
        store_option,
        store_url,
    )
    from scheduler.records.store import DecisionStore, Pruned, StoreError

# the store and the recorder (SQLAlchemy) are imported when first named: a command's --help
# reads only the outcomes
_LAZY = {
    "DecisionRecorder": "scheduler.records.recorder",
    "recorder_from_conf": "scheduler.records.recorder",
    "store_option": "scheduler.records.recorder",
    "store_url": "scheduler.records.recorder",
    "DecisionStore": "scheduler.records.store",
    "Pruned": "scheduler.records.store",
    "StoreError": "scheduler.records.store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "ERROR",
    "NO_VALID_HOST",
    "OUTCOMES",
    "SCHEDULED",
    "DecisionRecord",
    "DecisionRecorder",
    "DecisionStore",
    "Deferred",
    "Pruned",
    "StoreError",
    "recorder_from_conf",
    "store_option",
    "store_url",
]
