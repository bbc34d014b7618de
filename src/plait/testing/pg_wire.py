"""Just enough of PostgreSQL's wire protocol to open a session and run a statement.

A test run makes hundreds of databases. Starting ``psql`` for each costs a process and a
new session (about 140 ms on a loaded machine); one session kept open and fed plain
queries costs a few milliseconds. The clusters of ``TemporaryCluster`` trust local
connections, so no password exchange is needed, and the standard library suffices:
importing this never pulls a database driver into code that has none.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class WireError(RuntimeError):
    """The server refused a statement; the message is the server's."""


class WireSession:
    """One kept session on a trusting server; statements run one at a time (a lock
    guards the socket, so threads may share it). A dropped connection is opened again
    once, before the statement is sent: a server restarted between two statements
    does not fail the next one."""

    def __init__(self, host: str, port: int, user: str, database: str) -> None:
        self._address = (host, port)
        self._user = user
        self._database = database
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def execute(self, statement: str, *, timeout: float = 60.0) -> None:
        """Run one statement (simple query protocol); raise ``WireError`` with the
        server's message if it fails."""
        error: str | None = None
        with self._lock:
            for tries_left in (1, 0):
                try:
                    sock = self._connected(timeout)
                    sock.sendall(_message(b"Q", statement.encode() + b"\0"))
                    error = _until_ready(sock)
                    break
                except OSError:
                    self._drop()
                    if not tries_left:
                        raise
        if error is not None:
            raise WireError(error)

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.sendall(_message(b"X", b""))  # Terminate
            self._drop()

    def _connected(self, timeout: float) -> socket.socket:
        if self._sock is None:
            sock = socket.create_connection(self._address, timeout=timeout)
            try:
                error = _start(sock, self._user, self._database)
            except BaseException:
                sock.close()
                raise
            if error is not None:
                sock.close()
                raise WireError(error)
            self._sock = sock
        self._sock.settimeout(timeout)
        return self._sock

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def probe(host: str, port: int, user: str, database: str) -> str | None:
    """Open a session the way a client would; return None when that works, else why not."""
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            error = _start(sock, user, database)
            if error is None:
                sock.sendall(_message(b"X", b""))
            return error
    except OSError as exc:
        return str(exc) or type(exc).__name__


def _start(sock: socket.socket, user: str, database: str) -> str | None:
    """The startup exchange: None once the server is ready for queries, else why not."""
    params = f"user\0{user}\0database\0{database}\0\0".encode()
    body = struct.pack("!i", 3 << 16) + params  # protocol 3.0
    sock.sendall(struct.pack("!i", len(body) + 4) + body)
    while True:
        kind, payload = _read_message(sock)
        if kind == b"R" and struct.unpack("!i", payload[:4])[0] != 0:
            return "the server asked for a password although trust auth is configured"
        if kind == b"E":
            return _error_text(payload)
        if kind == b"Z":  # ReadyForQuery
            return None


def _until_ready(sock: socket.socket) -> str | None:
    """Read a query's answer up to ReadyForQuery; the first error's text, if any."""
    error: str | None = None
    while True:
        kind, payload = _read_message(sock)
        if kind == b"E" and error is None:
            error = _error_text(payload)
        elif kind == b"Z":
            return error


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    header = _recv_exact(sock, 5)
    (length,) = struct.unpack("!i", header[1:])
    return header[:1], _recv_exact(sock, length - 4)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        chunks += chunk
    return bytes(chunks)


def _error_text(payload: bytes) -> str:
    fields: dict[bytes, str] = {}
    for part in payload.split(b"\0"):
        if part:
            fields[part[:1]] = part[1:].decode("utf-8", "replace")
    return fields.get(b"M", "unknown server error")
