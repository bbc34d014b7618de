"""Queues and schedules: limit how much runs at once, admit the urgent first, start later,
start once, and start on a clock.

Run it:  python examples/flow_control.py
Or with workers:  plait worker examples.flow_control:app
                  plait start examples.flow_control:app import_user \
                      --input '{"user": 42}' --key user-42
                  plait schedules list
                  plait queues examples.flow_control:app
                  plait queues --keys exports
"""

from __future__ import annotations

import asyncio
from typing import Any

import plait

app = plait.App("flow-control")

# At most 4 imports at once across every worker, one per user, 100 a minute.
app.queue("imports", concurrency=4, per_key=1, rate="100/m")
# At most 2 emails being sent at once, whichever worker sends them.
app.queue("emails", concurrency=2)
# Exports of many tenants: 2 at once, the tenants with exports waiting take turns (one
# tenant's thousand exports do not hold back another's one); "enterprise" gets 3 a turn.
app.queue("exports", concurrency=2, fair=True, weights={"enterprise": 3})


@app.function(queue="emails")
async def send_email(data: dict[str, Any]) -> str:
    await asyncio.sleep(0.01)
    return f"sent to {data['to']}"


@app.workflow(queue="imports")
async def import_user(wf: plait.Workflow, data: dict[str, Any]) -> dict[str, Any]:
    note = await wf.do("welcome", send_email, {"to": f"user-{data['user']}@example.com"})
    return {"user": data["user"], "note": note}


@app.workflow(queue="exports")
async def export(wf: plait.Workflow, data: dict[str, Any]) -> str:
    return f"export {data['n']} of {data['tenant']}"


@app.workflow
async def report(wf: plait.Workflow, data: dict[str, Any]) -> dict[str, Any]:
    # wf.scheduled_at is the tick this run was started for (None when started by hand)
    tick = wf.scheduled_at.isoformat() if wf.scheduled_at else None
    return {"kind": data.get("kind"), "tick": tick}


# Every night at 03:00 Helsinki time; a tick missed by up to an hour of downtime still runs.
app.schedule(
    "nightly",
    cron="0 3 * * *",
    workflow="report",
    input={"kind": "daily"},
    timezone="Europe/Helsinki",
    overlap="skip",
    catchup="1h",
)


async def main() -> None:
    async with plait.Engine(app, "sqlite:///flow-control.db") as engine:
        # one run per user at a time; the urgent one first; a duplicate start is the same run
        urgent = await engine.start(
            "import_user", {"user": 1}, key="user-1", priority=10, dedup="import:1"
        )
        again = await engine.start("import_user", {"user": 1}, key="user-1", dedup="import:1")
        later = await engine.start("import_user", {"user": 2}, key="user-2", delay="1s")
        for run_id in (urgent, again, later):
            print(run_id, (await engine.wait(run_id, timeout=30)).output)

        # a tenant's backlog does not hold back the others: "small" is admitted in turn
        big = await engine.start_many(
            "export", [{"tenant": "big", "n": n} for n in range(20)], key="big"
        )
        small = await engine.start("export", {"tenant": "small", "n": 0}, key="small")
        print((await engine.wait(small, timeout=30)).output)
        for run_id in big:
            await engine.wait(run_id, timeout=30)

        # a schedule made at run time is stored: every worker on the database fires it
        await engine.create_schedule("often", workflow="report", every="1s", input={"kind": "x"})
        await asyncio.sleep(2.5)
        await engine.pause_schedule("often")
        for schedule in await engine.list_schedules():
            print(schedule.name, schedule.status, schedule.next_tick, schedule.last_run_id)
        await engine.delete_schedule("often")


if __name__ == "__main__":
    asyncio.run(main())
