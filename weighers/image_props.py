"""ImagePropertiesWeigher: packs (or spreads) instances by the image properties they share.

Off by default (``image_props_weight_multiplier = 0``). When on, a host's raw weight counts,
for each property of the request's image, the instances on the host whose image has the same
property with the same value (compared as strings); ``image_props_weight_setting =
os_distro=2, hw_machine_type=1`` weighs only the listed properties, by their ratio.

nova reads each instance's image metadata from the cell database while weighing. Weighers
here do no I/O, so the host manager must put it into ``host_state.instances``: each value a
dict with an ``image_properties`` dict (the ImageMetaProps fields of the instance's image,
as ``RequestSpec.image.properties`` holds them), or an object with such an attribute. An
instance without it counts as having no properties, so with plain instance values every
host weighs 0.
"""

from __future__ import annotations

import logging
from typing import Any

from scheduler.conf import CONF
from weighers import BaseHostWeigher, Same
from weighers.metrics import ParsedOption

LOG = logging.getLogger(__name__)


def instance_image_properties(instance: Any) -> dict[str, Any] | None:
    """The image properties the host manager attached to an instance value, if any."""
    if isinstance(instance, dict):
        props = instance.get("image_properties")
    else:
        props = getattr(instance, "image_properties", None)
    return props if isinstance(props, dict) else None


class ImagePropertiesWeigher(BaseHostWeigher):
    """Prefers hosts whose instances were booted from images with the same properties as
    the request's image (``image_props_weight_multiplier``, 0 = off; negative spreads them);
    ``image_props_weight_setting`` weighs chosen properties by ratio."""

    multiplier_option = "image_props_weight_multiplier"
    returns_numbers = True

    def __init__(self) -> None:
        self._setting = ParsedOption("filter_scheduler", "image_props_weight_setting")
        # whether some host's instances carried image properties (then none is warned about)
        self._seen_props = False
        self._warned_no_props = False

    @property
    def setting(self) -> dict[str, float]:
        """The parsed ``image_props_weight_setting`` (a later duplicate key wins)."""
        return dict(self._setting.get())

    def prepare(
        self, weight_properties: Any, hosts: list[Any]
    ) -> list[tuple[str, str, float]] | Same:
        """(property, value as a string, what one matching instance adds) for each property
        of the request's image that counts; Same(0.0) when none does."""
        # Off unless the configured multiplier is set (an aggregate override alone does not
        # turn it on), as in nova.
        if CONF.filter_scheduler.image_props_weight_multiplier == 0.0:
            return Same(0.0)
        image = getattr(weight_properties, "image", None)
        requested = image.properties if image is not None else None
        if not requested:
            return Same(0.0)
        setting = self.setting
        wanted = [
            (key, str(value), setting.get(key, 0.0) if setting else 1.0)
            for key, value in requested.items()
        ]
        return [w for w in wanted if w[2] != 0.0] or Same(0.0)

    def weigh(self, host_state: Any, wanted: list[tuple[str, str, float]]) -> float:
        weight = 0.0
        instances = host_state.instances
        if not instances:
            return weight
        seen_props = False
        for instance in instances.values():
            props = instance_image_properties(instance)
            if props is None:
                continue
            seen_props = True
            for key, value, factor in wanted:
                if key in props and str(props[key]) == value:
                    weight += factor
        if seen_props:
            self._seen_props = True
        elif not self._seen_props and not self._warned_no_props:
            self._warned_no_props = True
            LOG.warning(
                "ImagePropertiesWeigher is enabled but the hosts' instances carry no "
                "image_properties; every host weighs 0"
            )
        return weight
