"""``plait worker --metrics-port``: the worker's metrics at ``/metrics``, served on its own
event loop (a scrape reads the queue depths from the database, which is async)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from plait.engine import Engine
from plait.metrics import CONTENT_TYPE

log = logging.getLogger("plait.worker")
_READ_LIMIT = 16 * 1024


async def serve_metrics(engine: Engine, host: str, port: int) -> asyncio.Server:
    """Answer ``GET /metrics`` with ``engine``'s metrics, anything else with 404."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            request = head[:_READ_LIMIT].split(b"\r\n", 1)[0].decode("latin-1").split()
            if (
                len(request) >= 2
                and request[0] == "GET"
                and request[1].split("?")[0] == ("/metrics")
            ):
                body = await engine.metrics_text() or b""
                status, kind = "200 OK", CONTENT_TYPE
            else:
                body, status, kind = b"not found\n", "404 Not Found", "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
                + body
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except Exception:
            log.exception("answering a metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    server = await asyncio.start_server(answer, host, port, limit=_READ_LIMIT)
    log.info("metrics at http://%s:%d/metrics", host, port)
    return server


__all__ = ["serve_metrics"]
