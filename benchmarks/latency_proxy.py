"""A TCP relay that adds a fixed round-trip time, for measuring a database at a distance.

    python benchmarks/latency_proxy.py --target 127.0.0.1:5432 --rtt-ms 1

It listens on 127.0.0.1 (a free port unless ``--port`` is given), prints ``READY <port>``
once it accepts connections, and relays every connection to ``--target`` until it is
killed. Each chunk read in either direction is delivered to the other side half the RTT
after it was read, in order, so a request and its answer together take one RTT more than
they would directly. The TCP handshake is not delayed (a client's ``connect`` returns at
once, where a real network costs it a round trip): the engines measured keep pooled
connections, so it is not part of a step.

Why a user-space relay: the usual tool, ``tc qdisc ... netem delay``, needs a kernel with
``CONFIG_NET_SCH_NETEM``, and not every kernel has it (the benchmarks' reference machine
answers "Specified qdisc kind is unknown"). benchmarks/README.md gives the netem recipe for
machines that have it.

Why threads and ``time.sleep`` rather than asyncio: the event loop waits in ``epoll_wait``,
whose timeout is whole milliseconds and which asyncio rounds up, so a 0.5 ms delay would
become 1 ms; ``time.sleep`` is a nanosleep, good to some tens of microseconds. Each
direction of each connection has one reader thread (stamps each chunk with its due time and
queues it) and one writer thread (sleeps until the head of the queue is due, then sends it),
so a slow writer never holds back the reading of the next chunk, and the delay is not
stretched by the size of what is in flight. Sockets use ``TCP_NODELAY``, as database
drivers do, so the kernel does not hold small writes back itself.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable

#: Bytes asked for per read; a chunk is relayed as one unit whatever its size.
CHUNK = 65536

#: prctl(2) option: the thread's timer slack in nanoseconds.
_PR_SET_TIMERSLACK = 29

#: What a reader hands its writer: (due time on the monotonic clock, bytes), or
#: (due time, None) for the end of the stream.
_Item = tuple[float, bytes | None]


def _tight_timer() -> None:
    """Ask Linux to wake this thread's sleeps on time: by default the kernel may let a
    sleep run up to 50 us long (the thread's timer slack) to batch wake-ups, twice per
    round trip. Best effort: elsewhere, or without libc, the default stays."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Connection:
    """One relayed connection: two directions, each a reader and a writer thread.

    The end of a stream travels like data: the reader queues an end marker when its side
    shuts down (or fails), and the writer, once that marker is due, shuts down the write
    half of the other side. So a half-close reaches the far end half an RTT later, exactly
    as it would over a slower network, and a full close is two half-closes. When both
    directions have ended, both sockets are closed. A failed send (the far end reset the
    connection) shuts both sockets down, which wakes the readers and ends every thread.
    """

    def __init__(
        self,
        client: socket.socket,
        upstream: socket.socket,
        delay: float,
        on_close: Callable[[_Connection], None],
    ) -> None:
        self.client = client
        self.upstream = upstream
        self.delay = delay
        self._on_close = on_close
        self._lock = threading.Lock()
        self._directions_left = 2
        self._closed = False

    def start(self) -> None:
        for src, dst, name in (
            (self.client, self.upstream, "up"),
            (self.upstream, self.client, "down"),
        ):
            items: queue.Queue[_Item] = queue.Queue()
            threading.Thread(
                target=self._read, args=(src, items), name=f"proxy-read-{name}", daemon=True
            ).start()
            threading.Thread(
                target=self._write, args=(dst, items), name=f"proxy-write-{name}", daemon=True
            ).start()

    def _read(self, src: socket.socket, items: queue.Queue[_Item]) -> None:
        try:
            while True:
                data = src.recv(CHUNK)
                due = time.monotonic() + self.delay
                if not data:
                    break
                items.put((due, data))
        except OSError:
            pass  # reset or shut down by the other direction: the stream ends here
        items.put((time.monotonic() + self.delay, None))

    def _write(self, dst: socket.socket, items: queue.Queue[_Item]) -> None:
        _tight_timer()
        try:
            while True:
                due, data = items.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if data is None:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            self.abort()
        finally:
            self._direction_done()

    def _direction_done(self) -> None:
        with self._lock:
            self._directions_left -= 1
            last = self._directions_left == 0
        if last:
            self.close()

    def abort(self) -> None:
        """Shut both sockets down so that every thread of this connection ends."""
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.close()
        self._on_close(self)


class LatencyProxy:
    """Relays connections on ``127.0.0.1:<port>`` to ``target`` with ``rtt`` seconds added.

    Usable in-process (tests: ``start()`` serves from a daemon thread, ``close()`` stops
    accepting and closes every relayed connection) or as a process (``main``), which is how
    the benchmarks use it, so its threads never compete with the measuring process for the
    interpreter lock.
    """

    def __init__(self, target: tuple[str, int], rtt: float, port: int = 0) -> None:
        if rtt < 0:
            raise ValueError("rtt must not be negative")
        self.target = target
        self.rtt = rtt
        self._listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self.port: int = self._listener.getsockname()[1]
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closing = False

    def start(self) -> LatencyProxy:
        """Accept connections from a daemon thread; returns ``self``."""
        threading.Thread(target=self.serve_forever, name="proxy-accept", daemon=True).start()
        return self

    def serve_forever(self) -> None:
        """Accept and relay connections until :meth:`close` (or the process ends)."""
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                if self._closing:
                    return
                raise
            try:
                upstream = socket.create_connection(self.target)
            except OSError as exc:
                print(f"latency_proxy: cannot reach {self.target}: {exc}", file=sys.stderr)
                client.close()
                continue
            _nodelay(client)
            _nodelay(upstream)
            conn = _Connection(client, upstream, self.rtt / 2, self._forget)
            with self._lock:
                if self._closing:
                    conn.close()
                    return
                self._connections.add(conn)
            conn.start()

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._connections.discard(conn)

    def close(self) -> None:
        """Stop accepting and cut every relayed connection."""
        with self._lock:
            self._closing = True
            live = list(self._connections)
        # shutdown() wakes a thread blocked in accept(); close() alone may not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for conn in live:
            conn.abort()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_target(text: str) -> tuple[str, int]:
    """``host:port`` (the host may be a bracketed IPv6 address) as a socket address."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=parse_target, required=True, help="HOST:PORT to relay to")
    ap.add_argument("--rtt-ms", type=float, required=True, help="round-trip time to add, ms")
    ap.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    args = ap.parse_args(argv)
    if args.rtt_ms < 0:
        ap.error("--rtt-ms must not be negative")
    proxy = LatencyProxy(args.target, args.rtt_ms / 1000.0, args.port)
    print(f"READY {proxy.port}", flush=True)
    proxy.serve_forever()
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
