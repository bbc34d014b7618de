"""A worker says it is working only once a SIGTERM would drain it, not kill it."""

from __future__ import annotations

import asyncio
import os
import signal

import plait


async def test_ready_is_told_after_the_signals_are_handled(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def idle(wf: plait.Workflow, data: None) -> None:
        return None

    seen: list[object] = []
    closed: list[float] = []
    async with engine_factory(app) as engine:

        def ready() -> None:
            # a supervisor that reads the "working" line may stop the worker at once
            seen.append(signal.getsignal(signal.SIGTERM))
            os.kill(os.getpid(), signal.SIGTERM)

        async def close(drain: float) -> None:
            closed.append(drain)

        try:
            await engine.worker.run_until_signal(close, drain=0.5, ready=ready)
        finally:
            running = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                running.remove_signal_handler(sig)
    assert seen and seen[0] is not signal.SIG_DFL
    assert closed == [0.5]
