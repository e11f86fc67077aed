"""DifferentHostFilter: keep away from the instances named in the ``different_host`` hint.

This module also holds what it shares with SameHostFilter: reading a ``same_host`` /
``different_host`` hint (``hinted_uuids``) and judging a host by whether it runs one of the
hinted instances (``InstanceHintFilter``).
"""

from __future__ import annotations

import logging
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject

LOG = logging.getLogger(__name__)

HOSTS_LISTED_INSTANCE = Reject("runs an instance named in different_host")


def hinted_uuids(spec_obj: Any, hint: str) -> set[str]:
    """The instance uuids of a ``same_host``/``different_host`` hint (a uuid or a list)."""
    value = spec_obj.get_scheduler_hint(hint)
    if not value:
        return set()
    if isinstance(value, str):
        return {value}
    return {str(uuid) for uuid in value}


class InstanceHintFilter(BaseHostFilter):
    """Passes hosts that run (``runs_hinted`` True) or do not run (False) one of the instances
    listed in the ``hint`` scheduler hint (every host when there is no hint)."""

    depends_on_consumption = False

    RUN_ON_REBUILD = False
    # instances placed by this request are not among the hinted ones
    run_filter_once_per_request = True

    hint = ""
    runs_hinted = True  # what a passing host does: run a hinted instance, or not
    reject = Reject("rejected")
    debug_text = "%s fails the hint"  # logged on ``log`` with the host
    log = LOG

    def prepare(self, spec_obj: Any) -> Any:
        return hinted_uuids(spec_obj, self.hint) or PASS_ALL

    def check(self, host_state: Any, uuids: set[str]) -> bool | Reject:
        runs_hinted = not uuids.isdisjoint(host_state.instances or ())
        if runs_hinted == self.runs_hinted:
            return True
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(self.debug_text, host_state)
        return self.reject


class DifferentHostFilter(InstanceHintFilter):
    """Passes hosts that run none of the instances listed in the ``different_host``
    scheduler hint (every host when there is no hint)."""

    hint, runs_hinted, reject = "different_host", False, HOSTS_LISTED_INSTANCE
    debug_text = "%s runs an instance named in the different_host hint"
