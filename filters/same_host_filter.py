"""SameHostFilter: go next to the instances named in the ``same_host`` hint."""

from __future__ import annotations

import logging

from filters import Reject
from filters.different_host_filter import InstanceHintFilter

LOG = logging.getLogger(__name__)

NO_LISTED_INSTANCE = Reject("runs no instance named in same_host")


class SameHostFilter(InstanceHintFilter):
    """Passes hosts that run at least one of the instances listed in the ``same_host``
    scheduler hint (every host when there is no hint)."""

    hint, runs_hinted, reject, log = "same_host", True, NO_LISTED_INSTANCE, LOG
    debug_text = "%s runs no instance named in the same_host hint"
