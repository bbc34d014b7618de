"""Requests in a code replay: a wait that takes the oldest request of its name, and the
answer step that replies to it or refuses it.

A wait (``wf.wait_for_request``) is a step like an event wait: ``scheduled`` until it
takes a request or its timeout passes. It stores its schema as JSON Schema, so a request
sent while it waits is judged on arrival (``Engine.request``); one sent before is judged
here by the same JSON Schema and then by the schema itself (as an approval's decision
is), and refused, never taken, when its data does not fit. A request is taken when the
wait's outcome reaches the workflow (the delivery order's ``_take``), in one conditional
write that a sender withdrawing it races (``TakeRequest``). The answer (``req.reply`` /
``req.refuse``) is a step of its own, recorded once with the request's answer and
committed at once, so the sender hears it now and a replay never answers again.
"""

from __future__ import annotations

import bisect
from typing import Any, cast

import pydantic

from plait import request, serde
from plait.errors import RequestTimeout
from plait.runtime import steps
from plait.runtime.gates import Found, raise_if_cancelled
from plait.runtime.host import Host
from plait.runtime.ledger import Ledger
from plait.runtime.workflow import Replay, Request
from plait.store.rows import RequestRow, StepRow


class Requests:
    """The waits for requests, and their answers, of one pass."""

    def __init__(self, ledger: Ledger, host: Host) -> None:
        self.ledger = ledger
        self.host = host

    async def wait(
        self,
        replay: Replay,
        key: str,
        name: str,
        schema: type[pydantic.BaseModel] | None,
        timeout: float | None,
    ) -> Request[Any] | Found:
        """The request this wait took, or the oldest one sent for ``name`` (taken when
        delivered), or ``RequestTimeout``; else the run waits. A request past its
        sender's deadline is left alone: its sender withdraws it."""
        ledger = self.ledger
        step = ledger.steps.get(key)
        now = ledger.now()
        if step is None:
            info = {
                "request": name,
                "schema": schema.model_json_schema() if schema is not None else None,
            }
            step = ledger.new_step(key, key, steps.REQUEST_KIND, input=serde.dumps(info))
            ledger.add(steps.wait_request(step, timeout, now))
        else:
            ledger.check_same(step, steps.REQUEST_KIND, None)
            raise_if_cancelled(step)
        if step.status == "succeeded":
            taken: dict[str, Any] = serde.loads(step.output) or {}
            data = taken.get("data")
            return Request(replay, name, int(taken["id"]), _data(schema, data), data)
        if step.status == "failed":
            raise RequestTimeout(name, key)
        for sent in [r for r in ledger.requests if r.name == name]:
            ledger.requests.remove(sent)
            if sent.deadline <= now:
                continue
            try:
                value = _judged(step, schema, serde.loads(sent.data))
            except _Refused as refused:
                ledger.add(steps.refuse_sent_request(sent.id, request.invalid(refused.problems)))
                continue
            return Found(name, (), request=sent, data=value)
        timed_out = steps.time_out_request(step, name, now)
        if timed_out is not None:
            ledger.add(timed_out)
            if self.host.telemetry is not None:
                self.host.telemetry.timer_fired(ledger.run.id, key, "request timeout of")
            raise RequestTimeout(name, key)
        raise ledger.pause(key, step.wake_at)

    def take(self, replay: Replay, step: StepRow, found: Found) -> Request[Any]:
        """The wait takes the request it found: the workflow still waits for it."""
        sent = found.request
        assert sent is not None
        self.ledger.add(steps.take_request(step, sent.id, sent.data, self.ledger.now()))
        return Request(replay, found.name, sent.id, found.data, serde.loads(sent.data))

    def put_back(self, sent: RequestRow) -> None:
        """A request found by a wait the workflow gave up stays for the next wait."""
        bisect.insort(self.ledger.requests, sent, key=_order)

    async def answer(
        self, key: str, request_id: int, data: str | None, reply: str | None, refusal: str | None
    ) -> None:
        """Answer a taken request once: a step whose input is the request's data and
        whose output is the reply, committed at once so its sender hears it now. A
        replay finds the step and answers nothing again."""
        ledger = self.ledger
        step = ledger.steps.get(key)
        if step is not None:
            ledger.check_same(step, steps.ANSWER_KIND, None)
            return
        if ledger.dry:
            raise ledger.pause(key)  # a dry pass answers nothing (``runtime.check``)
        step = ledger.new_step(key, key, steps.ANSWER_KIND, input=data)
        ledger.add(steps.answer_request(step, request_id, reply, refusal, ledger.now()))
        ledger.published = True  # its sender watches the run
        await ledger.flush()


def _order(sent: RequestRow) -> int:
    return sent.id


class _Refused(Exception):
    """A request's data does not fit the wait: ``problems`` says where."""

    def __init__(self, problems: list[dict[str, str]]) -> None:
        super().__init__(problems)
        self.problems = problems


def _judged(step: StepRow, schema: type[pydantic.BaseModel] | None, data: Any) -> Any:
    """The data of a request sent before its wait was open, judged as ``Engine.request``
    judges one sent while it is (the JSON Schema the wait stored), then by the schema
    itself, as an approval's decision is: a request gets one verdict whenever it
    arrives. ``_Refused`` if it does not fit."""
    stored = request.wait_info(step.input).get("schema")
    found = request.problems(
        cast(dict[str, Any], stored) if isinstance(stored, dict) else None, data
    )
    if found:
        raise _Refused(found)
    try:
        return _data(schema, data)
    except pydantic.ValidationError as exc:
        raise _Refused(_problems(exc)) from None


def _data(schema: type[pydantic.BaseModel] | None, data: Any) -> Any:
    """A request's data as the workflow sees it: validated by the wait's schema
    (``pydantic.ValidationError`` if it does not fit)."""
    return data if schema is None else schema.model_validate(data)


def _problems(exc: pydantic.ValidationError) -> list[dict[str, str]]:
    return [
        {"field": ".".join(str(p) for p in err.get("loc", ())), "message": err.get("msg", "")}
        for err in exc.errors(include_url=False)
    ]
