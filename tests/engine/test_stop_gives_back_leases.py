"""A worker that stops gives back the leases it still holds, so the work goes on at once."""

from __future__ import annotations

import time

import plait


def _app() -> plait.App:
    app = plait.App()

    @app.workflow
    async def chore(wf: plait.Workflow, data: None) -> str:
        return await wf.do("one", lambda: "done")

    return app


async def test_a_run_claimed_but_never_driven_is_given_back_at_stop(engine_factory) -> None:
    """A stop that cancels a pass before it began (the claim landed, the task never ran)
    released nothing itself: the stop gives the lease back, and the next worker takes the
    run at once instead of after its 60 s lease."""
    other = plait.App()

    @other.workflow
    async def unrelated(wf: plait.Workflow, data: None) -> None:
        return None

    async with engine_factory(_app(), workers=False) as starter:
        run_id = await starter.start("chore")
    async with engine_factory(other) as stopping:
        # claimed under this worker's lease, as its pass loop claims; no pass begins
        worker = stopping.worker
        since = time.monotonic()
        assert await stopping.store.claim_run(run_id, worker.owner, 60.0)
        worker.leased([run_id], since)
    async with engine_factory(_app()) as next_worker:
        run = await next_worker.wait(run_id, timeout=20)
    assert run.status == "completed" and run.output == "done"
