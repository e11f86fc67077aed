"""Typed errors of the Placement client.

Every error carries what Placement said (HTTP status, error code, detail, request id) and
a message an operator can act on. The scheduler tells them apart by type:

* ``ClaimConflict``: the host is full (or a provider-generation race outlasted our retries);
  move on to the next host.
* ``ConsumerGenerationConflict``: somebody else changed this consumer's allocations; re-read
  or fail the request.
* ``PlacementConnectionError`` / ``PlacementServerError``: Placement is unreachable or
  broken; nothing to do but report it.
* ``PlacementClientError``: Placement refused the request itself (400, 403, 404, 406 ...).
* ``ClaimOutcomeUnknown``: a claim's PUT may or may not have landed (timeout or dropped
  connection after it was sent, 5xx). ``ClaimConnectionLost`` (also a
  ``PlacementConnectionError``) and ``ClaimServerError`` (also a ``PlacementServerError``)
  say which; the error carries the allocations the PUT wrote, so that the caller can ask
  ``GET /allocations/{consumer}`` whether it landed and delete it if it is not wanted.

A ``PlacementConnectionError`` raised for a claim that is not a ``ClaimOutcomeUnknown``
never reached Placement (connection refused, name not resolved, connect timeout): nothing
was written.
"""

from __future__ import annotations

from typing import Any

# Placement's error codes (placement/errors.py), as they appear in "errors[].code".
CONCURRENT_UPDATE = "placement.concurrent_update"
UNDEFINED_CODE = "placement.undefined_code"


class PlacementError(Exception):
    """Base of every error the Placement client raises."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        detail: str = "",
        request_id: str | None = None,
        method: str | None = None,
        path: str | None = None,
    ):
        self.status = status
        self.code = code
        self.detail = detail
        self.request_id = request_id
        self.method = method
        self.path = path
        super().__init__(message)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class PlacementConnectionError(PlacementError):
    """Placement could not be reached (refused, DNS, TLS, timeout, connection dropped).

    ``may_have_landed`` is False when the request certainly never reached Placement
    (connection refused, name not resolved, connect timeout), True otherwise."""

    may_have_landed: bool = True


class PlacementServerError(PlacementError):
    """Placement answered 5xx."""


class PlacementClientError(PlacementError):
    """Placement refused the request (a 4xx other than the claim conflicts)."""


class ClaimConflict(PlacementError):
    """A claim could not be made on this host: capacity or inventory constraints (409
    ``placement.undefined_code``), or provider-generation races beyond our retries."""


class ConsumerGenerationConflict(PlacementError):
    """The consumer's allocations were changed by someone else (409
    ``placement.concurrent_update`` "consumer generation conflict")."""


class ClaimOutcomeUnknown(PlacementError):
    """A claim whose PUT may have landed: Placement's answer was lost (timeout, dropped
    connection) or was a 5xx. ``allocations`` is what the PUT would have written
    (``{rp: {"resources": {rc: n}}}``), ``previous`` what the consumer held before it."""

    allocations: dict[str, Any]
    previous: dict[str, Any]

    @classmethod
    def wrap(
        cls, exc: PlacementError, allocations: dict[str, Any], previous: dict[str, Any]
    ) -> ClaimOutcomeUnknown:
        err = cls(
            exc.message,
            status=exc.status,
            code=exc.code,
            detail=exc.detail,
            request_id=exc.request_id,
            method=exc.method,
            path=exc.path,
        )
        err.allocations = allocations
        err.previous = previous
        return err


class ClaimConnectionLost(ClaimOutcomeUnknown, PlacementConnectionError):
    """The claim's PUT was sent but no answer came (read timeout, connection reset or
    closed): it may have landed, and Placement is not answering."""


class ClaimServerError(ClaimOutcomeUnknown, PlacementServerError):
    """Placement (or a proxy in front of it) answered the claim's PUT with a 5xx: it may
    have landed."""


def parse_error_body(body: Any) -> tuple[str | None, str, str | None]:
    """Return (code, detail, request_id) from a Placement error body (1.23+ format), or
    (None, text, None) when the body is not in that format."""
    if isinstance(body, dict):
        errors = body.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            first = errors[0]
            detail = str(first.get("detail") or first.get("title") or "")
            return first.get("code"), detail.strip(), first.get("request_id")
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    return None, (str(body) if body is not None else "").strip()[:500], None
