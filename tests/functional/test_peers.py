"""The peers' plain helpers (tests/peers.py) on the real broker: a vhost of one's own that
guest may use, its queues' consumers counted, and gone when deleted."""

from __future__ import annotations

import subprocess

import kombu

from tests import peers
from tests.functional.fixtures_rabbit import RABBIT_HOST, RABBIT_PORT, ensure_rabbit


def _vhosts() -> set[str]:
    done = subprocess.run(
        [peers.rabbitmqctl(), "-q", "list_vhosts"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return {line.strip() for line in done.stdout.splitlines()}


def test_a_vhost_of_one_s_own_counts_its_consumers_and_is_gone_when_deleted():
    ensure_rabbit()
    name = peers.add_vhost("novasched-peers")
    try:
        assert name.startswith("novasched-peers-") and name in _vhosts()
        assert peers.queue_consumers(name, "scheduler") == 0  # no such queue yet
        url = f"amqp://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{name}"
        with kombu.Connection(url, connect_timeout=5) as conn:
            queue = kombu.Queue("scheduler", channel=conn.channel())
            queue.declare()
            assert peers.queue_consumers(name, "scheduler") == 0
            queue.consume(callback=lambda body, message: None)
            assert peers.queue_consumers(name, "scheduler") == 1
            assert peers.queue_consumers(name, "conductor") == 0
    finally:
        peers.delete_vhost(name)
    assert name not in _vhosts()
    peers.delete_vhost(name)  # quietly, when it is gone already
