"""Memory that does not grow with the dataset: listings and conversions.

Memory is measured with ``tracemalloc`` (Python allocations, numpy's included), as the
peak added by one call over what was allocated before it.
"""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncshard.backends import LocalStore
from asyncshard.convert import (
    pipeline,
    reshard_async,
    shard_store_async,
    spill,
    tasks,
    unshard_store_async,
)
from asyncshard.convert.layout import read_layout, retarget
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding
from asyncshard.formats.zarr3.shard import encode_shard
from asyncshard.walk import iter_keys
from tests.scale_store import SyntheticStore, array_doc, sink


async def peak_added(call: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
    """``call()``'s result and the peak of Python memory it added, in bytes."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        result = await call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - before


def _touch_many(folder: Path, n: int) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        os.close(os.open(folder / f"c.{i}.{i % 7}", os.O_CREAT | os.O_WRONLY, 0o644))


async def test_local_listing_streams(tmp_path: Path) -> None:
    """A listing of 20,000 keys holds a batch of keys, not the listing (1.7 MB)."""
    _touch_many(tmp_path / "a", 20_000)
    _touch_many(tmp_path / "b" / "c", 10)
    store = LocalStore(tmp_path)

    async def count() -> int:
        n = 0
        async for _ in store.list_prefix(""):
            n += 1
        return n

    n, added = await peak_added(count)
    assert n == 20_010
    assert added < 600_000, added


async def test_local_listing_stopped_early_closes_its_folders(tmp_path: Path) -> None:
    _touch_many(tmp_path / "a" / "b", 3_000)
    store = LocalStore(tmp_path)
    fds = len(os.listdir("/proc/self/fd"))
    first = []
    async for key in store.list_prefix("a/"):
        first.append(key)
        if len(first) == 10:
            break
    for _ in range(3):  # the abandoned listing is closed by the loop's finalizer
        await asyncio.sleep(0.01)
    assert len(first) == 10 and all(k.startswith("a/b/c.") for k in first)
    assert len(os.listdir("/proc/self/fd")) == fds


def _flat(n: int) -> SyntheticStore:
    grid = (n // 100, 100)
    return SyntheticStore(grid, bytes(64), {"a/zarr.json": array_doc(grid)})


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


async def test_listing_a_million_keys_holds_a_batch() -> None:
    """``iter_keys`` (what conversions list with) streams 10^6 keys in a few MB of
    resident memory (peak, with a generous margin; holding the keys takes 70 MB)."""
    store = _flat(1_000_000)
    Path("/proc/self/clear_refs").write_text("5")  # the peak restarts from here
    before = _status("VmRSS")
    n = 0
    async for _ in iter_keys(store, "a/"):
        n += 1
    added = _status("VmHWM") - before
    assert n == 1_000_001
    assert added < 16_000_000, added


async def _shard_to(n: int) -> int:
    source, target = _flat(n), sink()
    summary, added = await peak_added(lambda: shard_store_async(source, 8, to=target))
    assert summary.chunks_moved == n and target.sunk == -(-n // 800) * 13  # shards
    return added


@pytest.fixture(autouse=True)
def _both_spill(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs shorter than the smaller sizes: both sizes use the spill's disk runs, so a
    comparison sees growth, not the spill's fixed buffers appearing."""
    monkeypatch.setattr(spill, "RUN", 2048)


async def test_shard_to_memory_does_not_grow_with_the_chunks() -> None:
    """``shard --to`` of 64,000 chunks adds less than 1.5x the memory of 8,000 (it held
    322 B a chunk: 2.6 MB and 21 MB); ``benchmarks/bench_scale.py`` goes to 10^6."""
    small, large = await _shard_to(8_000), await _shard_to(64_000)
    assert large < 1.5 * small, (small, large)


def _sharded(n: int) -> SyntheticStore:
    """A sharded array of ``n`` chunks: shards of 8x8 chunks of 64 bytes, generated."""
    grid = (n // 640, 10)  # shards
    chunks = {(i, j): bytes(64) for i in range(8) for j in range(8)}
    doc = retarget(array_doc((grid[0] * 8, grid[1] * 8)), (8, 8), ChunkKeyEncoding())
    shard = encode_shard(chunks, read_layout(doc).index)  # type: ignore[arg-type]
    return SyntheticStore(grid, shard, {"a/zarr.json": doc})


async def _converted(n: int, convert: Callable[[SyntheticStore], Awaitable[Any]]) -> int:
    store = _sharded(n)
    summary, added = await peak_added(lambda: convert(store))
    assert summary.chunks_moved == n and store.erased == n // 64  # every source shard
    return added


@pytest.mark.parametrize(
    "convert",
    [
        lambda s: unshard_store_async(s, separator=".", manifest=False),  # one pass: unpack
        lambda s: reshard_async(s, 4, separator=".", manifest=False),  # split
        lambda s: reshard_async(s, 16, separator=".", manifest=False),  # repack: pairs
    ],
    ids=["unshard", "split", "repack"],
)
async def test_in_place_memory_does_not_grow_with_the_chunks(
    convert: Callable[[SyntheticStore], Awaitable[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unshard and reshard in place: 64,000 chunks add less than 1.5x what 6,400 add
    (without a manifest, which collects up to 16,384 chunks). A repack's cache of
    source indexes is bounded by ``INDEX_CACHE_BYTES``, and the source objects are
    deleted ``DELETE_ROUND`` at a time (a task per key on a store without bulk
    deletes); both shrunk here so that filling them does not stand for growth. The
    spill's pending run (one small array per target shard until ``RUN`` of them) fills
    at the larger size only: 512 KiB of slack for it."""
    monkeypatch.setattr(tasks, "INDEX_CACHE_BYTES", 256 * 1024)
    monkeypatch.setattr(pipeline, "DELETE_ROUND", 64)
    small, large = await _converted(6_400, convert), await _converted(64_000, convert)
    assert large < 1.5 * small + 512 * 1024, (small, large)
