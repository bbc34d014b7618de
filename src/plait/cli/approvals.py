"""Approval gates: ``plait approve`` decides one, ``plait approvals list`` lists them."""

from __future__ import annotations

from typing import cast

import typer
from rich.table import Table

from plait.cli.app import (
    RUN_ID_HELP,
    DatabaseOption,
    JsonOption,
    approvals_cli,
    cli,
    console,
    dicts,
    emit_json,
    find_run_id,
    make_engine,
    parse_json,
    run_async,
)
from plait.cli.terminal import esc
from plait.records import ApprovalStatus


@cli.command()
def approve(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    name: str = typer.Argument(..., help="The approval's name (wf.approval(name, ...))."),
    data: str | None = typer.Option(None, "--data", help="The decision's data as JSON."),
    by: str | None = typer.Option(None, "--by", help="Who decides (the user id recorded)."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Decide an approval gate of a run (held if the run has not reached it yet)."""

    async def go() -> None:
        nonlocal run_id  # the whole id of what was given
        payload = parse_json(data, "--data")
        async with make_engine(None, database) as engine:
            run_id = await find_run_id(engine, run_id)
            decision = await engine.approve(run_id, name, payload, decided_by=by)
        if as_json:
            emit_json({"decision": decision.to_dict()})
            return
        console.print(
            f"approval {esc(repr(name))} of run {esc(run_id)}: {esc(decision.outcome)}",
            highlight=False,
        )

    run_async(go)


@approvals_cli.command("list")
def approvals_list(
    user: str | None = typer.Option(None, "--user", help="Only gates this user may decide."),
    status: str = typer.Option("open", "--status", help="open, decided or expired."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Approval gates of live runs, oldest first."""

    async def go() -> None:
        async with make_engine(None, database) as engine:
            # the engine refuses any status but these, with a message naming them
            gates = await engine.list_approvals(status=cast(ApprovalStatus, status), user=user)
        if as_json:
            emit_json(dicts(gates))
            return
        table = Table(title=f"{len(gates)} {status} approvals", title_justify="left")
        for column in ("run", "workflow", "approval", "approvers", "owner", "expires"):
            table.add_column(column, overflow="fold")
        for g in gates:
            table.add_row(
                esc(g.run_id),
                esc(g.workflow),
                esc(g.name),
                esc(g.approvers if isinstance(g.approvers, str) else ", ".join(g.approvers)),
                esc(g.owner or "-"),
                f"{g.expires_at:%Y-%m-%d %H:%M:%S}" if g.expires_at else "-",
            )
        console.print(table)

    run_async(go)
