"""A batch of scattered small inner chunks: bytes fetched stay within 1.5x those wanted.

The workload of the over-fetch finding: random 4 KiB inner chunks of 128^3 shards of
16^3 chunks. A fixed coalescing gap (256 KiB on cloud stores) merged neighbours across
whole shards and fetched 13.7x the bytes needed; requests are now merged only while
their gaps stay within half the bytes wanted (or 4 KiB).
"""

from __future__ import annotations

import json
import random

import pytest

from asyncshard.backends import MemoryStore
from asyncshard.backends.cloud import CLOUD_MAX_GAP
from asyncshard.cache import LoadingCache
from asyncshard.formats.zarr3.shard import index_byte_range
from asyncshard.sharding import ZarrShardedStore
from tests.zarr.helpers import array_doc

SHAPE, SHARD, CHUNK = 256, 128, 16
CHUNKS_PER_AXIS = SHAPE // CHUNK


@pytest.mark.parametrize("max_gap", [64 * 1024, CLOUD_MAX_GAP])
async def test_scattered_chunks_fetch_at_most_half_again(max_gap: int) -> None:
    inner = MemoryStore(max_gap=max_gap)
    doc = array_doc([SHAPE] * 3, [SHARD] * 3, [CHUNK] * 3)
    await inner.set("arr/zarr.json", json.dumps(doc).encode())
    writer = await ZarrShardedStore.open(inner, "arr")
    rng = random.Random(5)
    keys = [
        f"arr/c/{i}/{j}/{k}"
        for i in range(CHUNKS_PER_AXIS)
        for j in range(CHUNKS_PER_AXIS)
        for k in range(CHUNKS_PER_AXIS)
    ]
    await writer.set_many([(key, rng.randbytes(CHUNK**3)) for key in keys])

    store = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())
    wanted = rng.sample(keys, 500)
    inner.stats.reset()
    values = await store.get_partial_values([(k, None) for k in wanted])
    assert all(v is not None and len(v) == CHUNK**3 for v in values)

    shards = 8
    index_bytes = shards * index_byte_range(store.layout.index).length
    needed = len(wanted) * CHUNK**3
    sent = inner.stats.bytes_fetched - index_bytes
    assert sent <= 1.5 * needed
    data_requests = inner.stats.requests["get"] - shards
    assert data_requests < len(wanted)  # neighbours still share requests


async def test_max_overfetch_none_merges_by_the_gap_alone() -> None:
    """Where requests cost more than bytes (loopback, in-region), the bound can be lifted:
    fewer, larger requests, as before the bound."""
    from asyncshard import open_store
    from asyncshard.backends.cloud import CloudStore
    from asyncshard.ranges import Range

    bounded, unbounded = MemoryStore(), MemoryStore(max_overfetch=None)
    blob = bytes(range(256)) * 1024
    ranges = [Range(i * 20_000, i * 20_000 + 100) for i in range(10)]
    for store in (bounded, unbounded):
        await store.set("k", blob)
        store.stats.reset()
        await store.get_partial_values([("k", r) for r in ranges])
    assert bounded.stats.requests["get"] == 10 and unbounded.stats.requests["get"] == 1
    assert unbounded.stats.bytes_fetched == 180_100

    doc = array_doc([SHAPE] * 3, [SHARD] * 3, [CHUNK] * 3)
    await unbounded.set("arr/zarr.json", json.dumps(doc).encode())
    adapter = await ZarrShardedStore.open(unbounded, "arr")
    assert adapter.max_overfetch is None  # wrappers take the wrapped store's caps
    http = open_store("http://127.0.0.1:9/data/", max_overfetch=None)
    assert isinstance(http, CloudStore) and http.max_overfetch is None
    assert http.open_options["max_overfetch"] is None
    with pytest.raises(ValueError, match="max_overfetch"):
        MemoryStore(max_overfetch=-1)
