"""Starting runs in bulk: ``Engine.start_many`` creates many runs in one commit, and what
follows a start's commit, which ``start`` and ``start_many`` share."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from plait import queues
from plait.engine.base import EngineBase, WorkflowRef, workflow_name
from plait.errors import InputValidationError, RunIdTakenError
from plait.ids import check_caller_run_id
from plait.records import Run
from plait.runtime import runs
from plait.store.rows import NewRun


class StartsMixin(EngineBase):
    """``Engine.start_many``, and the end of every start."""

    #: whether this engine's loops take work (``Engine(workers=...)``)
    workers: bool
    #: ``Engine._new_run``: the run ``start`` creates, every option and the input
    #: (``what``) checked, nothing written
    _new_run: Callable[..., Awaitable[NewRun]]

    async def start_many(
        self,
        name: WorkflowRef,
        inputs: Iterable[Any],
        *,
        run_ids: Sequence[str] | None = None,
        inline: bool = False,
        owner: str | None = None,
        start_node: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        priority: int = 0,
        dedup: str | None = None,
        delay: float | str | timedelta | None = None,
        start_at: datetime | None = None,
        timeout: float | str | timedelta | None = None,
        tags: Mapping[str, str] | None = None,
        dedup_policy: str = "skip",
        debounce: float | str | timedelta | None = None,
        debounce_key: str | None = None,
        debounce_max: float | str | timedelta | None = None,
        connection: object = None,
    ) -> list[str]:
        """Start one run per item of ``inputs`` in one commit and return their ids in the
        order of ``inputs``: an import or a fan-out pays one durable write, not one each.

        Each run is started as ``start`` starts it, with the same options (``tags``
        too) for all;
        ``run_ids`` (one per input, else each is generated) are idempotency keys as
        ``run_id`` is: an id that exists already gives the existing run, and ``dedup``
        gives the live run that holds the key (a later input with the key of an earlier
        one gets the earlier one's id). Every input is checked before anything is
        written: an input that cannot be stored is an error naming its index, and then
        no run is started. The workers of every process see the runs once they exist.

        With ``debounce`` the inputs are debounced starts in their order: they share one
        run (with the last input), or join the run of their key waiting already.
        ``dedup_policy="replace"`` is refused: each input would cancel the one before.

        All or nothing: an id in ``run_ids`` held by a run of another workflow is
        ``RunIdTakenError``, and then no run is started.

        ``connection``: the runs are written in the caller's open transaction on it, as
        ``start(connection=...)`` writes one: they exist once the caller commits, and
        not at all if it rolls back (as it should after an error here). Not with
        ``inline=True`` nor ``debounce``.
        """
        if queues.check_dedup_policy(dedup_policy, dedup) == "replace":
            raise ValueError(
                "start_many does not take dedup_policy='replace' (each input would cancel "
                "the run of the one before): start the one run with start()"
            )
        kind = type(inputs).__name__
        if isinstance(inputs, str | bytes | Mapping) or not isinstance(inputs, Iterable):
            raise TypeError(f"inputs must be a list with one input per run, got {kind}")
        items = list(inputs)
        if run_ids is not None:
            if isinstance(run_ids, str) or not isinstance(run_ids, Sequence):
                raise TypeError(f"run_ids must be a list of run ids, got {type(run_ids).__name__}")
            if len(run_ids) != len(items):
                raise ValueError(
                    f"run_ids has {len(run_ids)} ids for {len(items)} inputs (one per input)"
                )
            for i, given in enumerate(run_ids):
                try:
                    check_caller_run_id(given)
                except (TypeError, ValueError) as exc:
                    raise type(exc)(f"run_ids[{i}]: {exc}") from None
        if connection is not None:
            in_transaction(inline, debounce, dedup_policy)
        label = workflow_name(name)
        news: list[NewRun] = []
        for i, data in enumerate(items):
            run_id = None if run_ids is None else run_ids[i]
            try:
                new = await self._new_run(
                    name,
                    data,
                    deadline=timeout,
                    what=f"inputs[{i}] of workflow {label!r}",
                    run_id=run_id,
                    inline=inline,
                    owner=owner,
                    start_node=start_node,
                    queue=queue,
                    key=key,
                    priority=priority,
                    dedup=dedup,
                    delay=delay,
                    start_at=start_at,
                    tags=tags,
                    debounce=debounce,
                    debounce_key=debounce_key,
                    debounce_max=debounce_max,
                )
            except InputValidationError as exc:
                raise InputValidationError(f"inputs[{i}]: {exc}") from None
            news.append(new)
        if not news:
            await self.catalog.resolve(label)  # an unknown workflow is an error even so
            return []
        if connection is not None:
            return [await self._create_in(connection, new) for new in news]
        since = time.monotonic()  # inline runs are created leased to this process
        outcomes = await self.store.create_runs(news)
        pairs = zip(news, outcomes, strict=True)
        ids = [
            self._started(new, run, made, since=since, publish=False)[0]
            for new, (run, made) in pairs
        ]
        if not inline and any(created for _run, created in outcomes):
            self.notifier.runs_created()
        return ids

    async def _create(self, new: NewRun, dedup_policy: str) -> tuple[Run, bool]:
        """Create ``new`` (the run it found instead, and False). With ``dedup_policy``
        ``replace`` the live run holding its dedup key is cancelled, as ``cancel`` ends a
        run, in the transaction that creates ``new``, so that starts racing on one key
        leave one live run; only a run of the same owner is replaced: another owner's is
        returned, as a skip returns it."""
        if dedup_policy != "replace" or new.dedup is None:
            return await self.store.create_run(new)
        end = runs.replaced_by_start(new.id, new.dedup)
        run, created, moved = await self.store.replace_run(new, end)
        if moved:
            await self._cancelled(moved)
        return run, created

    async def _start_in(
        self, connection: object, name: Any, data: Any, *, inline: bool = False, **options: Any
    ) -> str:
        """``start(connection=...)``: the run written in the caller's open transaction on
        ``connection`` (``Store.create_run_in``), to be committed or rolled back with it.
        Workers are not told here: the caller's commit is what makes the run, and on
        PostgreSQL it carries the NOTIFY that wakes them."""
        in_transaction(inline, options.get("debounce"), options.get("dedup_policy", "skip"))
        return await self._create_in(connection, await self._new_run(name, data, **options))

    async def _create_in(self, connection: object, new: NewRun) -> str:
        """Write ``new`` in the caller's transaction on ``connection``: the id its
        starter gets."""
        rid, workflow, created = await self.store.create_run_in(connection, new)
        if not created and rid == new.id and workflow != new.workflow:
            raise RunIdTakenError(rid, workflow, new.workflow)
        if created and new.deadline_at is not None:
            self.worker.deadline_set(new.deadline_at)
        return rid

    def _started(
        self, new: NewRun, run: Run, created: bool, *, since: float, publish: bool = True
    ) -> tuple[str, bool]:
        """After the commit that holds ``new``: the id its starter gets, and whether the
        run is one made and driven here (inline). A run this start created has its
        deadline watched and, inline, its first pass begun; the workers of every process
        are told of one they may take (unless ``publish`` is off: a caller that started
        many tells them once). ``since``: the monotonic time before the commit, from which
        an inline run's lease counts."""
        if not created:
            if run.id != new.id:
                return run.id, False  # the live run that holds the de-duplication key
            if run.workflow != new.workflow:
                raise RunIdTakenError(run.id, run.workflow, new.workflow)
            return run.id, False
        worker = self.worker
        if new.deadline_at is not None:
            worker.deadline_set(new.deadline_at)
        # a brake the store found as it wrote the run holds it ``queued``, not driven here
        inline = new.lease_owner is not None and run.status == new.status
        if inline:
            worker.drive(run.id, claimed=True, follow=not self.workers, since=since)
        elif publish:
            self.notifier.runs_created()
        return run.id, inline


def in_transaction(inline: bool, debounce: object, dedup_policy: str) -> None:
    """Refuse the options a start written in the caller's transaction cannot have."""
    if inline:
        raise ValueError(
            "inline=True cannot start a run in the caller's transaction: no process"
            " may drive it before the transaction commits"
        )
    if debounce is not None or dedup_policy == "replace":
        raise ValueError(
            "connection= does not combine with debounce or dedup_policy='replace': they"
            " change runs other than the one this transaction writes"
        )
