"""The errors the scheduler raises. Every message says what happened and what to do next."""

from __future__ import annotations


class NovaschedError(Exception):
    """Base of novasched's own errors."""


class NoValidHost(NovaschedError):
    """No host can take the request. Travels to nova's conductor as
    ``nova.exception.NoValidHost`` (see ``scheduler/rpc/manager.py``)."""

    def __init__(self, reason: str = "", cause: str = "other", filter_name: str = ""):
        self.reason = reason
        # what the metrics count it as: no_candidates (Placement found none), filters (the
        # filter ``filter_name`` removed the last host), narrowed, claims_refused,
        # placement_unreachable, placement_refused (a 4xx to the candidates query), prefilter,
        # no_such_host, no_compute_node, deadline, other
        self.cause = cause
        self.filter_name = filter_name
        super().__init__(f"No valid host was found. {reason}".rstrip())


class RequestFilterFailed(NovaschedError):
    """A request prefilter refused the request (becomes NoValidHost)."""


class InvalidRequest(NovaschedError):
    """A request payload that cannot be decoded: a missing required field, a wrong type."""


class ConfigurationError(NovaschedError):
    """A configuration value that stops the service from starting."""


class PluginNotFound(ConfigurationError):
    """An enabled filter, weigher or driver name that no entry point provides."""

    def __init__(self, kind: str, names: list[str], available: list[str]):
        self.names = names
        self.available = sorted(available)
        super().__init__(
            f"Unknown {kind} name(s) {', '.join(names)}; available: {', '.join(self.available)}"
        )


class AllocationUpdateFailed(NovaschedError):
    """A claim failed for a reason other than capacity (consumer generation conflict).
    Travels to nova's conductor as ``nova.exception.AllocationUpdateFailed``, which its
    evacuate and rebuild paths catch by class."""

    def __init__(self, consumer_uuid: str, error: str):
        self.consumer_uuid = consumer_uuid
        self.error = error
        # nova's message, word for word: nova's conductor logs and stores it as it is
        super().__init__(
            f"Failed to update allocations for consumer {consumer_uuid}. Error: {error}"
        )
