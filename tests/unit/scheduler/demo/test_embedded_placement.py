"""The embedded Placement's public handles: its process id is known only while a process runs."""

from __future__ import annotations

from scheduler.demo.embedded_placement import EmbeddedPlacement


def test_pid_is_none_unless_placement_runs_as_a_process(tmp_path):
    placement = EmbeddedPlacement(f"sqlite:///{tmp_path}/placement.db", mode="process")
    assert placement.pid is None  # not started
    with EmbeddedPlacement(f"sqlite:///{tmp_path}/thread.db") as in_thread:
        assert in_thread.url.startswith("http://127.0.0.1:")
        assert in_thread.pid is None  # served by a thread of this process
