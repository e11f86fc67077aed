"""Files the tests read. All of them live in ``tests/data/``, inside the repository.

``nova-34-select_destinations.json`` is the output of nova 34.0.0's own RPC serializer for a
``select_destinations`` call (the AMQP envelope and the decoded message, with nova's object
primitives). It is data, copied in so that a clone of the repository tests on its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().with_name("data")
NOVA_SELECT_DESTINATIONS = DATA / "nova-34-select_destinations.json"


def nova_select_destinations() -> dict[str, Any]:
    """The nova 34 ``select_destinations`` wire sample, decoded."""
    return json.loads(NOVA_SELECT_DESTINATIONS.read_text())
