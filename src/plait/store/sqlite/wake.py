"""Wake-ups between the processes of one SQLite file: a datagram socket per process.

SQLite has no LISTEN/NOTIFY. Each process that has the file open binds a Unix datagram
socket in a folder beside the file (``<file>-wake``; under the temporary folder when that
path is too long for a socket) and listens on it. What the engine publishes after a
commit (``Notifier.remote``: a run to take, a run that changed or ended) is gathered for
one turn of the event loop and sent as one datagram to every other socket in the folder,
so a worker starts a new run, or a run an event woke, a system call after the commit.

Nothing depends on a datagram arriving: a lost one, a full buffer, a process that never
bound (no Unix sockets, a folder it cannot write) are covered by the writer's watch of
the file's data version and the workers' poll, exactly as before. A socket left by a
process that died refuses the next datagram and is removed by its sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import tempfile
import uuid

from plait.notify import Notifier

log = logging.getLogger("plait.store.sqlite")

#: the longest socket path Linux and macOS take (sun_path less its NUL)
_MOST_PATH = 103
#: a datagram holds at most this much; more changes at once are sent as "look at all"
_MOST_DATAGRAM = 32_768
_EVERYTHING = "all"


def wake_folder(path: str) -> str:
    """The folder whose sockets are the processes of the file at ``path``: beside it, or
    (when a socket's path there would be too long) one named by its real path under the
    temporary folder."""
    folder = os.path.abspath(path) + "-wake"
    if len(os.fsencode(folder)) + 40 <= _MOST_PATH:
        return folder
    digest = hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"plait-wake-{digest}")


class WakeChannel:
    """This process's socket in the file's wake folder, and its sends to the others."""

    def __init__(self, path: str) -> None:
        self.folder = wake_folder(path)
        self._sock: socket.socket | None = None
        self._name = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._notifier: Notifier | None = None
        #: what this turn of the loop published, sent together at its end
        self._outbox: dict[str, None] = {}
        self._flush_due = False
        #: the other sockets, read again when the folder's mtime moves
        self._peers: list[str] = []
        self._seen_mtime = -1

    @property
    def open(self) -> bool:
        return self._sock is not None

    def attach(self, notifier: Notifier) -> bool:
        """Bind this process's socket and feed what arrives into ``notifier``; False (and
        nothing bound) where the platform or the folder does not allow it."""
        if not hasattr(socket, "AF_UNIX"):
            return False
        name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        address = os.path.join(self.folder, name)
        sock: socket.socket | None = None
        try:
            os.makedirs(self.folder, exist_ok=True)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.bind(address)
        except OSError as exc:
            if sock is not None:
                sock.close()
            log.info("no wake-up socket in %s (%s): polling only", self.folder, exc)
            return False
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._receive)
        self._sock, self._name, self._notifier = sock, name, notifier
        return True

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(sock.fileno())
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.folder, self._name))
        self._notifier = None

    # -- sending -------------------------------------------------------------------------
    def publish(self, kind: str, value: str) -> None:
        """``Notifier.remote``: tell the other processes, at the end of this loop turn."""
        if self._sock is None or self._loop is None:
            return
        self._outbox["work" if kind == "work" else f"{kind}:{value}"] = None
        if not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        sock = self._sock
        payloads, self._outbox = self._outbox, {}
        if sock is None or not payloads:
            return
        data = "\n".join(payloads).encode()
        if len(data) > _MOST_DATAGRAM:
            data = _EVERYTHING.encode()
        for peer in self._others():
            try:
                sock.sendto(data, os.path.join(self.folder, peer))
            except (ConnectionRefusedError, FileNotFoundError):
                # its process is gone: nobody reads it any more
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.folder, peer))
                self._seen_mtime = -1
            except OSError:
                pass  # a full buffer (it has wake-ups to read) or no right to send

    def _others(self) -> list[str]:
        """The other processes' sockets (a listing only when the folder changed)."""
        try:
            mtime = os.stat(self.folder).st_mtime_ns
        except OSError:
            return []
        if mtime != self._seen_mtime:
            self._seen_mtime = mtime
            with contextlib.suppress(OSError):
                self._peers = [
                    n for n in os.listdir(self.folder) if n.endswith(".sock") and n != self._name
                ]
        return self._peers

    # -- receiving -----------------------------------------------------------------------
    def _receive(self) -> None:
        sock, notifier = self._sock, self._notifier
        if sock is None or notifier is None:
            return
        payloads: dict[str, None] = {}
        while True:
            try:
                data = sock.recv(65_536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            payloads.update(dict.fromkeys(data.decode(errors="replace").split("\n")))
        if _EVERYTHING in payloads:
            notifier.everything_changed()
            return
        for payload in payloads:
            if payload == "work":
                notifier.local_work()
            elif payload.startswith("run:"):
                notifier.local_run_changed(payload[4:])
            elif payload.startswith("busy:"):
                notifier.local_run_changed(payload[5:], settled=False)


__all__ = ["WakeChannel", "wake_folder"]
