"""``plait runs cancel|retry|resume``: one run by its id, or every run a filter matches.

With a RUN_ID the command acts on that run alone (as ``plait cancel RUN_ID`` does).
Without one, the filter options pick the runs (``--workflow``, ``--status``,
``--version``, ``--owner``, ``--since``, ``--until``, ``--tag``, ``--queue``): the
command prints how many match and acts only with ``--yes`` (without it, it exits 2
having changed nothing), with a progress bar while it works through them, at most
``--rate`` runs a second (200 by default; the runs it retries or resumes go to work at
that pace beside the live ones).
"""

from __future__ import annotations

from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from plait.cli.actions import act_on_one
from plait.cli.app import (
    FILTER_TAG_HELP,
    DatabaseOption,
    JsonOption,
    console,
    emit_json,
    fail,
    make_engine,
    parse_tags,
    parse_time,
    run_async,
    runs_cli,
)
from plait.engine.bulk import DEFAULT_RATE, BulkAction, checked_rate

_ID_HELP = (
    "One run to act on (its id, or a unique prefix or suffix); leave it out to act on "
    "every run the filter options match."
)
#: a bar is shown for this many runs or more
_BAR_FROM = 200


def _bulk(
    action: BulkAction,
    run_id: str | None,
    filters: dict[str, Any],
    yes: bool,
    as_json: bool,
    database: str | None,
    rate: float,
    reason: str | None = None,
) -> None:
    given = {k: v for k, v in filters.items() if v is not None}
    if run_id is not None:
        if given:
            fail(f"give a RUN_ID or filter options, not both ({', '.join(sorted(given))})")
        act_on_one(action, run_id, database, as_json, reason)
        return
    if not given:
        fail(f"name the runs to {action}: a RUN_ID, or filter options (see --help)")
    try:
        checked_rate(rate)
    except ValueError:
        fail(f"invalid --rate: {rate!r} (runs per second, a number above 0)")

    async def go() -> None:
        # a bad tag or time is a usage error, which run_async reports in one line
        given["tags"] = parse_tags(filters.get("tags"))
        for bound in ("since", "until"):
            given[bound] = parse_time(filters.get(bound), f"--{bound}")
        async with make_engine(None, database) as engine:
            try:
                matched = await engine.match_runs(action, **given)
            except ValueError as exc:
                fail(str(exc))
                return
            if not yes:
                if as_json:
                    emit_json({"action": action, "matched": len(matched), "acted": 0})
                else:
                    console.print(
                        f"{len(matched)} runs match; nothing done: add --yes to {action} them"
                    )
                raise typer.Exit(2)
            show_bar = not as_json and len(matched) >= _BAR_FROM and console.is_terminal
            options: dict[str, Any] = {**given, "rate": rate}
            if reason is not None:
                options["reason"] = reason
            if show_bar:
                with Progress(
                    TextColumn(f"{action}"), BarColumn(), MofNCompleteColumn(), console=console
                ) as bar:
                    task = bar.add_task(action, total=len(matched))
                    acted = await engine.act_on_runs(
                        action,
                        progress=lambda done, _total: bar.update(task, completed=done),
                        **options,
                    )
            else:
                acted = await engine.act_on_runs(action, **options)
        if as_json:
            emit_json({"action": action, "matched": len(matched), "acted": acted})
        else:
            console.print(f"{len(matched)} runs matched; {action}: {acted}")

    run_async(go)


def _filters(**given: Any) -> dict[str, Any]:
    return given


WorkflowOpt = typer.Option(None, "--workflow", help="Runs of this workflow.")
StatusOpt = typer.Option(None, "--status", help="Runs in this status.")
VersionOpt = typer.Option(None, "--version", help="Runs of this workflow version.")
OwnerOpt = typer.Option(None, "--owner", help="Runs of this owner.")
SinceOpt = typer.Option(None, "--since", help="Runs created at or after (ISO 8601).")
UntilOpt = typer.Option(None, "--until", help="Runs created before (ISO 8601).")
TagOpt = typer.Option(None, "--tag", help=FILTER_TAG_HELP)
QueueOpt = typer.Option(None, "--queue", help="Runs of this queue.")
YesOpt = typer.Option(False, "--yes", help="Act on the runs that match (else: only count).")
RateOpt = typer.Option(
    DEFAULT_RATE,
    "--rate",
    help="Runs acted on per second at most: what they do next is paced beside live work.",
)


@runs_cli.command("cancel")
def runs_cancel(
    run_id: str | None = typer.Argument(None, help=_ID_HELP),
    workflow: str | None = WorkflowOpt,
    status: str | None = StatusOpt,
    version: str | None = VersionOpt,
    owner: str | None = OwnerOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    tag: list[str] | None = TagOpt,
    queue: str | None = QueueOpt,
    reason: str | None = typer.Option(None, "--reason", help="Stored as each run's error."),
    yes: bool = YesOpt,
    rate: float = RateOpt,
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Cancel a run, or every live run the filter options match (with --yes)."""
    filters = _filters(
        workflow=workflow,
        status=status,
        version=version,
        owner=owner,
        since=since,
        until=until,
        tags=tag,
        queue=queue,
    )
    _bulk("cancel", run_id, filters, yes, as_json, database, rate, reason)


@runs_cli.command("retry")
def runs_retry(
    run_id: str | None = typer.Argument(None, help=_ID_HELP),
    workflow: str | None = WorkflowOpt,
    status: str | None = StatusOpt,
    version: str | None = VersionOpt,
    owner: str | None = OwnerOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    tag: list[str] | None = TagOpt,
    queue: str | None = QueueOpt,
    yes: bool = YesOpt,
    rate: float = RateOpt,
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Retry a run, or every failed or needs_attention run the filter options match (with
    --yes)."""
    filters = _filters(
        workflow=workflow,
        status=status,
        version=version,
        owner=owner,
        since=since,
        until=until,
        tags=tag,
        queue=queue,
    )
    _bulk("retry", run_id, filters, yes, as_json, database, rate)


@runs_cli.command("resume")
def runs_resume(
    run_id: str | None = typer.Argument(None, help=_ID_HELP),
    workflow: str | None = WorkflowOpt,
    status: str | None = StatusOpt,
    version: str | None = VersionOpt,
    owner: str | None = OwnerOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    tag: list[str] | None = TagOpt,
    queue: str | None = QueueOpt,
    yes: bool = YesOpt,
    rate: float = RateOpt,
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Resume a run, or every suspended run the filter options match (with --yes)."""
    filters = _filters(
        workflow=workflow,
        status=status,
        version=version,
        owner=owner,
        since=since,
        until=until,
        tags=tag,
        queue=queue,
    )
    _bulk("resume", run_id, filters, yes, as_json, database, rate)
