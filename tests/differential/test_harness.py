"""The differential harness itself: nova's worker answers, and reports its own failures."""

import pytest

from tests.differential.harness import NovaError
from tests.hunt import examples


def test_worker_answers_from_nova_34(nova):
    answer = nova.call("echo", "version", {"a": [1, 2]})
    assert answer["nova"].startswith("34.0.0") and answer["echo"] == {"a": [1, 2]}


def test_a_crash_on_novas_side_is_reported_with_its_traceback(nova):
    with pytest.raises(NovaError, match="KeyError"):
        nova.call("echo", "no-such-op", {})
    # and the worker keeps answering
    assert nova.call("echo", "version", 1)["echo"] == 1


def test_hunt_mode_raises_the_number_of_examples(monkeypatch):
    monkeypatch.delenv("NOVASCHED_HUNT", raising=False)
    assert examples(100) == 100
    monkeypatch.setenv("NOVASCHED_HUNT", "1")
    assert examples(100) == 2000
    monkeypatch.setenv("NOVASCHED_HUNT", "5000")
    assert examples(100) == 5000
