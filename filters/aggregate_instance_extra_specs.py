"""AggregateInstanceExtraSpecsFilter: flavor extra specs must be matched by the metadata of
the host's aggregates."""

from __future__ import annotations

import logging
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject
from filters.extra_specs_ops import match
from scheduler.hosts.aggregates import aggregate_metadata_get_by_host

LOG = logging.getLogger(__name__)

SCOPE = "aggregate_instance_extra_specs"

KEY_MISSING = Reject("extra spec not in aggregate metadata")
NO_MATCH = Reject("extra spec does not match aggregate metadata")


def _requirements(spec_obj: Any) -> list[tuple[str, str]]:
    """(aggregate key, requirement) for the extra specs this filter checks: unscoped keys and
    keys in the ``aggregate_instance_extra_specs:`` scope (scope removed); other scopes
    (``hw:``, ``capabilities:`` ...) are left to other filters."""
    flavor = getattr(spec_obj, "flavor", None)
    extra_specs = getattr(flavor, "extra_specs", None) or {}
    wanted = []
    for key, req in extra_specs.items():
        scope, sep, rest = key.partition(":")
        if sep:
            if scope != SCOPE:
                continue
            key = rest
        wanted.append((key, req))
    return wanted


class AggregateInstanceExtraSpecsFilter(BaseHostFilter):
    """Passes hosts whose aggregates satisfy the flavor's unscoped and
    ``aggregate_instance_extra_specs:`` extra specs: each key must be in the aggregate
    metadata and one of its (comma-separated) values must match the extra spec (with the
    extra-spec operators: ``>= 4``, ``<in> ssd``, ``<or> a <or> b`` ...)."""

    depends_on_consumption = False

    RUN_ON_REBUILD = False
    # the flavor and the aggregates do not change within a request
    run_filter_once_per_request = True
    # the answer depends only on the host's aggregates: checked once per set of aggregates
    per_aggregates = True

    def prepare(self, spec_obj: Any) -> Any:
        """The (aggregate key, requirement) pairs to check; PASS_ALL when there are none."""
        return _requirements(spec_obj) or PASS_ALL

    def check(self, host_state: Any, wanted: list[tuple[str, str]]) -> bool | Reject:
        metadata = aggregate_metadata_get_by_host(host_state)
        for key, req in wanted:
            values = metadata.get(key)
            if not values:
                if LOG.isEnabledFor(logging.DEBUG):
                    LOG.debug(
                        "%(host)s fails flavor extra_specs requirements. Extra_spec %(key)s "
                        "is not in aggregate.",
                        {"host": host_state, "key": key},
                    )
                return KEY_MISSING
            if not any(match(value, req) for value in values):
                if LOG.isEnabledFor(logging.DEBUG):
                    LOG.debug(
                        "%(host)s fails flavor extra_specs requirements. '%(values)s' do not "
                        "match '%(req)s'",
                        {"host": host_state, "values": sorted(values), "req": req},
                    )
                return NO_MATCH
        return True
