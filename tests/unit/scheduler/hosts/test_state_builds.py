"""A consumption whose build finished stays counted, no longer as an I/O operation."""

from __future__ import annotations

from tests.unit.scheduler.drivers.fakes import make_host, make_spec


def test_a_finished_build_keeps_its_resources_and_drops_its_io_operation():
    hs = make_host("h1", ram_mb=8192)
    spec = make_spec(ram_mb=1024)
    hs.consume_from_request(spec, "i-1")
    hs.consume_from_request(spec, "i-2")
    assert (hs.num_io_ops, hs.num_instances, hs.free_ram_mb) == (2, 2, 8192 - 2048)
    assert hs.finish_builds(["i-1"]) == 1
    assert (hs.num_io_ops, hs.num_instances, hs.free_ram_mb) == (1, 2, 8192 - 2048)
    assert hs.finish_builds(["i-1"]) == 0  # once
    # releasing another consumption recounts the rest: the finished build stays finished
    assert hs.release_consumption("i-2", "moved") == 1
    assert (hs.num_io_ops, hs.num_instances, hs.free_ram_mb) == (0, 1, 8192 - 1024)
    # and a finished build can still be released (a move away from the host)
    assert hs.release_consumption("i-1", "moved") == 1
    assert (hs.num_io_ops, hs.num_instances, hs.free_ram_mb) == (0, 0, 8192)
