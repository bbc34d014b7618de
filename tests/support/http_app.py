"""The App the HTTP hardening tests serve, in process and as ``plait serve
support.http_app:app`` (hence a module of its own)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import plait

app = plait.App("http-hardening")


@app.function
async def echo_step(data: Any) -> Any:
    return data


@app.function
def make_text(data: dict) -> str:
    return "x" * int(data["size"])


@app.function
def make_nested(data: dict) -> Any:
    value: Any = 0
    for _ in range(int(data["depth"])):
        value = [value]
    return value


@app.function
async def add(data: dict) -> int:
    return int(data["a"]) + int(data["b"])


@app.function
def measure(data: Any) -> int:
    """How many characters of JSON ``data`` takes: a small result for any input."""
    return len(json.dumps(data))


@app.workflow
async def echo(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("echo", echo_step, data)


@app.workflow
async def waiter(wf: plait.Workflow, data: Any) -> Any:
    return await wf.wait_for_event("go")


@app.workflow
async def big_result(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("make", make_text, data)


@app.workflow
async def deep_result(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("make", make_nested, data)


@app.workflow
async def two_gathers(wf: plait.Workflow, data: Any) -> Any:
    """Two rows of ``n`` parallel steps, one after the other."""
    n = int(data["n"])
    first = await asyncio.gather(*(wf.do(f"a{i}", add, {"a": i, "b": 0}) for i in range(n)))
    second = await asyncio.gather(*(wf.do(f"b{i}", add, {"a": i, "b": 1}) for i in range(n)))
    return sum(first) + sum(second)


app.graph(
    "app_graph",
    {"nodes": {"only": {"function": "add", "input": {"a": 1, "b": 2}}}},
)
