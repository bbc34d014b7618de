"""Steps that only wait, in a code replay: a sleep, a suspend, an event wait. Each is a
step recorded on first reach; a replay finds it over (its timer fired, its event taken, it
was resumed) or pauses the run on it again. What each transition writes is the step state
machine's (``runtime.steps``); an event found is taken only when the wait's outcome is
delivered (``runtime.gates.Found``)."""

from __future__ import annotations

from typing import Any

from plait import errors, serde
from plait.errors import EventTimeout
from plait.runtime import steps
from plait.runtime.control_flow import SuspendSignal
from plait.runtime.gates import Found, raise_if_cancelled
from plait.runtime.host import Host
from plait.runtime.ledger import Ledger


class Waits:
    """The pass side of ``wf.sleep``, ``wf.suspend`` and ``wf.wait_for_event``."""

    def __init__(self, ledger: Ledger, host: Host) -> None:
        self.ledger = ledger
        self.host = host

    async def sleep(self, key: str, name: str, seconds: float) -> None:
        ledger = self.ledger
        step = ledger.steps.get(key)
        now = ledger.now()
        if step is None:
            step = ledger.new_step(key, name, "sleep", input=serde.dumps({"seconds": seconds}))
            ledger.add(steps.schedule_sleep(step, seconds, now))
        else:
            ledger.check_same(step, "sleep", None)
            raise_if_cancelled(step)
        if step.status == "succeeded":
            return
        fired = steps.fire_timer(step, now)
        if fired is not None:
            ledger.add(fired)
            if self.host.telemetry is not None:
                self.host.telemetry.timer_fired(ledger.run.id, key, "sleep")
            return
        raise ledger.pause(key, step.wake_at)

    async def suspend(self, key: str, reason: str) -> None:
        ledger = self.ledger
        step = ledger.steps.get(key)
        if step is None:
            step = ledger.new_step(
                key,
                key,
                "suspend",
                input=serde.dumps({"reason": reason, "suspended_at": ledger.now()}),
            )
            ledger.add(steps.open_suspend(step, ledger.owner, ledger.now()))
        else:
            ledger.check_same(step, "suspend", None)
        if step.status == "succeeded":
            return
        raise SuspendSignal(reason, errors.WORKFLOW_SUSPENDED)

    async def wait_for_event(self, key: str, name: str, timeout: float | None) -> Any:
        ledger = self.ledger
        step = ledger.steps.get(key)
        now = ledger.now()
        if step is None:
            step = ledger.new_step(key, key, "event", input=serde.dumps({"event": name}))
            ledger.add(steps.wait_event(step, timeout, now))
        else:
            ledger.check_same(step, "event", None)
            raise_if_cancelled(step)
        if step.status == "succeeded":
            return serde.loads(step.output)
        if step.status == "failed":
            raise EventTimeout(name, key)
        for event in ledger.events:
            if event.name == name:
                ledger.events.remove(event)
                return Found(name, (event,))  # taken when delivered (``_take``)
        timed_out = steps.time_out_event(step, name, now)
        if timed_out is not None:
            ledger.add(timed_out)
            if self.host.telemetry is not None:
                self.host.telemetry.timer_fired(ledger.run.id, key, "event timeout of")
            raise EventTimeout(name, key)
        raise ledger.pause(key, step.wake_at)
