"""A worker's heartbeat carries plait's version, read from the package metadata once."""

from __future__ import annotations

import pytest

from plait.worker import registry


def test_plait_version_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []

    def version(name: str) -> str:
        reads.append(name)
        return "9.9.9"

    registry.plait_version.cache_clear()
    monkeypatch.setattr(registry.metadata, "version", version)
    try:
        assert [registry.plait_version() for _ in range(3)] == ["9.9.9"] * 3
        assert reads == ["plait"]
    finally:
        registry.plait_version.cache_clear()
