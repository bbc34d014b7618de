"""``wf.send_event``: a workflow sends an event to a run (another, or its own) as a step.

The step has no attempt: the pass reads the run it sends to, and either records the
step's success together with the event (one commit, made at once: ``steps.send_event``)
or fails it at once (``steps.refuse_send``). The workflow hears of the send once that
commit is in: a run that ended between the read and the commit takes no event, the
store writes nothing of the commit, and the step fails as a replay would fail it. A
replay finds the step recorded and sends nothing again; the event's de-duplication key
is the step's invocation id, so even a commit applied twice stores one event.
"""

from __future__ import annotations

from typing import Any

from plait import serde
from plait.errors import StepError
from plait.ids import is_schedule_owner
from plait.records import Run
from plait.runtime import steps
from plait.runtime.drive import dump_input
from plait.runtime.host import Host
from plait.runtime.ledger import Ledger
from plait.statuses import TERMINAL


async def send_event(
    ledger: Ledger, host: Host, key: str, run_id: str, name: str, payload: Any
) -> None:
    """The pass side of ``wf.send_event(run_id, name, payload)`` at step ``key``. A run
    that does not exist, has ended, or that this run may not send to (``refused``)
    fails the step at once, naming the run."""
    fields = {"run_id": run_id, "event": name, "payload": payload}
    step = ledger.steps.get(key)
    if step is None:
        step = ledger.new_step(
            key, key, steps.SEND_KIND, input=dump_input(fields, key, host.limits)
        )
    else:
        ledger.check_same(step, steps.SEND_KIND, None, dump_input(fields, key))
    if step.status == "succeeded":
        return
    if step.status == "failed":
        raise StepError(step.key, serde.loads(step.error) or {})
    if ledger.dry:
        raise ledger.pause(key)  # a dry pass sends nothing (``runtime.check``)
    # not sent yet (or a pending step a commit carried before this pass could send it)
    payload_text = serde.dumps(payload, what=f"event {name!r}", limits=host.limits)
    target = await host.read_run(run_id)
    refusal = refused(ledger.run.id, ledger.run.owner, run_id, target)
    if refusal is not None:
        ledger.add(steps.refuse_send(step, f"event {name!r} not sent: {refusal}", ledger.now()))
        raise StepError(step.key, serde.loads(step.error) or {})
    if not await ledger.send(
        steps.send_event(step, run_id, name, payload_text, ledger.now()), run_id
    ):
        # the run ended between the read and the commit, and took nothing: the send fails
        # here as it does on a replay, which reads the run ended
        message = f"event {name!r} not sent: run {run_id!r} ended before it was stored"
        ledger.add(steps.refuse_send(step, message, ledger.now()))
        raise StepError(step.key, serde.loads(step.error) or {})


def refused(
    sender_id: str, sender_owner: str | None, run_id: str, target: Run | None
) -> str | None:
    """Why run ``sender_id`` (owned by ``sender_owner``) may not send an event to
    ``target`` (run ``run_id`` as read now, None if there is none), or None if it may.

    A run may send to the runs its owner could send to over HTTP: her own and runs
    without an owner. A run without an owner was started by trusted code and may send
    to any run, and so may a run of a schedule without an owner (``ids.schedule_owner``).
    So a user who starts a workflow reaches no run through it that she could not reach
    herself; and a run she may not reach is refused in the words of one that
    does not exist, as HTTP's 403 says nothing of another user's run either."""
    # a schedule without an owner was made by trusted code (declared in the app): its
    # runs send as trusted code does
    limited = sender_owner is not None and not is_schedule_owner(sender_owner)
    if target is None or (limited and target.owner not in (None, sender_owner)):
        return f"no run {run_id!r} that run {sender_id!r} may send to"
    if target.status in TERMINAL:
        return f"run {run_id!r} has ended ({target.status})"
    return None
