"""A folder inside the root swapped with a link to outside never leaks outside bytes.

A swapper thread exchanges (``renameat2(RENAME_EXCHANGE)``) a real folder inside the
root with a link to a folder outside it, while reads go through a key that is itself a
link (an alias) into that folder. No read may return the outside bytes and no raw
``OSError`` may leave the store: typed errors only.
"""

from __future__ import annotations

import asyncio
import ctypes
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from asyncshard.backends import LocalStore
from asyncshard.errors import AsyncShardError
from asyncshard.ranges import Range

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


def _exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
        raise OSError(ctypes.get_errno(), "renameat2")


@pytest.fixture
def swapped(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "f").write_bytes(b"inside!")
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "f").write_bytes(b"OUTSIDE")
    for folder in (root, outside):  # never empty: a delete does not prune it
        (folder / "dir" / "keep").write_bytes(b"")
    (root / "swap").symlink_to(outside / "dir")
    (root / "alias").symlink_to("dir/f")
    try:
        _exchange(root / "dir", root / "swap")
        _exchange(root / "dir", root / "swap")
    except (OSError, AttributeError) as exc:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available: {exc}")
    return root, outside


def _swapper(root: Path, stop: Any) -> None:
    while not stop.is_set():
        _exchange(root / "dir", root / "swap")


@pytest.mark.parametrize("swapper", ["thread", "process"])
async def test_swapped_folder_never_leaks_outside_bytes(
    swapped: tuple[Path, Path], swapper: str
) -> None:
    root, _ = swapped
    store = LocalStore(root)
    ctx = multiprocessing.get_context("spawn")  # not fork: the test process has threads
    stop: Any = threading.Event() if swapper == "thread" else ctx.Event()
    thread: Any = (threading.Thread if swapper == "thread" else ctx.Process)(
        target=_swapper, args=(root, stop)
    )
    thread.start()
    leaked, raw, reads = 0, [], 0
    deadline = time.monotonic() + 3.0
    try:
        while time.monotonic() < deadline:
            for key in ("alias", "dir/f"):
                ops = (
                    store.get,
                    lambda k: store.get(k, Range(0, 3)),  # partial: its descriptor is kept
                    store.head,
                    lambda k: store.set(k, b"written"),
                )
                for op in ops:
                    reads += 1
                    try:
                        got = await op(key)
                    except AsyncShardError:
                        continue
                    except OSError as exc:
                        raw.append(repr(exc))
                        continue
                    if got in (b"OUTSIDE", b"OUT"):
                        leaked += 1
            await asyncio.sleep(0)
    finally:
        stop.set()
        thread.join()
    outside = (swapped[1] / "dir" / "f").read_bytes()
    assert outside == b"OUTSIDE", "a write went outside the root"
    assert leaked == 0, f"{leaked} of {reads} reads returned bytes from outside the root"
    assert not raw, f"{len(raw)} raw OSErrors escaped: {raw[:3]}"


async def test_deletes_and_copies_stay_inside_a_swapped_folder(swapped: tuple[Path, Path]) -> None:
    """Deletes remove, and copies read and create, only what lies inside the root."""
    root, outside = swapped
    store = LocalStore(root)
    ctx = multiprocessing.get_context("spawn")  # not fork: the test process has threads
    stop = ctx.Event()
    thread = ctx.Process(target=_swapper, args=(root, stop))  # no GIL between the two
    thread.start()
    raw: list[str] = []
    ops = 0
    deadline = time.monotonic() + 3.0
    try:
        while time.monotonic() < deadline:
            for op in (
                lambda: store.copy("dir/f", "copied"),  # reads through the swapped folder
                lambda: store.copy("copied", "dir/g"),  # creates in it
                lambda: store.copy_many([("dir/f", "copied"), ("copied", "dir/g")]),
                lambda: store.erase_values(["dir/g"]),  # deletes in it
                lambda: store.erase_values(["dir/f"]),
                lambda: store.set("dir/f", b"inside!"),
            ):
                ops += 1
                try:
                    await op()
                except AsyncShardError:
                    continue
                except OSError as exc:
                    raw.append(repr(exc))
            await asyncio.sleep(0)
    finally:
        stop.set()
        thread.join()
    real_outside = outside / "dir"
    assert (real_outside / "f").read_bytes() == b"OUTSIDE", "a delete or write went outside"
    assert not (real_outside / "g").exists(), "a copy created a file outside the root"
    copied = root / "copied"
    assert not copied.exists() or copied.read_bytes() != b"OUTSIDE", "outside bytes copied in"
    assert not raw, f"{len(raw)} raw OSErrors escaped of {ops}: {raw[:3]}"
