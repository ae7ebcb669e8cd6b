"""The engine's seam: any format implementing ``ShardFormat`` through ``IndexIO`` is a
Store that passes the conformance suite and keeps the engine's request budgets.

``ToyFormat`` is a third, deliberately simple format written only against the seam
(``asyncshard.sharding.engine.strategy``): chunk keys ``t/<n>``, four chunks per shard
``t/shard-<n // 4>``, a shard is an 8-byte header length, a JSON index and the chunk
bytes. If the engine reached past the seam into the Zarr or precomputed code, or a
format needed more than ``IndexIO`` offers, these tests would fail.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import AsyncIterator, Collection, Mapping, Sequence

import pytest

from asyncshard.backends import MemoryStore
from asyncshard.cache import CacheEntry, LoadingCache
from asyncshard.errors import CorruptShardError
from asyncshard.sharding.engine import (
    Found,
    IndexIO,
    Location,
    ShardedAdapter,
    ShardFormat,
    ShardIndexes,
)
from asyncshard.sharding.precomputed import PrecomputedFormat
from asyncshard.sharding.zarr import ZarrFormat
from asyncshard.store import BytesLike
from asyncshard.testing import ChunkKeys, Harness, StoreConformance

_CHUNK = re.compile(r"t/(0|[1-9][0-9]{0,8})")
_SHARD = re.compile(r"t/shard-(0|[1-9][0-9]{0,8})")
_HEADER = struct.Struct("<Q")

ToyIndex = dict[int, tuple[int, int]]


class ToyFormat(ShardFormat[int, ToyIndex]):
    """Four chunks per shard, a JSON index in front."""

    kind = "toy"

    def locate(self, key: str) -> Location[int] | None:
        match = _CHUNK.fullmatch(key)
        if match is None:
            return None
        n = int(match[1])
        return Location(f"t/shard-{n // 4}", n)

    def is_shard(self, inner_key: str) -> bool:
        return _SHARD.fullmatch(inner_key) is not None

    def is_whole(self, shard_key: str, chunks: Collection[int]) -> bool:
        first = 4 * int(shard_key.rpartition("-")[2])
        return set(range(first, first + 4)) <= set(chunks)

    def lookup(
        self, io: IndexIO, shard_key: str, index: ToyIndex, chunk: int
    ) -> tuple[int, int] | None:
        return index.get(chunk)

    async def _load(self, io: IndexIO, shard_key: str) -> CacheEntry:
        result = await io.store.get_object(shard_key)
        if result is None:
            return LoadingCache.make_entry(None, None, 0)
        index = self._index(memoryview(result.data), shard_key)
        return LoadingCache.make_entry(index, result.meta.version, 64 * len(index))

    async def find(self, io: IndexIO, shard_key: str, chunks: Sequence[int]) -> Found[int]:
        entry = await io.cached(("index", shard_key), lambda: self._load(io, shard_key))
        if entry.missing:
            return Found(False, None, {}, entry.loaded_at)
        index: ToyIndex = entry.value
        entries = {c: index[c] for c in chunks if c in index}
        return Found(True, entry.version, entries, entry.loaded_at)

    def remember(self, io: IndexIO, shard_key: str, shard: memoryview, version: str) -> None:
        index = self._index(shard, shard_key)
        io.put(("index", shard_key), index, version, 64 * len(index))

    async def chunks_in(self, io: IndexIO, shard_key: str) -> list[int]:
        found = await self.find(io, shard_key, [])
        entry = io.peek(("index", shard_key))
        return [] if not found.exists or entry is None else sorted(entry.value)

    def _index(self, shard: memoryview, shard_key: str) -> ToyIndex:
        if len(shard) < _HEADER.size:
            raise CorruptShardError("shorter than its header", key=shard_key)
        (length,) = _HEADER.unpack(shard[: _HEADER.size])
        end = _HEADER.size + length
        if end > len(shard):
            raise CorruptShardError("index past the end", key=shard_key)
        try:
            doc = json.loads(bytes(shard[_HEADER.size : end]))
        except ValueError:
            raise CorruptShardError("index is not JSON", key=shard_key) from None
        index = {int(k): (end + a, end + b) for k, (a, b) in doc.items()}
        if any(not end <= a <= b <= len(shard) for a, b in index.values()):
            raise CorruptShardError("chunk outside the shard", key=shard_key)
        return index

    def split(self, shard_key: str, shard: memoryview) -> dict[int, memoryview]:
        return {c: shard[a:b] for c, (a, b) in self._index(shard, shard_key).items()}

    def build(self, shard_key: str, chunks: Mapping[int, BytesLike]) -> bytes:
        doc: dict[str, tuple[int, int]] = {}
        data = bytearray()
        for chunk, value in sorted(chunks.items()):
            doc[str(chunk)] = (len(data), len(data) + len(value))
            data += value
        index = json.dumps(doc).encode()
        return _HEADER.pack(len(index)) + index + bytes(data)

    def empty_shard(self) -> bytes:
        return self.build("", {})

    def chunk_key(self, shard_key: str, chunk: int) -> str | None:
        return f"t/{chunk}"

    def list_source(self, prefix: str) -> str:
        return "t/" if prefix.startswith("t/") else prefix


class TestToyFormat(StoreConformance):
    """The conformance suite on the engine with a format written against the seam only."""

    @pytest.fixture(params=["plain", "chunks", "mixed"])
    async def harness(self, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
        store = ShardedAdapter(MemoryStore(), ToyFormat(), cache=LoadingCache())
        async with store:
            if request.param == "plain":
                yield Harness(store)
            else:
                keys = ChunkKeys(lambda n: f"t/{3 * n}", mixed=request.param == "mixed")
                yield Harness(store, keys=keys, structured=False)


async def test_budgets_through_the_seam() -> None:
    """A whole shard written in one put; a cold read loads the index (one request, this
    format reads it whole), a warm one is one range read."""
    inner = MemoryStore()
    store = ShardedAdapter(inner, ToyFormat(), cache=LoadingCache(), recheck_after=60)
    await store.set_values({f"t/{n}": bytes([n]) * 10 for n in range(4)})
    assert dict(inner.stats.requests) == {"put": 1}
    assert [k async for k in inner.list_prefix("")] == ["t/shard-0"]
    cold = ShardedAdapter(inner, ToyFormat(), cache=LoadingCache(), recheck_after=60)
    inner.stats.reset()
    assert await cold.get("t/2") == bytes([2]) * 10
    assert inner.stats.requests["get"] == 2  # the index (whole shard), then the chunk
    inner.stats.reset()
    assert await cold.get("t/3") == bytes([3]) * 10
    assert await cold.get("t/7") is None  # a shard that does not exist: one read
    assert inner.stats.requests["get"] == 2


def test_formats_are_strategies_and_indexes_serve_them() -> None:
    """The two shipped formats and the toy implement every abstract member of the seam,
    and the engine's index side offers what formats may use (``IndexIO``)."""
    for fmt in (ZarrFormat, PrecomputedFormat, ToyFormat):
        assert issubclass(fmt, ShardFormat)
        assert not getattr(fmt, "__abstractmethods__", None), fmt
    io_members = {"store", "cached", "put", "peek"}
    assert io_members <= set(dir(ShardIndexes))
    indexes = ShardIndexes(MemoryStore(), ToyFormat(), LoadingCache(), 1.0)
    with pytest.raises(ValueError, match="recheck_after"):
        ShardIndexes(MemoryStore(), ToyFormat(), LoadingCache(), -1.0)
    assert indexes.store is indexes.inner


def test_the_default_inspection_keeps_all_or_nothing() -> None:
    """A format without its own ``inspect`` (``verify``/``repair``) gets the seam's: the
    chunks of a shard that splits, or one fault for a shard that does not."""
    fmt = ToyFormat()
    shard = fmt.build("s/0", {0: b"zero", 2: b"two"})
    health = fmt.inspect("s/0", memoryview(shard))
    assert not health.damaged and {c: bytes(v) for c, v in health.intact.items()} == {
        0: b"zero",
        2: b"two",
    }
    broken = fmt.inspect("s/0", memoryview(b"{not json" + shard))
    assert broken.damaged and len(broken.faults) == 1 and not broken.intact
