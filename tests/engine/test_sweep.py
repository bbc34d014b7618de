"""The safety net: a run left ``running`` with nothing to wake it is re-driven, with
back-off, and never while it has a timer, a job or a lease."""

from __future__ import annotations

import time

import plait


async def _backdate(store, run_id: str, seconds: float, sweeps: int = 0) -> None:
    await store._write(
        lambda c: c.execute(
            "UPDATE plait_runs SET wake_at = NULL, updated_at = ?, idle_sweeps = ? WHERE id = ?",
            (time.time() - seconds, sweeps, run_id),
        )
    )


async def test_idle_running_run_is_swept_with_backoff(tmp_path) -> None:
    app = plait.App()

    @app.workflow
    async def waits(wf: plait.Workflow, data: None) -> object:
        return await wf.wait_for_event("never")

    async with plait.Engine(app, f"sqlite:///{tmp_path}/s.db", workers=False) as engine:
        run_id = await engine.start("waits")
        store = engine.store
        await _backdate(store, run_id, 10)
        assert await store.sweep_idle() == 0  # too fresh
        await _backdate(store, run_id, 31)
        assert await store.sweep_idle() == 1
        snapshot = await store.load_pass(run_id)
        assert snapshot.run.wake_at is not None
        assert await store.sweep_idle() == 0  # due already: not swept twice
        await _backdate(store, run_id, 45, sweeps=1)
        assert await store.sweep_idle() == 0  # the second sweep waits 60 s
        await _backdate(store, run_id, 61, sweeps=1)
        assert await store.sweep_idle() == 1
        await _backdate(store, run_id, 599, sweeps=10)
        assert await store.sweep_idle() == 0  # capped at 10 minutes
        await _backdate(store, run_id, 601, sweeps=10)
        assert await store.sweep_idle() == 1


async def test_runs_with_timers_or_finished_are_not_swept(tmp_path) -> None:
    app = plait.App()

    @app.workflow
    async def sleeps(wf: plait.Workflow, data: None) -> None:
        await wf.sleep("nap", "1h")

    @app.workflow
    async def done(wf: plait.Workflow, data: None) -> int:
        return 1

    async with plait.Engine(app, f"sqlite:///{tmp_path}/s.db") as engine:
        sleeping = await engine.start("sleeps", inline=True)
        finished = await engine.start("done")
        await engine.wait(finished, timeout=10)

        async def has_timer() -> bool:
            steps = await engine.get_steps(sleeping)
            return bool(steps) and steps[0].status == "scheduled"

        from support.polling import eventually

        await eventually(has_timer, what="the sleep")
        await eventually(lambda: _released(engine, sleeping), what="the lease to be released")
        await _backdate(engine.store, sleeping, 3600)
        await _backdate(engine.store, finished, 3600)
        assert await engine.store.sweep_idle() == 0


async def _released(engine: plait.Engine, run_id: str) -> bool:
    snapshot = await engine.store.load_pass(run_id)
    return snapshot.run.lease_owner is None
