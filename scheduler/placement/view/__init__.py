"""The provider view: Placement's resource providers held in the scheduler (issue 11).

``ProviderView`` holds the providers and answers allocation-candidate queries of the common
shapes; ``ApiFeed`` (HTTP API) and ``DatabaseFeed`` (Placement's database, read-only) keep it
current through a ``ViewRefresher`` thread. See docs/architecture.md, "The provider view".
"""

from scheduler.placement.view.api_feed import ApiFeed
from scheduler.placement.view.db_feed import DatabaseFeed
from scheduler.placement.view.model import Inventory, ProviderRecord
from scheduler.placement.view.refresher import ViewRefresher
from scheduler.placement.view.view import ProviderView, ViewAnswer, unsupported_reason

__all__ = [
    "ApiFeed",
    "DatabaseFeed",
    "Inventory",
    "ProviderRecord",
    "ProviderView",
    "ViewAnswer",
    "ViewRefresher",
    "unsupported_reason",
]
