"""The wake-up sockets of the processes of one SQLite file: what one publishes reaches
the others at once, a dead process's socket is cleared, and nothing depends on them."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from pathlib import Path

import pytest

import plait
from plait.notify import Notifier
from plait.store.sqlite import SQLiteStore
from plait.store.sqlite.wake import wake_folder
from support.polling import eventually


async def opened(path: Path, notifier: Notifier) -> SQLiteStore:
    # a watch of 30 s: only the sockets can tell it of the other's changes in time
    store = SQLiteStore(f"sqlite:///{path}", watch_interval=30)
    await store.open()
    await store.attach_notifier(notifier)
    return store


def sockets(path: Path) -> list[str]:
    return sorted(os.listdir(wake_folder(str(path))))


async def test_what_one_process_publishes_wakes_the_others(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    sender, receiver = Notifier(), Notifier()
    work = asyncio.Event()
    receiver.on_work(work.set)
    a = await opened(path, sender)
    b = await opened(path, receiver)
    try:
        assert len(sockets(path)) == 2  # one per process (store) with the file open
        changed = receiver.watch("r1")
        sender.publish_work()
        await asyncio.wait_for(work.wait(), 5)
        sender.run_changed("r1", settled=True)
        await asyncio.wait_for(changed.wait(), 5)
    finally:
        await a.close()
        await b.close()
    assert sockets(path) == []  # each removed its own socket when it closed


async def test_a_socket_its_process_left_is_removed_by_the_next_sender(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    folder = wake_folder(str(path))
    os.makedirs(folder)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(os.path.join(folder, "1-deadbeef.sock"))
    dead.close()  # the file stays, nobody reads it: as a process killed with SIGKILL
    notifier = Notifier()
    store = await opened(path, notifier)
    try:
        assert "1-deadbeef.sock" in sockets(path)
        notifier.publish_work()
        await eventually(lambda: "1-deadbeef.sock" not in sockets(path), timeout=5)
    finally:
        await store.close()


def test_a_folder_whose_socket_paths_would_be_too_long_is_under_the_temporary_folder() -> None:
    assert wake_folder("/data/plait.db") == "/data/plait.db-wake"
    deep = "/" + "d" * 120 + "/plait.db"
    folder = wake_folder(deep)
    assert folder.startswith(os.path.join(tempfile.gettempdir(), "plait-wake-"))
    assert wake_folder(deep) == folder  # the same file, the same folder, in every process


async def test_without_the_sockets_work_is_still_found_by_the_watch(tmp_path: Path) -> None:
    """A wake folder that cannot be made (a file holds its name): the engines fall back
    to watching the file, and another engine's run still completes."""
    path = tmp_path / "w.db"
    await asyncio.to_thread(Path(wake_folder(str(path))).write_text, "in the way")
    url = f"sqlite:///{path}"
    app = plait.App("nowake")

    @app.workflow
    async def hello(wf: plait.Workflow) -> str:
        return "hi"

    async with (
        plait.Engine(app, url, poll_interval=30) as worker,
        plait.Engine(app, url, workers=False) as starter,
    ):
        assert worker.notifier.remote is None  # no channel
        run_id = await starter.start(hello)
        assert (await starter.wait(run_id, timeout=10)).output == "hi"


def test_watch_interval_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid watch_interval: 0"):
        SQLiteStore(f"sqlite:///{tmp_path / 'w.db'}", watch_interval=0)
