"""Counting how often each step body really ran: the witness that replay did not run a
body again."""

from __future__ import annotations

from typing import Any


class Counter:
    """Counts how many times each function body actually ran."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.calls: list[tuple[str, Any]] = []

    def hit(self, name: str, info: Any = None) -> int:
        self.counts[name] = self.counts.get(name, 0) + 1
        self.calls.append((name, info))
        return self.counts[name]

    def __getitem__(self, name: str) -> int:
        return self.counts.get(name, 0)
