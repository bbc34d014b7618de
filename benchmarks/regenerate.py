"""Put the figures of one ``make bench`` run into docs/benchmarks.md.

    python benchmarks/regenerate.py docs/benchmarks.md build/bench

The page marks each generated part with a pair of comments::

    <!-- bench:latency -->
    ...replaced on every run...
    <!-- /bench:latency -->

and each part of ``make bench`` leaves its figures in the folder as ``NAME.md`` (Markdown,
put in as it is) or ``NAME.txt`` (printed columns, put in a text block). Every region with
a file gets the file, under a line naming the commit and the time of the run; a region
without one keeps what it had, and is listed as not measured in this run, so a part
skipped on a machine without its tools (valgrind for the instruction counts) leaves the
last figures in place and says so. The prose around the regions is the page's own.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

#: a region's start and end marks; NAME is letters, digits, ``-`` and ``_``
_OPEN = re.compile(r"^<!-- bench:([A-Za-z0-9_-]+) -->$")
_CLOSE = re.compile(r"^<!-- /bench:([A-Za-z0-9_-]+) -->$")


class RegionError(ValueError):
    """The page's marks do not pair up: a region opened twice, never closed, or closed
    without being opened."""


def fragment(folder: Path, name: str) -> str | None:
    """What the run left for region ``name``, as Markdown; None if it left nothing."""
    md, txt = folder / f"{name}.md", folder / f"{name}.txt"
    if md.is_file():
        return md.read_text().strip("\n")
    if txt.is_file():
        return "```text\n" + txt.read_text().strip("\n") + "\n```"
    return None


def regenerate(page: str, folder: Path, stamp: str) -> tuple[str, list[str], list[str]]:
    """The page with every region that has a fragment in ``folder`` replaced; also the
    names of the regions filled and of those left as they were."""
    out: list[str] = []
    filled: list[str] = []
    kept: list[str] = []
    inside: str | None = None
    opened_at = 0
    for number, line in enumerate(page.split("\n"), start=1):
        opening, closing = _OPEN.match(line), _CLOSE.match(line)
        if opening:
            if inside is not None:
                raise RegionError(
                    f"line {number}: region {opening[1]!r} opens inside region {inside!r}"
                    f" (opened on line {opened_at})"
                )
            inside, opened_at = opening[1], number
            if inside in filled or inside in kept:
                raise RegionError(f"line {number}: region {inside!r} appears twice")
            out.append(line)
            got = fragment(folder, inside)
            if got is None:
                kept.append(inside)
            else:
                filled.append(inside)
                out += ["", f"_{stamp}_", "", got, ""]
            continue
        if closing:
            if closing[1] != inside:
                raise RegionError(
                    f"line {number}: region {closing[1]!r} closes but "
                    + ("none is open" if inside is None else f"{inside!r} is open")
                )
            inside = None
            out.append(line)
            continue
        if inside is None or inside in kept:
            out.append(line)
    if inside is not None:
        raise RegionError(f"region {inside!r} (line {opened_at}) is never closed")
    return "\n".join(out), filled, kept


def _stamp() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"measured at commit {commit}, {when}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="the page to regenerate (docs/benchmarks.md)")
    parser.add_argument("folder", type=Path, help="where the run left its figures")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"no folder {args.folder} (run the benchmarks first)")
    try:
        text, filled, kept = regenerate(args.page.read_text(), args.folder, _stamp())
    except RegionError as exc:
        print(f"{args.page}: {exc}", file=sys.stderr)
        return 2
    args.page.write_text(text)
    known = set(filled) | set(kept)
    unused = sorted(
        p.stem for p in args.folder.iterdir() if p.suffix in (".md", ".txt") and p.stem not in known
    )
    print(f"{args.page}: regenerated {', '.join(filled) or 'nothing'}")
    if kept:
        print(f"  not measured in this run, left as they were: {', '.join(kept)}")
    if unused:
        print(f"  figures with no region on the page: {', '.join(unused)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
