"""Capacity per flavor: how many more instances fit, where, and what is stranded.

``CapacityCalculator`` (calculator.py) runs the scheduler's own chain over a driver it is
given, claiming nothing; ``load_flavors`` (flavors.py) reads the flavors from nova's API
database; ``render`` (render.py) prints the figures for ``novasched-manage capacity``; the
service computes the same figures for the metrics (scheduler/rpc/service.py). See
docs/operations.md, "Capacity per flavor".
"""

from scheduler.capacity.calculator import CapacityCalculator, FlavorCapacity
from scheduler.capacity.flavors import UnknownFlavors, load_flavors

__all__ = ["CapacityCalculator", "FlavorCapacity", "UnknownFlavors", "load_flavors"]
