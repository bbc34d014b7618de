"""A free TCP port for a server a test starts in another process."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on now: the system picks it for a socket that is
    closed at once. (A server in this process binds port 0 itself instead, which no other
    process can take in between.)"""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
