"""A real RabbitMQ for functional tests.

``rabbit_transport_url`` gives the URL of the broker on 127.0.0.1:5672 (guest/guest),
starting ``rabbitmq-server -detached`` if nothing listens there. It fails the test,
loudly, when no broker can be reached: a functional test never silently skips.
``rabbit_topic`` gives a unique topic per test and deletes its queues afterwards, so tests
share the broker (and nova's ``nova`` exchange) without hearing each other. ``own_vhost``
gives a test a virtual host of its own: nova's client always sends to topic ``scheduler``,
and a queue belongs to its vhost whatever the exchange, so two test runs at once on one
broker (two clones, a contributor's run beside CI's) would otherwise take each other's
requests.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests import peers

RABBIT_HOST = "127.0.0.1"
RABBIT_PORT = 5672
RABBIT_URL = f"rabbit://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/"
START_TIMEOUT = 60.0


def _listening(host: str = RABBIT_HOST, port: int = RABBIT_PORT) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def kombu_url(url: str) -> str:
    """``url`` as kombu spells it (oslo.messaging's ``rabbit://`` is kombu's ``amqp://``)."""
    return "amqp://" + url.split("://", 1)[1] if url.startswith("rabbit://") else url


def _amqp_ready(url: str) -> bool:
    """The port can open before the broker accepts AMQP logins; check a real login."""
    import kombu

    try:
        with kombu.Connection(kombu_url(url), connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1)
            return True
    except Exception:
        return False


def ensure_rabbit(url: str = RABBIT_URL, timeout: float = START_TIMEOUT) -> str:
    """Return ``url`` once a broker answers on it, starting one if needed; fail otherwise."""
    if _listening() and _amqp_ready(url):
        return url
    if not _listening():
        server = shutil.which("rabbitmq-server")
        if server is None:
            pytest.fail(
                f"RabbitMQ is not listening on {RABBIT_HOST}:{RABBIT_PORT} and "
                "rabbitmq-server is not installed"
            )
        result = subprocess.run(
            [server, "-detached"], capture_output=True, text=True, timeout=30, check=False
        )
        if result.returncode != 0:
            pytest.fail(f"rabbitmq-server -detached failed: {result.stderr.strip()}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _listening() and _amqp_ready(url):
            return url
        time.sleep(1.0)
    pytest.fail(f"RabbitMQ did not accept connections on {url} within {timeout:.0f} s")


def own_vhost(stack: contextlib.ExitStack, prefix: str) -> str:
    """A vhost of the caller's own on the broker (``rabbitmqctl``), deleted when ``stack``
    closes; returns its URL."""
    ensure_rabbit()
    try:
        name = peers.add_vhost(prefix)
    except peers.PeerUnavailable as exc:
        pytest.fail(f"a test cannot make a RabbitMQ vhost of its own: {exc}")
    stack.callback(peers.delete_vhost, name)
    url = f"rabbit://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{name}"
    deadline = time.monotonic() + START_TIMEOUT
    while not _amqp_ready(url):
        if time.monotonic() > deadline:
            pytest.fail(f"RabbitMQ did not accept logins to the new vhost {name}")
        time.sleep(0.2)
    return url


@pytest.fixture(scope="session")
def rabbit_transport_url() -> str:
    """``rabbit://guest:guest@127.0.0.1:5672/`` of a running broker."""
    return ensure_rabbit()


def delete_queues(url: str, names: list[str]) -> None:
    import kombu

    with kombu.Connection(kombu_url(url)) as conn:
        channel = conn.channel()
        for name in names:
            try:
                channel.queue_delete(name)
            except Exception:  # already gone, or the channel closed on a missing queue
                channel = conn.channel()


@pytest.fixture
def rabbit_topic(rabbit_transport_url: str) -> Iterator[str]:
    """A topic no other test (or production scheduler) uses; its queues are removed after."""
    topic = f"scheduler-test-{uuid.uuid4().hex[:12]}"
    yield topic
    delete_queues(rabbit_transport_url, [topic, f"{topic}.{topic}-host"])


class NotificationRecorder:
    """An oslo.messaging notification endpoint that keeps every INFO notification."""

    def __init__(self) -> None:
        self.seen: list[dict] = []
        self.cond = threading.Condition()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        with self.cond:
            self.seen.append(
                {"publisher_id": publisher_id, "event_type": event_type, "payload": payload}
            )
            self.cond.notify_all()

    def wait_for(self, count: int, timeout: float = 15.0) -> list[dict]:
        """The notifications seen once there are ``count`` (or ``timeout`` has passed)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.seen) < count and time.monotonic() < deadline:
                self.cond.wait(deadline - time.monotonic())
            return list(self.seen)

    def find(self, event_type: str, instance_uuid: str, timeout: float = 30.0) -> dict:
        """The first ``event_type`` notification whose versioned payload names
        ``instance_uuid``, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for n in self.seen:
                    data = n["payload"].get("nova_object.data", {})
                    if n["event_type"] == event_type and data.get("instance_uuid") == instance_uuid:
                        return n
                left = deadline - time.monotonic()
                if left <= 0:
                    events = sorted({n["event_type"] for n in self.seen})
                    raise AssertionError(
                        f"no {event_type} for {instance_uuid} within {timeout} s; seen: {events}"
                    )
                self.cond.wait(left)


def rabbitmqctl(*args: str) -> None:
    """Run ``rabbitmqctl`` with ``args``; fail the test if it fails."""
    done = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.fail(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()}")
