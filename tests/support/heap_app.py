"""An app whose one step tells what the garbage collector of the process running it has
frozen (``plait worker`` freezes what it built to start)."""

from __future__ import annotations

import gc

import plait

app = plait.App("heap")


@app.function
def frozen_objects() -> int:
    return gc.get_freeze_count()


@app.workflow
async def heap(wf: plait.Workflow) -> int:
    return int(await wf.do("count", frozen_objects))
