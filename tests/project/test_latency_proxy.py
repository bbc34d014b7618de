"""The benchmarks' latency proxy: it adds the round-trip time it is told, and nothing else
(bytes intact and in order, closes passed on), or the distance figures would be wrong."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from support.paths import ROOT

RTT = 0.020


def _load() -> ModuleType:
    path = ROOT / "benchmarks" / "latency_proxy.py"
    spec = importlib.util.spec_from_file_location("latency_proxy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


latency_proxy = _load()


class EchoServer:
    """Echoes each connection until its peer half-closes, then closes it; or, with
    ``hang_up``, closes every connection as soon as it is accepted."""

    def __init__(self, hang_up: bool = False) -> None:
        self.hang_up = hang_up
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.saw_eof = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            if self.hang_up:
                return
            while data := conn.recv(65536):
                conn.sendall(data)
            self.saw_eof.set()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    parts, got = [], 0
    while got < size:
        chunk = sock.recv(min(65536, size - got))
        assert chunk, f"connection closed after {got} of {size} bytes"
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def test_round_trip_takes_the_rtt(echo: EchoServer) -> None:
    with latency_proxy.LatencyProxy(("127.0.0.1", echo.port), RTT) as proxy:
        sock = _connect(proxy.port)
        with sock:
            took = []
            for n in range(5):
                message = f"ping {n}".encode()
                t0 = time.perf_counter()
                sock.sendall(message)
                assert _recv_exactly(sock, len(message)) == message
                took.append(time.perf_counter() - t0)
    assert min(took) >= RTT
    assert max(took) < 10 * RTT


def test_large_payload_arrives_intact_and_in_order(echo: EchoServer) -> None:
    payload = os.urandom(1 << 20)
    with latency_proxy.LatencyProxy(("127.0.0.1", echo.port), RTT) as proxy:
        sock = _connect(proxy.port)
        with sock:
            # Send from a thread while reading here, so neither side's buffers fill up.
            sender = threading.Thread(target=sock.sendall, args=(payload,))
            sender.start()
            back = _recv_exactly(sock, len(payload))
            sender.join(timeout=10)
            assert not sender.is_alive()
    assert back == payload


def test_client_close_reaches_the_server_and_comes_back(echo: EchoServer) -> None:
    with latency_proxy.LatencyProxy(("127.0.0.1", echo.port), RTT) as proxy:
        sock = _connect(proxy.port)
        with sock:
            sock.sendall(b"last words")
            sock.shutdown(socket.SHUT_WR)
            # The half-close travels behind the data: the echo comes first, then the
            # server's own close (it closes once it read the end of our stream).
            assert _recv_exactly(sock, 10) == b"last words"
            assert echo.saw_eof.wait(timeout=10)
            assert sock.recv(1) == b""


def test_server_close_reaches_the_client() -> None:
    server = EchoServer(hang_up=True)
    try:
        with latency_proxy.LatencyProxy(("127.0.0.1", server.port), RTT) as proxy:
            t0 = time.perf_counter()
            sock = _connect(proxy.port)
            with sock:
                assert sock.recv(1) == b""
                # The close is delayed like data: half an RTT on its way back.
                assert time.perf_counter() - t0 >= RTT / 2
    finally:
        server.close()


def test_runs_as_a_process_and_reports_its_port(echo: EchoServer) -> None:
    script = ROOT / "benchmarks" / "latency_proxy.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), "--target", f"127.0.0.1:{echo.port}", "--rtt-ms", "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the process prints it once it is listening
        assert line.startswith("READY "), line
        sock = _connect(int(line.split()[1]))
        with sock:
            t0 = time.perf_counter()
            sock.sendall(b"hello")
            assert _recv_exactly(sock, 5) == b"hello"
            assert time.perf_counter() - t0 >= RTT
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
