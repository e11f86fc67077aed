"""IsolatedHostsFilter: isolated images run only on isolated hosts, and (by default)
isolated hosts run only isolated images."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject
from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

HOST_RESERVED = Reject("isolated host reserved for isolated images")
NEEDS_ISOLATED_HOST = Reject("isolated image needs an isolated host")


def _image_id(spec_obj: Any) -> str | None:
    # a volume-backed server may have no image id
    image = getattr(spec_obj, "image", None)
    return getattr(image, "id", None) if image is not None else None


class IsolatedHostsFilter(BaseHostFilter):
    """Passes isolated hosts (``isolated_hosts``) only for isolated images
    (``isolated_images``) and sends isolated images only to isolated hosts; with
    ``restrict_isolated_hosts_to_isolated_images = False`` isolated hosts take any image."""

    depends_on_consumption = False

    # nova runs it on rebuild: the new image must be allowed on the server's host
    RUN_ON_REBUILD = True
    # the image and the options do not change within a request
    run_filter_once_per_request = True

    def prepare(self, spec_obj: Any) -> Any:
        rule = self._rule(spec_obj)
        # the answer depends only on whether the host is isolated: two possible results
        for_isolated = rule(True)
        for_others = rule(False)
        if for_isolated is True and for_others is True:
            return PASS_ALL
        return self._isolated_hosts(), for_isolated, for_others

    def check(self, host_state: Any, prepared: Any) -> bool | Reject:
        isolated, for_isolated, for_others = prepared
        return for_isolated if host_state.host in isolated else for_others

    @staticmethod
    def _isolated_hosts() -> set[str]:
        return set(CONF.filter_scheduler.isolated_hosts or ())

    @staticmethod
    def _rule(spec_obj: Any) -> Callable[[bool], bool | Reject]:
        """``host_is_isolated -> True | Reject`` for this request."""
        group = CONF.filter_scheduler
        restrict = group.restrict_isolated_hosts_to_isolated_images
        isolated_images = group.isolated_images or ()
        if not isolated_images:
            # no isolated image: isolated hosts take nothing when restricted
            if restrict:
                return lambda host_isolated: HOST_RESERVED if host_isolated else True
            return lambda host_isolated: True
        image_isolated = _image_id(spec_obj) in isolated_images

        def rule(host_isolated: bool) -> bool | Reject:
            if image_isolated and not host_isolated:
                return NEEDS_ISOLATED_HOST
            if restrict and host_isolated and not image_isolated:
                return HOST_RESERVED
            return True

        return rule
