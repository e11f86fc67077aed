"""TypeAffinityFilter: a host runs instances of a single flavor.

A filter of earlier nova releases, where ``HostState.instances`` held full Instance objects
carrying ``instance_type_id`` (the flavor's database id). Ours usually holds only the instance
uuids (``{uuid: None}``, loaded only for group and same/different-host requests), so this filter
can judge only instances whose value carries the flavor id: a dict with ``instance_type_id`` or
an object with that attribute. Instances without it are not counted; a host none of whose
instances carries it passes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from filters import BaseHostFilter, Reject

LOG = logging.getLogger(__name__)

OTHER_FLAVOR = Reject("host runs another flavor")


def instance_type_id(instance: Any) -> Any:
    """The flavor id an instance value carries, or None if it carries none."""
    if instance is None:
        return None
    if isinstance(instance, Mapping):
        return instance.get("instance_type_id")
    return getattr(instance, "instance_type_id", None)


class TypeAffinityFilter(BaseHostFilter):
    """Passes empty hosts and hosts whose instances all have the requested flavor (by flavor
    id; instances whose flavor is not known to the scheduler are not counted)."""

    RUN_ON_REBUILD = False
    run_filter_once_per_request = False

    def prepare(self, spec_obj: Any) -> str:
        # compared as strings: a flavor id decoded from JSON may be "5" where the request has 5
        return str(spec_obj.flavor.id)

    def check(self, host_state: Any, wanted: str) -> bool | Reject:
        for instance in (host_state.instances or {}).values():
            type_id = instance_type_id(instance)
            if type_id is not None and str(type_id) != wanted:
                if LOG.isEnabledFor(logging.DEBUG):
                    LOG.debug("%s runs flavor %s; flavor %s requested", host_state, type_id, wanted)
                return OTHER_FLAVOR
        return True
