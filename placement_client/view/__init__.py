"""The provider view: Placement's resource providers held in the scheduler (issue 11).

``ProviderView`` holds the providers and answers allocation-candidate queries of the common
shapes; ``ApiFeed`` (HTTP API) and ``DatabaseFeed`` (Placement's database, read-only) keep it
current through a ``ViewRefresher`` thread. See docs/architecture.md, "The provider view".
"""

from placement_client.view.api_feed import ApiFeed
from placement_client.view.db_feed import DatabaseFeed
from placement_client.view.model import Inventory, ProviderRecord
from placement_client.view.refresher import ViewRefresher
from placement_client.view.view import ProviderView, ViewAnswer, unsupported_reason

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
