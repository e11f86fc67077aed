"""The fault proxy itself, against a tiny echo server (no other service needed)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.faults.proxy import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while True:
            try:
                data = self.request.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.request.sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False


@pytest.fixture
def echo() -> Iterator[int]:
    server = _Server(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def proxy(echo: int) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo) as p:
        yield p
    assert not p.alive_threads


def _connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def _closed(sock: socket.socket) -> bool:
    """True once the peer closed (EOF or reset) within the socket's timeout."""
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_forwards_both_ways(proxy):
    with _connect(proxy) as s:
        s.sendall(b"hello")
        assert _recv_exactly(s, 5) == b"hello"
    assert proxy.bytes == {"up": 5, "down": 5}


def test_delay_adds_latency_per_direction(proxy):
    with _connect(proxy) as s:
        proxy.delay(0.3, "down")
        t0 = time.monotonic()
        s.sendall(b"x")
        assert _recv_exactly(s, 1) == b"x"
        assert 0.3 <= time.monotonic() - t0 < 1.5
        proxy.delay(0.2)  # both: a round trip holds twice
        t0 = time.monotonic()
        s.sendall(b"y")
        assert _recv_exactly(s, 1) == b"y"
        assert 0.4 <= time.monotonic() - t0 < 1.5
        proxy.restore()
        t0 = time.monotonic()
        s.sendall(b"z")
        assert _recv_exactly(s, 1) == b"z"
        assert time.monotonic() - t0 < 0.2
    with pytest.raises(ValueError):
        proxy.delay(1, "sideways")


def test_cut_closes_connections_and_refuses_until_restore(proxy):
    s = _connect(proxy)
    s.sendall(b"a")
    assert _recv_exactly(s, 1) == b"a"
    proxy.cut()
    assert _closed(s)
    s.close()
    with _connect(proxy) as refused:  # accepted by the kernel, closed by the proxy
        assert _closed(refused)
    assert proxy.connections == 0
    proxy.restore()
    with _connect(proxy) as s2:
        s2.sendall(b"b")
        assert _recv_exactly(s2, 1) == b"b"


def test_drop_after_forwards_n_bytes_then_closes(proxy):
    with _connect(proxy) as s:
        proxy.drop_after(4)
        s.sendall(b"0123456789")
        assert _recv_exactly(s, 10) == b"0123"
        assert _closed(s)
    # one-shot: the next connection is whole again
    with _connect(proxy) as s:
        s.sendall(b"0123456789")
        assert _recv_exactly(s, 10) == b"0123456789"


def test_trip_lets_some_through_then_closes_the_connection(proxy):
    proxy.trip(b"PUT", after=1, cut_all=False)
    with _connect(proxy) as s:
        s.sendall(b"PUT 1")
        assert _recv_exactly(s, 5) == b"PUT 1"
        s.sendall(b"GET 2")  # not matching: forwarded
        assert _recv_exactly(s, 5) == b"GET 2"
        s.sendall(b"PUT 3")
        assert _closed(s)
    assert proxy.trips == 1 and not proxy.is_cut
    with _connect(proxy) as s:  # other connections still work; the rule stays
        s.sendall(b"GET 4")
        assert _recv_exactly(s, 5) == b"GET 4"


def test_trip_can_cut_the_whole_proxy(proxy):
    idle = _connect(proxy)
    idle.sendall(b"ping")
    assert _recv_exactly(idle, 4) == b"ping"
    proxy.trip(b"PUT")
    with _connect(proxy) as s:
        s.sendall(b"PUT x")
        assert _closed(s)
    assert proxy.is_cut
    assert _closed(idle)
    idle.close()


def test_close_leaves_no_thread(echo):
    before = set(threading.enumerate())
    p = FaultProxy("127.0.0.1", echo)
    socks = [_connect(p) for _ in range(3)]
    for s in socks:
        s.sendall(b"k")
        assert _recv_exactly(s, 1) == b"k"
    p.delay(5)
    socks[0].sendall(b"held")  # a pump is waiting out the delay: close() must end it
    t0 = time.monotonic()
    p.close()
    assert time.monotonic() - t0 < 2
    assert not p.alive_threads
    for s in socks:
        s.close()
    leaked = [t for t in set(threading.enumerate()) - before if t.name.startswith("fault-proxy")]
    assert not leaked


def test_unreachable_target_closes_the_client():
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]  # nothing listens there
    with FaultProxy("127.0.0.1", port) as p, _connect(p) as s:
        assert _closed(s)


def test_slow_responses_to_a_pattern(proxy):
    proxy.slow_responses_to(b"PUT", 0.4)
    with _connect(proxy) as s:
        t0 = time.monotonic()
        s.sendall(b"GET")
        assert _recv_exactly(s, 3) == b"GET"
        assert time.monotonic() - t0 < 0.2
        t0 = time.monotonic()
        s.sendall(b"PUT")
        assert _recv_exactly(s, 3) == b"PUT"
        assert time.monotonic() - t0 >= 0.4
