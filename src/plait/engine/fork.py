"""Fork: a new run of an ended run's workflow and input that keeps the steps the source
reached before a given step and runs the rest again; with ``replace``, the way forward
for a live run whose history the code no longer replays (the source is cancelled in the
same transaction)."""

from __future__ import annotations

from typing import Any, cast

from plait import serde
from plait.engine.base import EngineBase, existing_id
from plait.errors import (
    RunNotFoundError,
    RunStateError,
)
from plait.ids import check_caller_run_id, new_run_id
from plait.records import step_label
from plait.runtime import runs
from plait.statuses import TERMINAL
from plait.store.ops import AppendStream, Op, PutStep, SetValue
from plait.store.rows import NewRun, StepRow


class ForkMixin(EngineBase):
    """``Engine.fork``."""

    async def fork(
        self,
        source_run_id: str,
        /,
        *,
        from_step: str,
        run_id: str | None = None,
        replace: bool = False,
    ) -> str:
        """A new run of the same workflow and input that keeps the results of the steps
        the source reached before ``from_step`` (first-reached order) and runs
        ``from_step`` and everything after again, on the code deployed now. Its
        ``forked_from`` names the source. ``from_step`` is one of the source's own steps
        (not a step of a child run), by its key or by the name ``plait runs show`` and
        the dashboard display (``wait for event: approval``, ``sleep: nap``).

        Only an ended run forks: a queued, running or suspended source is refused. With
        ``replace=True`` a source that has not ended is cancelled (its reason names the
        fork) in the same transaction that makes the fork, as ``cancel`` ends it: the
        way forward for a live run whose recorded history the code can no longer
        replay. If the fork cannot be made, the source is left as it was.

        A kept step is compared with the code by its key, kind and function, not its
        input: its input may hold the source's ``wf.run_id``. Steps from ``from_step``
        on are replayed and compared as any run's.

        The fork records the version of the code it runs: this process's, when it has
        the workflow's code; else (the command line without an app) none, and its first
        pass records the version of the code that replays it.

        The fork is admitted like a start of the workflow: through the source's stored
        queue, with its key and priority (and its ``wf.scheduled_at``), ``queued`` until
        the queue has room. The source's stored flow options are used, not this
        process's registration: they are what the source was started with (a
        ``start(queue=...)`` included), and they are the same in every process, the
        command line that loads no app too. A fork takes no de-duplication key (the
        source's belongs to the source, or to a later run that took it) and no delay.

        The values the kept ``wf.set_value`` steps published are published again for
        the fork, in the same transaction (the last one reached of each key wins);
        values published at ``from_step`` or after are not. So are the entries the kept
        ``wf.stream(name).write`` steps appended, in the order they were reached: the
        fork replays those writes from their record and never makes them again."""
        if not isinstance(from_step, str) or not from_step:
            raise TypeError(
                f"from_step must be a step key or displayed name (a non-empty string), "
                f"got {from_step!r}"
            )
        if not isinstance(replace, bool):
            raise TypeError(f"replace must be True or False, got {replace!r}")
        if run_id is not None:
            # as a start's: it must fit in a URL and a CLI argument, and not be a tick's
            check_caller_run_id(run_id)
        snapshot = await self.store.load_pass(existing_id(source_run_id))
        if snapshot is None:
            raise RunNotFoundError(source_run_id)
        source = snapshot.run
        if source.kind == "graph":
            raise ValueError(
                f"run {source_run_id!r} is a graph run; fork reruns code workflows "
                "(start a graph run again with start_node=...)"
            )
        if source.status not in TERMINAL and not replace:
            raise RunStateError(
                source_run_id,
                source.status,
                "fork",
                "only an ended run forks: cancel it first, or fork it with replace=True "
                "(plait fork --replace), which cancels it as the fork is made",
            )
        start = await self._fork_point(source_run_id, from_step, snapshot.steps)
        new_id = run_id or new_run_id()
        kind, version = source.kind, None
        if self.app.is_runnable(source.workflow):
            kind, version = self.catalog.describe(source.workflow)
        now = self.clock.now()
        ops: list[Op] = []
        values: list[Op] = []
        for step in sorted(snapshot.steps.values(), key=lambda s: s.seq):
            if step.seq >= start.seq or step.status not in ("succeeded", "failed"):
                continue
            # a kept step keeps the invocation id its result was made under (the
            # source's): that marks it kept for the replay (ids.kept_step)
            kept = step.copy()
            kept.run_id, kept.wake_at, kept.updated_at = new_id, None, now
            ops.append(PutStep(kept))
            if step.kind == "set_value" and step.status == "succeeded":
                values.append(SetValue(_value_key(step), step.output))
            elif step.kind == "stream" and step.status == "succeeded":
                # replayed from its record, a kept write is never made again: the fork's
                # stream gets its entry now, in the order the writes were reached
                values.append(AppendStream(_stream_name(step), step.output))
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
            tags=source.tags,
            # a new run of the workflow: its own deadline, counted from now as a start's
            timeout=source.timeout,
            deadline_at=runs.deadline(now, source.timeout),
            trace=None
            if self.telemetry is None
            else self.telemetry.run_created(new_id, source.workflow),
        )
        allowed = TERMINAL | runs.CANCELLABLE if replace else TERMINAL
        _, moved = await self.store.fork_run(
            new,
            source_run_id,
            ops + values,
            sorted(allowed),
            runs.replaced(new_id) if replace else None,
        )
        self.notifier.runs_created()
        if new.deadline_at is not None:
            self.worker.deadline_set(new.deadline_at)
        if moved:
            await self._cancelled(moved)
        return new_id

    async def _fork_point(self, run_id: str, given: str, recorded: dict[str, StepRow]) -> StepRow:
        """The step of run ``run_id`` that ``given`` names: its key, or else the name
        the dashboard and ``plait runs show`` display for it (``step_label``), which
        must name one step only."""
        step = recorded.get(given)
        if step is not None:
            return step
        named = sorted(
            (s for s in recorded.values() if step_label(s.key, s.kind) == given),
            key=lambda s: s.seq,
        )
        if len(named) == 1:
            return named[0]
        if named:
            keys = ", ".join(repr(s.key) for s in named)
            raise ValueError(
                f"step name {given!r} is ambiguous in run {run_id!r}: it is the displayed "
                f"name of steps {keys}; give the step's key"
            )
        raise ValueError(await self._no_such_step(run_id, given, recorded))

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
        known = ", ".join(_shown(s) for s in sorted(recorded.values(), key=lambda s: s.seq))
        return f"run {run_id!r} has no step {key!r} (its steps: {known or 'none'})"


def _shown(step: StepRow) -> str:
    """A step as an error lists it: its key, and the name displayed for it if another."""
    label = step_label(step.key, step.kind)
    return repr(step.key) if label == step.key else f"{step.key!r} (shown as {label!r})"


def _stream_name(step: StepRow) -> str:
    """The stream a ``wf.stream(name).write`` step wrote to: its input is
    ``{"stream": ...}``, as every such step has recorded since the first."""
    return cast(str, cast(dict[str, Any], serde.loads(step.input))["stream"])


def _value_key(step: StepRow) -> str:
    """The key a ``wf.set_value`` step published under: its input is ``{"key": ...}``,
    as every such step has recorded since the first."""
    return cast(str, cast(dict[str, Any], serde.loads(step.input))["key"])
