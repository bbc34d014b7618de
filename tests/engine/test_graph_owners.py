"""A graph name registered by trusted code (no user) belongs to trusted code: no user can
take it over, and trusted code still may register more versions of it."""

from __future__ import annotations

import pytest

import plait

DEFINITION = {"nodes": {"only": {"function": "add", "input": {"a": 1, "b": 2}}}}

app = plait.App("owners")


@app.function
async def add(data: dict) -> int:
    return int(data["a"]) + int(data["b"])


async def test_graphs_registered_by_trusted_code_belong_to_it(database: str) -> None:
    async with plait.Engine(app, database) as engine:
        await engine.register_graph("legacy", DEFINITION)
        (legacy,) = await engine.list_graphs()
        assert (legacy["workflow"], legacy["registered_by"]) == ("legacy", None)
        with pytest.raises(plait.GraphOwnerError, match="another user"):
            await engine.register_graph("legacy", DEFINITION, registered_by="mallory")
        assert await engine.run("legacy", timeout=10) == 3
        # trusted code still may
        await engine.register_graph("legacy", DEFINITION, status="draft")
