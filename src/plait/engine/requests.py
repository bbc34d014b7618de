"""Requests with a reply: send one to a live run and wait for the workflow's answer.
What a request may be (its timeout, the records of a refusal) is ``plait.request``'s;
how the workflow takes and answers it is the runtime's (``runtime.replay``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from plait import request, serde
from plait.cancel_guard import uncancelled
from plait.engine.base import EngineBase, existing_id
from plait.errors import RunNotFoundError, RunStateError
from plait.ids import check_name
from plait.notify import wait_event
from plait.records import TERMINAL
from plait.runtime import steps
from plait.statuses import RunStatusName
from plait.store.rows import PassSnapshot, RequestRow

#: a run takes requests while it may still reach a wait for them (a paused or parked run
#: goes on once it is let go, as it takes events)
_LIVE: tuple[RunStatusName, ...] = ("queued", "running", "suspended", "paused", "needs_attention")
#: the slow look a waiting sender takes in case a wake-up was lost (it doubles)
_SAFETY = 0.5
_SAFETY_MAX = 5.0


class RequestsMixin(EngineBase):
    """``Engine.request``."""

    async def request(
        self, run_id: str, name: str, data: Any = None, *, timeout: float = request.DEFAULT_TIMEOUT
    ) -> Any:
        """Send request ``name`` with ``data`` (JSON) to the run and wait up to ``timeout``
        seconds (more than 0, at most 300) for the workflow's answer
        (``wf.wait_for_request`` then ``req.reply``): returns the reply.

        Requests queue in arrival order. Data that does not fit the schema of the wait
        open for ``name`` is refused at once (``plait.ValidationError``); the workflow
        never sees it. ``plait.RequestRefused`` when the workflow refuses it;
        ``RunNotFoundError``; ``RunStateError`` when the run has ended (or ends before it
        answers); ``TimeoutError`` when no answer came in time: a request not taken by
        then is withdrawn, so the workflow never sees it later."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"request name must be a non-empty string, got {name!r}")
        check_name(name, "request name")
        if name.startswith("__"):
            raise ValueError(
                f"request name {name!r} starts with '__', which plait keeps for its own names"
            )
        seconds = request.check_timeout(timeout)
        existing_id(run_id)
        text = serde.dumps(data, what=f"the data of request {name!r}", limits=self.limits)
        give_up = time.monotonic() + seconds
        deadline = self.clock.now() + seconds
        snapshot = await self.store.load_pass(run_id)
        if snapshot is None:
            raise RunNotFoundError(run_id)
        # judged as the workflow will read it: the JSON stored (a model, a datetime or a
        # tuple the sender passed is its JSON form by then)
        found = request.problems(_open_schema(snapshot, name), serde.loads(text))
        if found:
            refusal = request.invalid(found)
            await self.store.send_request(
                run_id, name, text, request.REFUSED, refusal, deadline, _LIVE
            )
            raise request.refusal_error(run_id, name, refusal)
        # the write can commit before this await returns: a cancel landing in between
        # still has to withdraw what was stored, so the write is seen to its end
        storing = asyncio.ensure_future(
            self.store.send_request(run_id, name, text, request.SENT, None, deadline, _LIVE)
        )
        try:
            request_id = await uncancelled(storing)
        except asyncio.CancelledError:
            if storing.done() and not storing.cancelled() and storing.exception() is None:
                await uncancelled(
                    self.store.withdraw_request(storing.result(), request.SENT, request.WITHDRAWN)
                )
            raise
        self._wake(run_id)
        try:
            return await self._answer(run_id, name, request_id, seconds, give_up)
        except asyncio.CancelledError:
            # the sender gave up (wait_for, a closed connection): a request not taken yet
            # is withdrawn, so the workflow never acts on what nobody waits for
            await uncancelled(
                self.store.withdraw_request(request_id, request.SENT, request.WITHDRAWN)
            )
            raise

    async def _answer(
        self, run_id: str, name: str, request_id: int, seconds: float, give_up: float
    ) -> Any:
        """Wait for the answer of request ``request_id``, woken by the commit that
        answers it (with a slow look in case a wake-up was lost)."""
        safety = _SAFETY
        while True:
            event = self.notifier.watch(run_id)
            try:
                # the run first: an answer commits before (or with) the run's end, so a
                # run read ended after it is read says the request read next is final
                run = await self.get_run(run_id)
                sent = await self.store.get_request(request_id)
                if sent is None:  # its run was pruned
                    raise RunNotFoundError(run_id)
                if sent.status in (request.REPLIED, request.REFUSED):
                    return _answered(run_id, name, sent)
                if run.status in TERMINAL:
                    await self.store.withdraw_request(request_id, request.SENT, request.WITHDRAWN)
                    raise RunStateError(run_id, str(run.status), f"answer request {name!r} of")
                left = give_up - time.monotonic()
                if left <= 0:
                    return await self._give_up(run_id, name, request_id, seconds)
                await wait_event(event, min(safety, left))
                safety = min(_SAFETY_MAX, safety * 2)
            finally:
                self.notifier.unwatch(run_id, event)

    async def _give_up(self, run_id: str, name: str, request_id: int, seconds: float) -> Any:
        """The sender's time is up: a request not taken yet is withdrawn (one conditional
        write, which a pass taking it writes too: one of them wins); one answered in the
        meantime still gives its answer."""
        if not await self.store.withdraw_request(request_id, request.SENT, request.WITHDRAWN):
            sent = await self.store.get_request(request_id)
            if sent is not None and sent.status in (request.REPLIED, request.REFUSED):
                return _answered(run_id, name, sent)
            raise TimeoutError(
                f"run {run_id} took request {name!r} but did not answer it in {seconds:g}s"
            )
        raise TimeoutError(
            f"run {run_id} did not take request {name!r} in {seconds:g}s; it was withdrawn"
        )


def _answered(run_id: str, name: str, sent: RequestRow) -> Any:
    if sent.status == request.REPLIED:
        return serde.loads(sent.reply)
    raise request.refusal_error(run_id, name, sent.refusal)


def _open_schema(snapshot: PassSnapshot, name: str) -> dict[str, Any] | None:
    """The JSON Schema of the wait for ``name`` the run has open, if any."""
    for step in snapshot.steps.values():
        if step.kind == steps.REQUEST_KIND and step.status == "scheduled":
            info = request.wait_info(step.input)
            if info.get("request") == name:
                schema = info.get("schema")
                return cast(dict[str, Any], schema) if isinstance(schema, dict) else None
    return None


__all__ = ["RequestsMixin"]
