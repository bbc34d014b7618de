"""Run data made safe for an operator's terminal.

Step names, results, error messages and tracebacks come from users' code and from whoever
may start runs or send events. Printed raw, an escape sequence in a result could recolour,
retitle or rewrite the operator's terminal, and a step name such as ``a[/b]`` would be read
by the console as markup (and crash it). Everything that did not come from plait itself
goes through ``clean`` (control characters shown as ``\\x1b``-style escapes) and, where
console markup applies, ``esc``.
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

#: C0 and C1 control characters (tab and newline kept) and the bidirectional overrides
#: that can make text read differently from what it is
_UNSAFE = {
    **{c: f"\\x{c:02x}" for c in range(0x20) if c not in (0x09, 0x0A)},
    0x7F: "\\x7f",
    **{c: f"\\x{c:02x}" for c in range(0x80, 0xA0)},
    **{c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}


def clean(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every control character shown, never sent to the terminal."""
    cleaned = text.translate(_UNSAFE)
    return cleaned if keep_newlines else cleaned.replace("\n", "\\n").replace("\t", " ")


def esc(value: Any, *, keep_newlines: bool = True) -> str:
    """Any value as text for a console that reads markup: cleaned and markup-escaped."""
    text = value if isinstance(value, str) else str(value)
    return escape(clean(text, keep_newlines=keep_newlines))


def one_line(message: str) -> str:
    """A message (an exception's, a user's) as one line of a terminal."""
    lines = [part.strip() for part in clean(message).splitlines() if part.strip()]
    return "; ".join(lines) if lines else message.strip()


def pretty(value: Any) -> str:
    """A stored JSON value as people read it: indented, in full; strings as they are."""
    if isinstance(value, str):
        return clean(value)
    return clean(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def compact(value: Any) -> str:
    """A stored JSON value on one line (strings as they are)."""
    if isinstance(value, str):
        return clean(value, keep_newlines=False)
    return clean(json.dumps(value, ensure_ascii=False, default=str), keep_newlines=False)
