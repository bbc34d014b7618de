"""``plait serve``: the JSON API and the dashboard (``plait.http``), checked first."""

from __future__ import annotations

import typer

from plait.cli.app import (
    DEBUG,
    DatabaseOption,
    UsageError,
    check_database,
    cli,
    fail,
    installed,
    load_app,
    parse_size,
    run_async,
)
from plait.errors import PlaitError
from plait.store import resolve_url


@cli.command()
def serve(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port", min=1, max=65535),
    no_auth: bool = typer.Option(False, "--no-auth", help="Serve without tokens (local use)."),
    max_body: str = typer.Option(
        "1MiB", "--max-body", help="Largest request body (and stored value), e.g. 512KiB."
    ),
    max_streams: int = typer.Option(
        100, "--max-streams", min=1, help="Event streams open at once (a quarter per user)."
    ),
    max_streams_per_user: int | None = typer.Option(
        None, "--max-streams-per-user", min=1, help="Event streams one user may hold open."
    ),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="A host name clients use to reach this server (behind a proxy); repeatable.",
    ),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning, error."),
    metrics: bool | None = typer.Option(
        None,
        "--metrics/--no-metrics",
        help="Prometheus metrics at /metrics (default: on when prometheus-client is installed).",
    ),
    tracing: bool = typer.Option(
        False, "--tracing", help="OpenTelemetry spans for passes and attempts (extra 'otel')."
    ),
    database: str | None = DatabaseOption,
) -> None:
    """Serve the JSON API and the dashboard. Tokens come from PLAIT_TOKENS
    ("user:token" or "user:token:scope+scope", comma-separated)."""
    try:
        from plait.http import serve as serve_http
    except ImportError as exc:
        if DEBUG["on"]:
            raise
        fail(str(exc) if "pip install" in str(exc) else f"plait.http cannot be imported: {exc}")
        return

    async def check() -> None:
        # imported inside a running loop, as every command does: a module that runs
        # asyncio.run(...) at import is refused instead of running its whole program
        load_app(app_ref)
        check_database(resolve_url(database), create=True)

    run_async(check)
    try:
        size = parse_size(max_body, "--max-body")
        if log_level.lower() not in ("critical", "error", "warning", "info", "debug", "trace"):
            raise UsageError(
                f"--log-level must be debug, info, warning or error, not {log_level!r}"
            )
    except UsageError as exc:
        fail(str(exc))
        return
    if metrics is None:
        metrics = installed("prometheus_client")
    elif metrics and not installed("prometheus_client"):
        fail("--metrics needs the 'metrics' extra: pip install 'plait[metrics]'")
    if tracing and not installed("opentelemetry"):
        fail("--tracing needs the 'otel' extra: pip install 'plait[otel]'")
    try:
        serve_http(
            app_ref,
            host=host,
            port=port,
            database=database,
            no_auth=no_auth,
            log_level=log_level.lower(),
            max_body=size,
            max_streams=max_streams,
            max_streams_per_user=max_streams_per_user,
            allowed_hosts=allowed_host,
            metrics=metrics,
            tracing=tracing,
        )
    except (PlaitError, ValueError, TypeError) as exc:
        # a bad database URL or PLAIT_TOKENS entry: one line (its messages hide secrets)
        fail(str(exc), 1)
