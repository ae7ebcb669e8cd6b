"""``verify`` and ``repair`` take their shards from the listing as it streams: memory does
not grow with the number of shards, and a shard listed again after its rewrite is not
inspected twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.convert.layout import read_layout, retarget
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding
from asyncshard.formats.zarr3.shard import encode_shard
from asyncshard.integrity import repair_async, verify_async
from tests.integrity.test_verify_repair import SHARD_KEY, out_of_range, write_zarr
from tests.scale_store import SyntheticStore, array_doc
from tests.test_scale import peak_added


def _shards(n: int) -> SyntheticStore:
    """A sharded array of ``n`` generated shards (``a/c/i/j``) of one 64-byte chunk each."""
    grid = (n // 10, 10)
    doc = retarget(array_doc(grid), (1, 1), ChunkKeyEncoding())
    shard = encode_shard({(0, 0): bytes(64)}, read_layout(doc).index)  # type: ignore[arg-type]
    return SyntheticStore(grid, shard, {"a/zarr.json": doc})


async def _added(n: int, fix: bool) -> int:
    store = _shards(n)
    scan = repair_async if fix else verify_async
    report, added = await peak_added(lambda: scan(store))
    assert report.ok and (report.shards, report.chunks) == (n, n)
    assert store.sunk == 0, "nothing to rewrite"
    return added


@pytest.mark.parametrize("fix", [False, True], ids=["verify", "repair"])
async def test_scan_memory_does_not_grow_with_the_shards(fix: bool) -> None:
    """30,000 shards add less than 1.5x what 3,000 add, and under 1 MB: the sorted list
    of shard keys took 76 B a shard (2.3 MB here, 76 MB at 10^6, 7.6 GB at 10^8)."""
    small, large = await _added(3_000, fix), await _added(30_000, fix)
    assert large < 1.5 * small + 256 * 1024, (small, large)
    assert large < 1_000_000, large


class _Relisting(MemoryStore):
    """A store whose listing names one key again at its end, as a file system may name
    a file renamed over while it is listed."""

    again = ""

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        async for key in super()._list(prefix):
            yield key
        if self.again.startswith(prefix):
            yield self.again


async def test_a_repaired_shard_listed_again_is_not_inspected_twice(tmp_path: Path) -> None:
    write_zarr(tmp_path)
    out_of_range(tmp_path / SHARD_KEY)
    store = _Relisting()
    source = LocalStore(tmp_path)
    async for key in source.list_prefix(""):
        await store.set(key, await source.get(key))  # type: ignore[arg-type]
    store.again = SHARD_KEY

    report = await repair_async(store)
    assert (report.shards, len(report.damaged)) == (4, 1)
    assert report.damaged[0].action is not None
    assert report.damaged[0].action.startswith("rewritten")
    assert (await verify_async(store)).ok
