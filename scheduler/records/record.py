"""One decision record, and how its document becomes the JSON text the store keeps.

The document is the driver's (what the request asked, where its candidates came from, what
each filter removed, the weighed hosts): this package never looks inside it. It only makes
sure that whatever it is can be stored, because a record that cannot be written is a lost
answer to "why did my instance land there?": a value JSON does not know (a datetime, a set)
is written as its ``str``, and a document that still cannot be encoded, or is larger than
``MAX_DOCUMENT_BYTES``, is replaced by a small one saying so, while the record's own fields
(request id, instances, outcome, hosts) are kept.

A part of the document that costs time to write out (the driver's per-host detail: a name
per host) can be handed over unwritten, as a ``Deferred``: the recorder's writer thread
computes it when it encodes the document, off the request's thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

LOG = logging.getLogger(__name__)

# outcomes, as the select_destinations metrics name them
SCHEDULED = "scheduled"
NO_VALID_HOST = "no_valid_host"
ERROR = "error"
OUTCOMES = (SCHEDULED, NO_VALID_HOST, ERROR)

# A document's JSON text is at most this long (bytes). A record keeps the best few weighed
# hosts ([decision_records] top_weighed), so a few KB is the usual size; the cap bounds the
# disk a store can take (max_records x this) and keeps a batch within a MySQL packet.
MAX_DOCUMENT_BYTES = 256 * 1024


def utcnow() -> datetime:
    """Now, as naive UTC: nova stores its times so, and so does the store."""
    return datetime.now(UTC).replace(tzinfo=None)


def naive_utc(when: datetime) -> datetime:
    """``when`` as naive UTC (an aware time is converted; a naive one is taken as UTC)."""
    if when.tzinfo is not None:
        return when.astimezone(UTC).replace(tzinfo=None)
    return when


class Deferred:
    """A part of a document written out when the document is encoded (on the recorder's
    writer thread): ``compute()`` returns its JSON-able value, from what it holds, which
    nothing may change any more. What it raises becomes ``{"unrecorded": why}``."""

    __slots__ = ("compute",)

    def __init__(self, compute: Callable[[], Any]):
        self.compute = compute

    def resolve(self) -> Any:
        try:
            return self.compute()
        except Exception as exc:  # the rest of the document is still worth keeping
            LOG.debug("Could not compute a part of a decision record", exc_info=True)
            return {"unrecorded": f"{type(exc).__name__}: {exc}"[:200]}


@dataclass(kw_only=True)
class DecisionRecord:
    """What one ``select_destinations`` decided (keyword arguments only).

    ``created_at`` is naive UTC (now, by default); ``outcome`` one of ``OUTCOMES``; ``hosts``
    the chosen hosts in instance order (empty on a NoValidHost); ``document`` the driver's,
    JSON-able but for its ``Deferred`` parts, opaque here. Once handed to a recorder the
    record is the recorder's: its writer thread encodes the document later (computing its
    deferred parts), so the caller must not change it any more.
    ``id`` is the store's, set on the records it reads back.
    """

    request_id: str | None
    instance_uuids: list[str]
    created_at: datetime = field(default_factory=utcnow)
    outcome: str
    hosts: list[str] = field(default_factory=list)
    document: dict[str, Any] = field(default_factory=dict)
    id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-able values (``created_at`` in ISO 8601, UTC)."""
        return {
            "id": self.id,
            "created_at": self.created_at.isoformat(timespec="microseconds") + "Z",
            "request_id": self.request_id,
            "outcome": self.outcome,
            "instance_uuids": list(self.instance_uuids),
            "hosts": list(self.hosts),
            "document": self.document,
        }


def encode_document(document: Any, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The document's JSON text, its ``Deferred`` parts computed now, never an exception:
    what cannot be encoded, or is over ``limit`` bytes, becomes ``{"unrecorded": reason,
    "keys": [top-level keys]}``."""
    try:
        text = json.dumps(document, default=_encodable, separators=(",", ":"))
    except (TypeError, ValueError, RuntimeError) as exc:
        # a circular reference, or a dict the caller changed while it was being encoded
        return _stub(document, f"the document could not be encoded: {exc}")
    if len(text) > limit:
        return _stub(document, f"the document was {len(text)} bytes, above {limit}")
    return text


def _encodable(value: Any) -> Any:
    """What JSON does not know: a deferred part computed, anything else as its ``str``."""
    if isinstance(value, Deferred):
        return value.resolve()
    return str(value)


def decode_document(text: str | None) -> dict[str, Any]:
    """The stored JSON text as a dict (anything else is kept under ``"value"``)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"unreadable": text[:200]}
    return value if isinstance(value, dict) else {"value": value}


def _stub(document: Any, reason: str) -> str:
    keys = []
    if isinstance(document, dict):
        keys = [str(k) for k in list(document)[:50]]
    return json.dumps({"unrecorded": reason, "keys": keys})
