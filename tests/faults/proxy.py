"""A loopback TCP proxy that fault tests control.

``FaultProxy(host, port)`` listens on 127.0.0.1:<ephemeral port> and forwards every
connection to ``host:port`` (two pump threads per connection). Controls, all thread-safe:

* ``cut()``: close every open connection and refuse new ones (accepted, then closed at once)
  until ``restore()``;
* ``delay(seconds, direction="both")``: hold each forwarded chunk ``seconds`` before sending
  it; ``direction`` is ``"up"`` (client to target), ``"down"`` (target to client) or
  ``"both"``;
* ``drop_after(n_bytes)``: forward ``n_bytes`` more of the target's responses (the next ones,
  on whichever connection answers first), then close that connection (one-shot);
* ``trip(pattern, after=0, cut_all=True)``: let ``after`` client chunks containing ``pattern``
  through; at the next one, do not forward it and either ``cut()`` the whole proxy
  (``cut_all``) or close just that connection and keep refusing matching chunks;
* ``slow_responses_to(pattern, seconds)``: hold the response to every client chunk containing
  ``pattern`` (e.g. ``b"PUT /allocations/"``) ``seconds`` before forwarding it;
* ``restore()``: undo all of the above (a cut proxy accepts again, delays and rules go);
* ``close()``: stop listening, close every connection, join every thread.

Use it as a context manager. ``url_port`` / ``port`` give where to point a client.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from tests.faults import ledger

_CHUNK = 65536
_DIRECTIONS = ("up", "down")


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class _Conn:
    def __init__(self, client: socket.socket, upstream: socket.socket):
        self.client = client
        self.upstream = upstream
        self.closed = False
        self.hold_down = 0.0  # set by slow_responses_to: hold the next response this long

    def close(self) -> None:
        self.closed = True
        _close(self.client)
        _close(self.upstream)


class FaultProxy:
    def __init__(self, target_host: str, target_port: int, *, connect_timeout: float = 3.0):
        self.target = (target_host, target_port)
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._conns: set[_Conn] = set()
        self._threads: set[threading.Thread] = set()
        self._cut = False
        self._closed = threading.Event()
        self._delay = {"up": 0.0, "down": 0.0}
        self._drop_budget: int | None = None
        self._trip: tuple[bytes, int, bool] | None = None  # pattern, passes left, cut_all
        self._slow: tuple[bytes, float] | None = None
        self.trips = 0  # how many chunks a trip rule has stopped
        self.bytes = {"up": 0, "down": 0}
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"fault-proxy-{self.port}", daemon=True
        )
        self._acceptor.start()

    # -- controls ------------------------------------------------------------------------------
    def cut(self) -> None:
        ledger.count("faults injected")
        with self._lock:
            self._cut = True
            conns = list(self._conns)
        for conn in conns:
            conn.close()

    def delay(self, seconds: float, direction: str = "both") -> None:
        ledger.count("faults injected")
        with self._lock:
            for d in _DIRECTIONS if direction == "both" else (direction,):
                if d not in self._delay:
                    raise ValueError(f"direction must be up, down or both, not {direction!r}")
                self._delay[d] = float(seconds)

    def drop_after(self, n_bytes: int) -> None:
        ledger.count("faults injected")
        with self._lock:
            self._drop_budget = int(n_bytes)

    def trip(self, pattern: bytes, *, after: int = 0, cut_all: bool = True) -> None:
        ledger.count("faults injected")
        with self._lock:
            self._trip = (pattern, int(after), cut_all)

    def slow_responses_to(self, pattern: bytes, seconds: float) -> None:
        ledger.count("faults injected")
        with self._lock:
            self._slow = (pattern, float(seconds))

    def restore(self) -> None:
        with self._lock:
            self._slow = None
            self._cut = False
            self._delay = {"up": 0.0, "down": 0.0}
            self._drop_budget = None
            self._trip = None

    @property
    def is_cut(self) -> bool:
        return self._cut

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def close(self) -> None:
        self._closed.set()
        self._acceptor.join(timeout=5)
        _close(self._listener)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.close()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)

    @property
    def alive_threads(self) -> list[threading.Thread]:
        with self._lock:
            threads = list(self._threads)
        return [t for t in threads + [self._acceptor] if t.is_alive()]

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- machinery -----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._cut or self._closed.is_set():
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
            except OSError:
                _close(client)
                continue
            for sock in (client, upstream):
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(client, upstream)
            with self._lock:
                if self._cut:
                    conn.close()
                    continue
                self._conns.add(conn)
                # forget finished threads so a long test does not grow the set
                self._threads = {t for t in self._threads if t.is_alive()}
                pumps = [
                    threading.Thread(
                        target=self._pump,
                        args=(conn, src, dst, direction),
                        name=f"fault-proxy-{self.port}-{direction}",
                        daemon=True,
                    )
                    for src, dst, direction in (
                        (client, upstream, "up"),
                        (upstream, client, "down"),
                    )
                ]
                self._threads.update(pumps)
            for pump in pumps:
                pump.start()

    def _hold(self, direction: str, conn: _Conn) -> None:
        """Wait out the current delay of ``direction`` (and a slow response's); a restore()
        or close() ends it early."""
        start = time.monotonic()
        extra = 0.0
        if direction == "down" and conn.hold_down:
            extra, conn.hold_down = conn.hold_down, 0.0
        while not self._closed.is_set():
            slow = extra if self._slow is not None else 0.0
            remaining = start + max(self._delay[direction], slow) - time.monotonic()
            if remaining <= 0:
                return
            self._closed.wait(min(remaining, 0.05))

    def _pump(self, conn: _Conn, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while not conn.closed:
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    break
                if not data:
                    break
                if direction == "up" and self._slow and self._slow[0] in data:
                    conn.hold_down = self._slow[1]
                self._hold(direction, conn)
                close_after = False
                tripped: list[_Conn] = []
                with self._lock:
                    if self._cut or conn.closed:
                        break
                    if direction == "up" and self._trip and self._trip[0] in data:
                        pattern, passes, cut_all = self._trip
                        if passes > 0:
                            self._trip = (pattern, passes - 1, cut_all)
                        else:
                            self.trips += 1
                            if cut_all:
                                self._trip = None
                                self._cut = True
                                tripped = list(self._conns)
                            else:
                                tripped = [conn]
                    if direction == "down" and self._drop_budget is not None:
                        data = data[: self._drop_budget]
                        self._drop_budget -= len(data)
                        if self._drop_budget <= 0:
                            self._drop_budget = None
                            close_after = True
                if tripped:
                    for other in tripped:
                        other.close()
                    break
                if not data:
                    break
                # counted before it is sent: the peer may read it (and a test may look at
                # the counts) before sendall returns here
                self.bytes[direction] += len(data)
                try:
                    dst.sendall(data)
                except OSError:
                    break
                if close_after:
                    break
        finally:
            conn.close()
            with self._lock:
                self._conns.discard(conn)
