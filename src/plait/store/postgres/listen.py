"""Wake-ups between processes: LISTEN/NOTIFY on one channel per schema.

The schema's functions NOTIFY in the transaction that changes or wakes a run, so a
listener hears of it the moment it commits; what this process's engine publishes goes out
through an outbox that gathers payloads into one NOTIFY statement. A lost notification is
covered by the workers' slow poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from typing import Any

import asyncpg

from plait.notify import WORK_KINDS, Notifier
from plait.store.postgres.pool import Pool

log = logging.getLogger("plait.store.postgres")

_LISTEN_KEEPALIVE = 10.0
_RECONNECT_MAX_DELAY = 5.0
#: the least time between two sends of the outbox: under load the notifications of many
#: passes share one statement (a send per pass would be a transaction per pass)
NOTIFY_GAP = 0.01


class Listener:
    """One connection outside the pool kept LISTENing on ``channel``, and the outbox of
    what this process NOTIFYs."""

    def __init__(
        self,
        pool: Pool,
        channel: str,
        *,
        notify: str,
        keepalive: str,
        enabled: bool = True,
    ) -> None:
        self.pool = pool
        self.channel = channel
        #: the statements that send a list of payloads, and that probe the connection
        self._notify_sql = notify
        self._keepalive_sql = keepalive
        self.enabled = enabled
        self._notifier: Notifier | None = None
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._listen_conn: asyncpg.Connection | None = None
        self._outbox: dict[str, None] = {}
        #: signs this process's notifications: the server sends them back to their
        #: sender too, which has told its own watchers already
        self._me = uuid.uuid4().hex[:12]
        self._flusher: asyncio.Task[None] | None = None
        #: when the outbox was last sent (loop time)
        self._last_flush = -NOTIFY_GAP
        self._closing = False

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up right now (it reconnects by itself)."""
        conn = self._listen_conn
        return conn is not None and not conn.is_closed()

    def open(self) -> None:
        self._closing = False

    async def attach(self, notifier: Notifier) -> None:
        """LISTEN and feed what arrives into ``notifier``; what the engine publishes is
        NOTIFY'd to the other processes. Returns once listening (or after the connect
        timeout if the server cannot be reached: it keeps trying)."""
        self._notifier = notifier
        notifier.remote = self.publish
        notifier.commits_tell = True  # insert_run, fork_run, wake_run and end_run NOTIFY
        if not self.enabled or self._listener is not None:
            return
        self._listening.clear()
        self._listener = asyncio.create_task(self._listen_loop(), name="plait-pg-listen")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), self.pool.connect_timeout)

    async def close(self) -> None:
        self._closing = True
        for task in (self._listener, self._flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._listener = self._flusher = None
        if self._notifier is not None and self._notifier.remote == self.publish:
            self._notifier.remote = None
            self._notifier.commits_tell = False

    async def _listen_loop(self) -> None:
        """One connection outside the pool, kept LISTENing; when it drops, reconnect with
        backoff. Notifications sent while it was away are lost, so after a reconnect every
        loop is kicked to look at the database (the slow poll covers waiting callers)."""
        delay = 0.1
        connected_before = False
        where = self.pool.where
        while not self._closing:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.pool.dsn, timeout=self.pool.connect_timeout)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(self.channel, self._on_notify)
                self._listen_conn = conn
                self._listening.set()
                if connected_before and self._notifier is not None:
                    log.info("listening on %s again", where)
                    # notifications may have been missed: every loop and waiter looks
                    self._notifier.everything_changed()
                connected_before, delay = True, 0.1
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), _LISTEN_KEEPALIVE)
                    if not lost.is_set():
                        # a server that vanished without closing the socket shows up here
                        await conn.fetchval(self._keepalive_sql, timeout=_LISTEN_KEEPALIVE)
                if not self._closing:
                    log.warning("LISTEN connection to %s was closed; reconnecting", where)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self._closing:
                    log.warning(
                        "LISTEN connection to %s failed (%s: %s); reconnecting in %.1fs",
                        where,
                        type(exc).__name__,
                        exc,
                        delay,
                    )
            finally:
                self._listen_conn = None
                if conn is not None:
                    conn.terminate()
            if self._closing:
                return
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(_RECONNECT_MAX_DELAY, delay * 2)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        notifier = self._notifier
        if notifier is None or not isinstance(payload, str):
            return
        sender, signed, rest = payload.partition("|")
        if signed:
            if sender == self._me:
                return
            payload = rest
        if payload in WORK_KINDS:
            notifier.local_work(payload)
        elif payload.startswith("run:"):
            notifier.local_run_changed(payload[4:])
        elif payload.startswith("busy:"):
            notifier.local_run_changed(payload[5:], settled=False)

    def publish(self, kind: str, value: str) -> None:
        """Notifier.remote: NOTIFY what this process published. Calls are gathered and
        sent as one statement by a background task, at most one send per ``NOTIFY_GAP``;
        a lost one is covered by polling."""
        self._outbox[f"{self._me}|work" if kind == "work" else f"{self._me}|{kind}:{value}"] = None
        if self.pool.is_open and (self._flusher is None or self._flusher.done()):
            self._flusher = asyncio.get_running_loop().create_task(self._flush_outbox())

    async def _flush_outbox(self) -> None:
        loop = asyncio.get_running_loop()
        while self._outbox and not self._closing:
            wait = self._last_flush + NOTIFY_GAP - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            self._last_flush = loop.time()
            payloads, self._outbox = list(self._outbox), {}
            try:
                await self.pool.call("execute", self._notify_sql, self.channel, payloads)
            except Exception as exc:
                log.debug("NOTIFY failed (%s); listeners fall back to polling", exc)


__all__ = ["Listener"]
