"""One pass: which replay a run's pass uses."""

from __future__ import annotations

from plait import errors
from plait.runtime import runs
from plait.runtime.host import Host
from plait.runtime.ledger import Ledger, PassResult
from plait.runtime.replay import CodeReplay
from plait.store.ops import RecordVersion
from plait.store.rows import PassSnapshot


async def execute_pass(host: Host, snapshot: PassSnapshot, owner: str) -> PassResult:
    """Replay the run in ``snapshot`` once, under the lease ``owner`` holds."""
    run = snapshot.run
    if run.kind == "graph":
        # loaded with the first graph run (see plait.graph)
        from plait.runtime.graph_replay import GraphReplay

        return await GraphReplay(host, snapshot, owner).execute()
    wdef, foreign = host.catalog.workflow_for(run.workflow, run.version)
    if wdef is None:
        ledger = Ledger(host, snapshot, owner)
        message = (
            f"workflow {run.workflow!r} is not registered in this deployment; "
            "deploy it and resume the run"
        )
        end = runs.suspended(message, errors.FUNCTION_NOT_FOUND)
        ledger.end(end)
        return await ledger.finish(runs.pass_status(end))
    replay = CodeReplay(host, snapshot, owner)
    replay.ledger.foreign_version = foreign
    if run.version is None and run.forked_from is not None:
        # a fork made where the code was not known: the code of its first pass is the
        # version it runs, and the passes after it replay on that version
        replay.ledger.add([RecordVersion(wdef.version)])
        run.version = wdef.version
    return await replay.execute(wdef)
