"""explain: why a request would land where it lands, or why it cannot land anywhere.

* ``dry_run``: the driver's steps for a request without claiming or consuming anything,
  as the JSON document of docs/explain.md (``explain_request``).
* ``render``: that document as text (``render_text``).
* ``request_file``: the requests ``novasched-manage explain`` reads from flags and files.
"""

from scheduler.explain.dry_run import DOCUMENT_VERSION, explain_request, request_summary
from scheduler.explain.render import render_text
from scheduler.explain.request_file import (
    ExplainInputError,
    apply_overrides,
    parse_flavor,
    spec_from_json,
    split_pairs,
)

__all__ = [
    "DOCUMENT_VERSION",
    "ExplainInputError",
    "apply_overrides",
    "explain_request",
    "parse_flavor",
    "render_text",
    "request_summary",
    "spec_from_json",
    "split_pairs",
]
