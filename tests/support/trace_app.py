"""The app the cross-process trace test runs in ``plait worker --tracing`` processes.

With ``TRACE_SPANS`` set, importing it installs the OpenTelemetry SDK with an exporter
that appends every finished span to that file as one JSON line (written and flushed at
once, so spans survive the SIGKILL that may follow). The queued step's first attempt
touches ``TRACE_FLAG`` and then hangs, so the test knows when to kill its worker.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path

import plait

if os.environ.get("TRACE_SPANS"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class FileExporter(SpanExporter):
        def __init__(self, path: str) -> None:
            self.path = path

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            with open(self.path, "a") as out:
                for span in spans:
                    line = {
                        "name": span.name,
                        "trace_id": span.context.trace_id,
                        "span_id": span.context.span_id,
                        "parent_id": span.parent.span_id if span.parent else None,
                        "attributes": dict(span.attributes or {}),
                        "status": span.status.status_code.name,
                        "pid": os.getpid(),
                    }
                    out.write(json.dumps(line) + "\n")
                out.flush()
                os.fsync(out.fileno())
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["TRACE_SPANS"])))
    trace.set_tracer_provider(provider)

app = plait.App("traced")


def _mark_started() -> None:
    """Leave this process's pid where the test looks, all at once: the test reads the
    file as soon as it exists, so it must never exist empty."""
    flag = Path(os.environ["TRACE_FLAG"])
    part = flag.with_name(f"{flag.name}.{os.getpid()}")
    part.write_text(str(os.getpid()))
    part.replace(flag)


@app.function(queued=True, retries=0)
async def pack(data: dict, ctx: plait.StepContext) -> str:
    if ctx.attempt == 1:
        _mark_started()
        await asyncio.Event().wait()  # hangs until its worker is killed
    return f"packed {data['item']} on attempt {ctx.attempt}"


@app.workflow
async def ship(wf: plait.Workflow, data: dict) -> str:
    return await wf.do("label", lambda: f"label {data['item']}")


@app.workflow
async def order(wf: plait.Workflow, data: dict) -> list[str]:
    checked = await wf.do("check", lambda: "in stock")
    packed = await wf.do("pack", pack, data)
    shipped = await wf.do("ship", "ship", data)
    return [checked, packed, shipped]
