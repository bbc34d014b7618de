"""The values a run publishes (``wf.set_value``): read them, or wait for one."""

from __future__ import annotations

import time
from typing import Any

from plait import serde
from plait.durations import timeout_seconds
from plait.engine.base import Duration, EngineBase
from plait.errors import ValueNotSetError
from plait.notify import wait_event
from plait.records import TERMINAL

#: the slow look a waiting ``get_value`` takes in case a wake-up was lost (it doubles)
_VALUE_SAFETY = 1.0
_VALUE_SAFETY_MAX = 5.0


class ValuesMixin(EngineBase):
    """``Engine.get_values`` and ``get_value``."""

    async def get_values(self, run_id: str) -> dict[str, Any]:
        """Every value the run published (``wf.set_value``), by key."""
        await self.get_run(run_id)
        return {k: serde.loads(v) for k, v in (await self.store.get_values(run_id)).items()}

    async def get_value(
        self, run_id: str, key: str, *, wait: bool = False, timeout: Duration | None = None
    ) -> Any:
        """The value the run published under ``key`` (None while there is none). With
        ``wait``, waits until it is published: woken by the commit that publishes it,
        not by polling. ``TimeoutError`` after ``timeout`` seconds;
        ``ValueNotSetError`` if the run ends without publishing it."""
        if not isinstance(key, str) or not key:
            raise TypeError(f"value key must be a non-empty string, got {key!r}")
        seconds = timeout_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        safety = _VALUE_SAFETY
        while True:
            event = self.notifier.watch(run_id)
            try:
                run = await self.get_run(run_id)
                values = await self.store.get_values(run_id)
                if key in values:
                    return serde.loads(values[key])
                if not wait:
                    return None
                if run.status in TERMINAL:
                    raise ValueNotSetError(run_id, key, str(run.status))
                wait_for = safety
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(
                            f"run {run_id} published no value {key!r} in {seconds:g}s"
                        )
                    wait_for = min(wait_for, left)
                await wait_event(event, wait_for)
                safety = min(_VALUE_SAFETY_MAX, safety * 2)
            finally:
                self.notifier.unwatch(run_id, event)
