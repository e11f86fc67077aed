"""AggregateImagePropertiesIsolation: image properties must be among the values that the
host's aggregates list under the same key."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from filters import BaseHostFilter, FilterOutcome, Reject
from scheduler.conf import CONF
from scheduler.hosts.aggregates import aggregate_metadata_get_by_host, per_aggregate_set

LOG = logging.getLogger(__name__)

PROPERTY_NOT_ALLOWED = Reject("image property not allowed by aggregate")


def _key_filter() -> str | None:
    """The prefix aggregate keys must have to be checked (deprecated namespace option)."""
    namespace = CONF.filter_scheduler.aggregate_image_properties_isolation_namespace
    if not namespace:
        return None
    return namespace + CONF.filter_scheduler.aggregate_image_properties_isolation_separator


class AggregateImagePropertiesIsolation(BaseHostFilter):
    """Passes hosts whose aggregates allow the image: for every aggregate metadata key that
    is also a property set on the image, the property's value must be one of the key's
    (comma-separated) values. Keys the image does not set are ignored."""

    # nova runs it on rebuild: the new image must fit the host the server is on
    RUN_ON_REBUILD = True
    # the image and the aggregates do not change within a request
    run_filter_once_per_request = True

    def __init__(self) -> None:
        group = CONF.filter_scheduler
        for option, default in (
            ("aggregate_image_properties_isolation_namespace", None),
            ("aggregate_image_properties_isolation_separator", "."),
        ):
            if getattr(group, option) != default:
                LOG.warning(
                    "[filter_scheduler] %s is deprecated for removal (nova 33.0.0): "
                    "AggregateImagePropertiesIsolation will then check every aggregate key",
                    option,
                )

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        return self._check(host_state, _image_props(spec_obj), _key_filter())

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        props = _image_props(spec_obj)
        prefix = _key_filter()
        outcome = FilterOutcome()
        if not props:
            outcome.passed.extend(host_states)
            return outcome
        # the answer depends only on the host's aggregates: once per set of aggregates
        check = per_aggregate_set(lambda host: self._check(host, props, prefix))
        return FilterOutcome.partition(host_states, check)

    @staticmethod
    def _check(host_state: Any, props: dict[str, Any], prefix: str | None) -> bool | Reject:
        if not props or not host_state.aggregates:
            return True
        for key, allowed in aggregate_metadata_get_by_host(host_state).items():
            if prefix is not None and not key.startswith(prefix):
                continue
            prop = props.get(key)
            # aggregate metadata is strings: compare the property's str(); an unset or
            # falsy property (False, 0, "") is not checked, as in nova
            if prop and str(prop) not in allowed:
                if LOG.isEnabledFor(logging.DEBUG):
                    LOG.debug(
                        "%(host)s fails image aggregate properties requirements. Property "
                        "%(prop)s does not match %(options)s.",
                        {"host": host_state, "prop": prop, "options": sorted(allowed)},
                    )
                return PROPERTY_NOT_ALLOWED
        return True


def _image_props(spec_obj: Any) -> dict[str, Any]:
    image = getattr(spec_obj, "image", None)
    return (getattr(image, "properties", None) or {}) if image is not None else {}
