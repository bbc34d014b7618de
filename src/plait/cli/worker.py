"""``plait worker``: work the queues of a database until SIGTERM or SIGINT."""

from __future__ import annotations

import gc
import logging

import typer

from plait.cli.app import (
    DatabaseOption,
    UsageError,
    check_database,
    cli,
    fail,
    installed,
    load_app,
    parse_size,
    positive_duration,
    run_async,
)
from plait.engine import DEFAULT_CONCURRENCY, Engine
from plait.engine.operations import worker_scope
from plait.logs import LOG_FORMATS
from plait.logs import configure as configure_logs
from plait.store import redact, resolve_url

#: seconds past --drain that a stopping worker waits for step bodies it cannot cancel
STOP_GRACE = 2.0


@cli.command()
def worker(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    concurrency: int = typer.Option(
        DEFAULT_CONCURRENCY, "--concurrency", "-c", min=1, help="Runs and steps at once."
    ),
    lease: float = typer.Option(2.0, "--lease", min=0.1, help="Lease length in seconds."),
    worker_id: str | None = typer.Option(
        None, "--worker-id", help="Stable name: a restarted worker takes back its runs at once."
    ),
    drain: float = typer.Option(10.0, "--drain", min=0.0, help="Seconds to finish work on stop."),
    max_payload: str = typer.Option(
        "1MiB", "--max-payload", help="Largest step result or state value to store."
    ),
    retain: str | None = typer.Option(
        None,
        "--retain",
        help="Prune ended runs older than this (e.g. 30d) in the background.",
    ),
    log_format: str = typer.Option(
        "text",
        "--log-format",
        help="text, or json: one object per line with run_id, step and attempt.",
    ),
    metrics_port: int | None = typer.Option(
        None,
        "--metrics-port",
        min=1,
        max=65535,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics (extra 'metrics').",
    ),
    metrics_host: str = typer.Option("127.0.0.1", "--metrics-host", help="Address to bind."),
    tracing: bool = typer.Option(
        False, "--tracing", help="OpenTelemetry spans for passes and attempts (extra 'otel')."
    ),
    queues: str | None = typer.Option(
        None,
        "--queues",
        help="Work only these queues, comma-separated ('default': runs started on none).",
    ),
    workflows: str | None = typer.Option(
        None, "--workflows", help="Work only these workflows, comma-separated."
    ),
    database: str | None = DatabaseOption,
) -> None:
    """Work the queues of a database until SIGTERM or SIGINT."""
    retain_seconds = positive_duration(retain, "--retain") if retain is not None else None
    if log_format not in LOG_FORMATS:
        fail(f"invalid --log-format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
    if metrics_port is not None and not installed("prometheus_client"):
        fail("--metrics-port needs the 'metrics' extra: pip install 'plait[metrics]'")
    if tracing and not installed("opentelemetry"):
        fail("--tracing needs the 'otel' extra: pip install 'plait[otel]'")
    configure_logs(log_format)
    only_queues = _names(queues, "--queues")
    only_workflows = _names(workflows, "--workflows")

    async def go() -> None:
        app = load_app(app_ref)
        url = resolve_url(database)
        check_database(url, create=True)
        try:
            scoped_workflows, scoped_queues = worker_scope(app, only_workflows, only_queues)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        engine = Engine(
            app,
            url,
            workers=True,
            concurrency=concurrency,
            lease_seconds=lease,
            worker_id=worker_id,
            max_payload=parse_size(max_payload, "--max-payload"),
            retain=retain_seconds,
            tracing=tracing,
            metrics=metrics_port is not None,
            log_work=True,
            worker_workflows=scoped_workflows,
            worker_queues=scoped_queues,
        )
        server = None
        if metrics_port is not None:
            from plait.cli.metrics_server import serve_metrics

            try:
                server = await serve_metrics(engine, metrics_host, metrics_port)
            except OSError as exc:
                raise UsageError(
                    f"cannot serve metrics on --metrics-port {metrics_port}: {exc.strerror}"
                ) from None
        await engine.open()
        _freeze_startup_heap()

        def working() -> None:
            logging.getLogger("plait.worker").info(
                "worker %s working %s (concurrency %d; workflows %s; queues %s)",
                engine.worker_id,
                redact(engine.url),
                concurrency,
                ", ".join(engine.worker.claim_scope().workflows or ()) or "none",
                ", ".join(only_queues) if only_queues is not None else "all",
            )

        async def close(seconds: float) -> None:
            await engine.close(drain=seconds)
            if server is not None:
                server.close()

        await engine.worker.run_until_signal(close, drain=drain, grace=STOP_GRACE, ready=working)

    run_async(go)


def _freeze_startup_heap() -> None:
    """Leave what the process built to start out of every later garbage collection.

    The modules, the app and the open engine are never garbage, yet each full collection
    walks all of them: 15-20 ms in which the worker's event loop stands still, the worst
    start-to-first-step latency of a worker at rest. Collected once here, before any work,
    and frozen, they are skipped from then on; what the work allocates is collected as
    before."""
    gc.collect()
    gc.freeze()


def _names(value: str | None, option: str) -> list[str] | None:
    """A comma-separated option as its names (None: not given)."""
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        fail(f"{option} names nothing: give one or more names, comma-separated")
    return names
