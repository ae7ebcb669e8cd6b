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
    ctx = multiprocessing.get_context("fork")
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
                for op in (store.get, store.head, lambda k: store.set(k, b"written")):
                    reads += 1
                    try:
                        got = await op(key)
                    except AsyncShardError:
                        continue
                    except OSError as exc:
                        raw.append(repr(exc))
                        continue
                    if got == b"OUTSIDE":
                        leaked += 1
            await asyncio.sleep(0)
    finally:
        stop.set()
        thread.join()
    outside = (swapped[1] / "dir" / "f").read_bytes()
    assert outside == b"OUTSIDE", "a write went outside the root"
    assert leaked == 0, f"{leaked} of {reads} reads returned bytes from outside the root"
    assert not raw, f"{len(raw)} raw OSErrors escaped: {raw[:3]}"
