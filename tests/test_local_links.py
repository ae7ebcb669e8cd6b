"""A folder inside the root swapped with a link to outside never leaks outside bytes.

A swapper thread exchanges (``renameat2(RENAME_EXCHANGE)``) a real folder inside the
root with a link to a folder outside it, while reads go through a key that is itself a
link (an alias) into that folder. No read may return the outside bytes and no raw
``OSError`` may leave the store: typed errors only. Listings never name an outside
file, and prunes never remove an outside folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import multiprocessing
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from asyncshard.backends import LocalStore
from asyncshard.backends.local.writes import FileWriter
from asyncshard.errors import AsyncShardError, StoreBackendError
from asyncshard.ranges import Range

T = TypeVar("T")

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


def _swapper(root: Path, stop: Any, swaps: Any = None) -> None:
    while not stop.is_set():
        _exchange(root / "dir", root / "swap")
        if swaps is not None:
            swaps.value += 1


@contextlib.contextmanager
def _swapping(root: Path) -> Iterator[Any]:
    """A process swapping ``root/dir`` and ``root/swap`` until the block ends, started
    before the block runs; yields its count of swaps."""
    ctx = multiprocessing.get_context("spawn")  # not fork: the test process has threads
    stop, swaps = ctx.Event(), ctx.Value("q", 0, lock=False)
    process = ctx.Process(target=_swapper, args=(root, stop, swaps))
    process.start()
    try:
        for _ in range(6000):  # a spawned interpreter starts within seconds, even loaded
            if swaps.value or not process.is_alive():
                break
            time.sleep(0.01)
        assert swaps.value, "the swapper never started"
        yield swaps
    finally:
        stop.set()
        process.join()
    assert process.exitcode == 0, "the swapper failed"


async def _attempt(op: Callable[[], Awaitable[T]], raw: list[str]) -> T | None:
    """``op()``'s result; ``None`` after a typed error (expected while a folder is
    swapped) or a raw ``OSError``, recorded in ``raw``."""
    try:
        return await op()
    except AsyncShardError:
        return None
    except OSError as exc:
        raw.append(repr(exc))
        return None


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
                await _attempt(op, raw)
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


#: Rounds of the listing and prune races (each lists or prunes several times).
ROUNDS = 400


async def test_listings_never_name_outside_files(swapped: tuple[Path, Path]) -> None:
    """Listings walk the folders they list through descriptors, never through a path a
    swapped link leads elsewhere: no outside name is listed, whatever the timing."""
    root, outside = swapped
    (outside / "dir" / "outside-file").write_bytes(b"")
    (outside / "dir" / "outside-folder").mkdir()
    (outside / "dir" / "outside-folder" / "g").write_bytes(b"")
    (root / "dir" / "sub").mkdir()
    (root / "dir" / "sub" / "g").write_bytes(b"")
    store = LocalStore(root)
    seen: set[str] = set()
    leaks: list[str] = []
    raw: list[str] = []
    with _swapping(root) as swaps:
        for _ in range(ROUNDS):
            for listing in (
                lambda: _keys(store.list_prefix("")),
                lambda: _keys(store.list_prefix("dir/")),
                lambda: _entries(store, ""),
                lambda: _entries(store, "dir"),
                lambda: _entries(store, "dir/outside-folder"),
            ):
                found = await _attempt(listing, raw)
                if found is None:
                    continue
                seen.update(found)
                leaks += [name for name in found if "outside" in name]
    assert swaps.value > 0
    assert not leaks, f"{len(leaks)} outside names listed: {sorted(set(leaks))}"
    assert not raw, f"{len(raw)} raw OSErrors escaped: {raw[:3]}"
    assert "dir/f" in seen or "swap/f" in seen  # the inside files were listed


async def _keys(keys: AsyncIterator[str]) -> list[str]:
    return [key async for key in keys]


async def _entries(store: LocalStore, prefix: str) -> list[str]:
    """The keys and sub-prefixes ``list_dir`` answers."""
    keys, prefixes = await store.list_dir(prefix)
    return keys + prefixes


async def test_prunes_never_remove_outside_folders(swapped: tuple[Path, Path]) -> None:
    """Prunes (``prune``, and the pruning after deletes) remove folders through
    descriptors: an outside folder, empty, is never removed, whatever the timing."""
    root, outside = swapped
    empty = [outside / "dir" / "e", outside / "dir" / "p" / "q"]
    store = LocalStore(root)
    removed = 0
    raw: list[str] = []
    with _swapping(root):
        for _ in range(ROUNDS):
            for folder in empty:
                folder.mkdir(parents=True, exist_ok=True)
            for op in (
                lambda: store.set("dir/e/k", b""),
                lambda: store.erase_values(["dir/e/k"]),  # prunes dir/e once emptied
                lambda: store.set("dir/p/q/k", b""),
                lambda: store.erase_values(["dir/p/q/k"]),
                lambda: store.prune("dir/"),
                lambda: store.prune(""),
            ):
                await _attempt(op, raw)
            removed += sum(not folder.is_dir() for folder in empty)
    assert removed == 0, f"prunes removed an outside folder {removed} times"
    assert not raw, f"{len(raw)} raw OSErrors escaped: {raw[:3]}"
    assert (outside / "dir" / "f").read_bytes() == b"OUTSIDE"


async def test_a_failed_write_removes_no_outside_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed write removes the folders it created through descriptors: one swapped
    for a link to outside before the undo leads nowhere, the outside folder stays."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "new" / "sub").mkdir(parents=True)
    store = LocalStore(root)
    await store.set("keep", b"")

    def swap_then_fail(self: FileWriter, fd: int, data: object, **_: object) -> None:
        os.close(fd)
        (root / "new").rename(root / "moved")
        (root / "new").symlink_to(outside / "new")
        raise OSError(errno.EIO, "simulated failure")

    monkeypatch.setattr(FileWriter, "_write_data", swap_then_fail)
    with pytest.raises(StoreBackendError, match="simulated failure"):
        await store.set("new/sub/k", b"x")
    assert (outside / "new" / "sub").is_dir(), "the undo removed an outside folder"
