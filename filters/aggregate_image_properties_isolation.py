"""AggregateImagePropertiesIsolation: image properties must be among the values that the
host's aggregates list under the same key."""

from __future__ import annotations

import logging
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject
from scheduler.conf import CONF
from scheduler.hosts.aggregates import aggregate_metadata_get_by_host

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

    depends_on_consumption = False

    # nova runs it on rebuild: the new image must fit the host the server is on
    RUN_ON_REBUILD = True
    # the image and the aggregates do not change within a request
    run_filter_once_per_request = True
    # the answer depends only on the host's aggregates: checked once per set of aggregates
    per_aggregates = True

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

    def prepare(self, spec_obj: Any) -> Any:
        """The image's properties and the key prefix; PASS_ALL when the image sets none."""
        props = _image_props(spec_obj)
        if not props:
            return PASS_ALL
        return props, _key_filter()

    def check(self, host_state: Any, prepared: tuple[dict[str, Any], str | None]) -> bool | Reject:
        props, prefix = prepared
        if not host_state.aggregates:
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
