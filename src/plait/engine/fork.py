"""Fork: a new run of an ended run's workflow and input that keeps the steps the source
reached before a given step and runs the rest again."""

from __future__ import annotations

from typing import Any, cast

from plait import ids, serde
from plait.engine.base import EngineBase
from plait.errors import (
    RunNotFoundError,
    RunStateError,
)
from plait.ids import check_caller_run_id, new_run_id
from plait.runtime import runs
from plait.store.ops import Op, PutStep, SetValue
from plait.store.rows import NewRun, StepRow


class ForkMixin(EngineBase):
    """``Engine.fork``."""

    async def fork(
        self, source_run_id: str, /, *, from_step: str, run_id: str | None = None
    ) -> str:
        """A new run of the same workflow and input that keeps the results of the steps
        the source reached before ``from_step`` (first-reached order) and runs
        ``from_step`` and everything after again, on the code deployed now. Its
        ``forked_from`` names the source. The source must not be running (cancel it
        first); ``from_step`` must be one of its own steps, not a step of a child run.

        The fork is admitted like a start of the workflow: through the source's stored
        queue, with its key and priority (and its ``wf.scheduled_at``), ``queued`` until
        the queue has room. The source's stored flow options are used, not this
        process's registration: they are what the source was started with (a
        ``start(queue=...)`` included), and they are the same in every process, the
        command line that loads no app too. A fork takes no de-duplication key (the
        source's belongs to the source, or to a later run that took it) and no delay.

        The values the kept ``wf.set_value`` steps published are published again for
        the fork, in the same transaction (the last one reached of each key wins);
        values published at ``from_step`` or after are not."""
        if not isinstance(from_step, str) or not from_step:
            raise TypeError(f"from_step must be a step key (a non-empty string), got {from_step!r}")
        if run_id is not None:
            # as a start's: it must fit in a URL and a CLI argument, and not be a tick's
            check_caller_run_id(run_id)
        snapshot = await self.store.load_pass(source_run_id)
        if snapshot is None:
            raise RunNotFoundError(source_run_id)
        source = snapshot.run
        if source.status in ("running", "queued"):
            raise RunStateError(source_run_id, source.status, "fork (cancel it first)")
        if source.kind == "graph":
            raise ValueError(
                f"run {source_run_id!r} is a graph run; fork reruns code workflows "
                "(start a graph run again with start_node=...)"
            )
        start = snapshot.steps.get(from_step)
        if start is None:
            raise ValueError(await self._no_such_step(source_run_id, from_step, snapshot.steps))
        new_id = run_id or new_run_id()
        if self.app.is_runnable(source.workflow):
            kind, version = self.catalog.describe(source.workflow)
        else:  # this process lacks the code: the run goes on what the workers have
            kind, version = source.kind, source.version
        now = self.clock.now()
        ops: list[Op] = []
        values: list[Op] = []
        for step in sorted(snapshot.steps.values(), key=lambda s: s.seq):
            if step.seq >= start.seq or step.status not in ("succeeded", "failed"):
                continue
            kept = step.copy()
            kept.run_id, kept.wake_at, kept.updated_at = new_id, None, now
            kept.invocation_id = ids.invocation_id(new_id, step.key)
            ops.append(PutStep(kept))
            if step.kind == "set_value" and step.status == "succeeded":
                values.append(SetValue(_value_key(step), step.output))
        new = NewRun(
            id=new_id,
            workflow=source.workflow,
            kind=kind,
            version=version,
            input=source.input,
            owner=source.owner,
            status=runs.initial_status(source.queue is not None),
            queue=source.queue,
            queue_key=source.queue_key,
            priority=source.priority,
            scheduled_at=source.scheduled_at,
            trace=None
            if self.telemetry is None
            else self.telemetry.run_created(new_id, source.workflow),
        )
        await self.store.fork_run(new, source_run_id, ops + values)
        self.notifier.publish_work()
        return new_id

    async def _no_such_step(self, run_id: str, key: str, recorded: dict[str, StepRow]) -> str:
        """Why ``key`` is no step to fork from: a step of a child run, or none at all."""
        queue = [(run_id, child) for child in await self.store.get_children(run_id)]
        while queue:
            top, child = queue.pop(0)
            if any(s.key == key for s in await self.store.get_steps(child.id)):
                via = next((s.key for s in recorded.values() if s.child_run_id == child.id), None)
                hint = f"; fork run {run_id!r} from step {via!r}" if via else ""
                return (
                    f"step {key!r} is a step of child run {child.id!r} "
                    f"(workflow {child.workflow!r}), not of run {run_id!r}{hint}"
                )
            queue += [(top, grandchild) for grandchild in await self.store.get_children(child.id)]
        known = ", ".join(repr(k) for k in sorted(recorded, key=lambda k: recorded[k].seq))
        return f"run {run_id!r} has no step {key!r} (its steps: {known or 'none'})"


def _value_key(step: StepRow) -> str:
    """The key a ``wf.set_value`` step published under: its input is ``{"key": ...}``,
    as every such step has recorded since the first."""
    return cast(str, cast(dict[str, Any], serde.loads(step.input))["key"])
