"""Acting on one run: ``plait cancel``, ``resume``, ``retry``, ``send-event`` and
``request``."""

from __future__ import annotations

import json

import typer

from plait import ids, queues, request
from plait.cli.app import (
    RUN_ID_HELP,
    DatabaseOption,
    JsonOption,
    UsageError,
    cli,
    console,
    emit_json,
    fail,
    find_run_id,
    make_engine,
    parse_json,
    run_async,
    status_markup,
)
from plait.cli.terminal import esc


def act_on_one(
    action: str,
    run_id: str,
    database: str | None,
    as_json: bool,
    reason: str | None = None,
) -> None:
    async def go() -> None:
        nonlocal run_id  # the whole id of what was given
        async with make_engine(None, database) as engine:
            run_id = await find_run_id(engine, run_id)
            if action == "cancel":
                run = await engine.cancel(run_id, reason)
            elif action == "resume":
                run = await engine.resume(run_id)
            else:
                run = await engine.retry(run_id)
        if as_json:
            emit_json({"run": run.to_dict()})
        else:
            console.print(f"run {esc(run.id)} {status_markup(run.status)}", highlight=False)

    run_async(go)


@cli.command()
def cancel(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    reason: str | None = typer.Option(None, "--reason", help="Stored as the run's error."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Cancel a run and its child runs."""
    act_on_one("cancel", run_id, database, as_json, reason)


@cli.command()
def resume(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Resume a suspended run (workers continue it)."""
    act_on_one("resume", run_id, database, as_json)


@cli.command()
def retry(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Retry a failed run from the failed step (workers continue it)."""
    act_on_one("retry", run_id, database, as_json)


@cli.command("send-event")
def send_event(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    name: str = typer.Argument(..., help="The event's name (wf.wait_for_event(name))."),
    data: str | None = typer.Option(None, "--data", help="The event's payload as JSON."),
    dedup: str | None = typer.Option(
        None,
        "--dedup",
        help="A de-duplication key (1-512 characters): the run takes one event of each key, "
        "so sending again with it changes nothing.",
    ),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Send an event to a run (for its wf.wait_for_event(NAME)).

    A run that is not waiting for it yet gets it when it does."""

    async def go() -> None:
        nonlocal run_id  # the whole id of what was given
        payload = parse_json(data, "--data")
        if dedup is not None:
            try:
                ids.check_event_dedup(queues.check_text(dedup, "dedup"))
            except ValueError as exc:
                raise UsageError(f"--dedup: {exc}") from None
        async with make_engine(None, database) as engine:
            run_id = await find_run_id(engine, run_id)
            waiting = await engine.send_event(run_id, name, payload, dedup=dedup)
        if as_json:
            emit_json({"run_id": run_id, "event": name, "waiting": waiting})
        elif waiting:
            console.print(f"event {esc(repr(name))} delivered to run {esc(run_id)}")
        elif dedup is not None:
            console.print(
                f"event {esc(repr(name))} not delivered now to run {esc(run_id)}: it is held "
                "until the run waits for it, or the run took an event of key "
                f"{esc(repr(dedup))} already (then nothing changed)"
            )
        else:
            console.print(
                f"event {esc(repr(name))} held for run {esc(run_id)}: it is not waiting for "
                "it now (it gets it when it does)"
            )

    run_async(go)


@cli.command("request")
def send_request(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    name: str = typer.Argument(..., help="The request's name (wf.wait_for_request(name))."),
    data: str | None = typer.Option(None, "--data", help="The request's data as JSON."),
    timeout: float = typer.Option(
        request.DEFAULT_TIMEOUT,
        "--timeout",
        help=f"Seconds to wait for the answer (at most {request.MAX_TIMEOUT:g}).",
    ),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Send a request to a run and print the workflow's reply as JSON.

    Exits 1 when the workflow refuses it (with its reason), when its data does not fit
    the wait's schema, or when no answer comes within --timeout (a request not taken by
    then is withdrawn)."""

    async def go() -> None:
        nonlocal run_id  # the whole id of what was given
        value = parse_json(data, "--data")
        async with make_engine(None, database) as engine:
            run_id = await find_run_id(engine, run_id)
            try:
                reply = await engine.request(run_id, name, value, timeout=timeout)
            except TimeoutError as exc:
                fail(str(exc), 1)
                return
        if as_json:
            emit_json({"run_id": run_id, "request": name, "reply": reply})
        else:
            print(json.dumps(reply))

    run_async(go)
