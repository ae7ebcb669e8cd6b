"""Executing the tasks of a Zarr conversion pass against a store.

Bytes are moved, never decoded: flat chunks become inner chunks byte for byte and back
(:func:`encode_shard` / :func:`decode_shard` only frame them). Each task reads its
sources, builds its target objects in memory (one shard at most) and writes them with
plain atomic writes; nothing here touches ``zarr.json``.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

from asyncshard.cache import IndexCache
from asyncshard.convert.layout import ArrayLayout, read_layout
from asyncshard.convert.plan import Task
from asyncshard.convert.report import TaskResult
from asyncshard.formats.zarr3.metadata import Coords
from asyncshard.formats.zarr3.shard import (
    decode_index,
    decode_shard,
    encode_shard,
    index_byte_range,
)
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Data, Store

__all__ = ["ZarrExecutor", "ZarrPass"]

#: Bytes of source shard indexes a repacking executor keeps cached.
INDEX_CACHE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ZarrPass:
    """One pass of a Zarr conversion: the array's key prefix, source and target documents."""

    prefix: str
    source: dict[str, Any]
    target: dict[str, Any]

    def executor(self, store: Store) -> ZarrExecutor:
        """An executor of this pass's tasks on ``store``."""
        return ZarrExecutor(store, self)


class ZarrExecutor:
    """Runs :class:`~asyncshard.convert.plan.Task` objects of one :class:`ZarrPass`."""

    def __init__(self, store: Store, spec: ZarrPass) -> None:
        self.store = store
        self.src = read_layout(spec.source, spec.prefix)
        self.dst = read_layout(spec.target, spec.prefix)
        self._sharded_src: ZarrShardedStore | None = None

    @property
    def sharded_src(self) -> ZarrShardedStore:
        """The source as a ZarrShardedStore (inner chunks by key, cached indexes)."""
        if self._sharded_src is None:
            cache = IndexCache(INDEX_CACHE_BYTES)
            self._sharded_src = ZarrShardedStore(self.store, self.src.sharding(), cache=cache)
        return self._sharded_src

    async def execute(self, task: Task) -> TaskResult:
        """Do one task."""
        if task.kind == "pack":
            return await self._pack(task)
        if task.kind == "repack":
            return await self._repack(task)
        if task.kind == "unpack":
            return await self._unpack(task)
        if task.kind == "copy":
            return await self._copy(task)
        if task.kind == "index":
            return await self._index(task)
        raise ValueError(f"unknown task kind {task.kind!r}")

    # -- building one target shard ----------------------------------------------------

    async def _write_shard(
        self, target: Coords, chunks: list[Coords], values: list[Data | None]
    ) -> TaskResult:
        assert self.dst.index is not None
        pairs = [(c, v) for c, v in zip(chunks, values, strict=True) if v is not None]
        found = {self.dst.position(c): v for c, v in pairs}
        present = tuple(c for c, _ in pairs)
        nread = sum(len(v) for _, v in pairs)
        pairs.clear()
        values.clear()
        if not found:
            return TaskResult(0, 0, nread, 0)
        shard = encode_shard(found, self.dst.index)
        found.clear()
        await self.store.set(self.dst.object_key(target), shard)
        return TaskResult(len(present), 1, nread, len(shard), present)

    async def _pack(self, task: Task) -> TaskResult:
        assert task.target is not None
        keys = [(self.src.object_key(c), None) for c in task.sources]
        values = await self.store.get_partial_values(keys)
        return await self._write_shard(task.target, list(task.sources), values)

    async def _repack(self, task: Task) -> TaskResult:
        assert task.target is not None
        lo, hi = self.dst.chunk_range(task.target)
        feeding = set(task.sources)
        chunks = [
            c
            for c in itertools.product(*(range(a, b) for a, b in zip(lo, hi, strict=True)))
            if self.src.object_of(c) in feeding
        ]
        values = await self.sharded_src.get_partial_values(
            [(self.src.object_key(c), None) for c in chunks]
        )
        return await self._write_shard(task.target, chunks, values)

    # -- splitting one source shard ---------------------------------------------------

    async def _read_index(self, layout: ArrayLayout, obj: Coords) -> tuple[list[Coords], int]:
        return await read_present_chunks(self.store, layout, obj)

    async def _unpack(self, task: Task) -> TaskResult:
        (shard,) = task.sources
        src = self.src
        assert src.index is not None
        if task.existing:  # resuming: skip the shard if every chunk is already out
            chunks, nread = await self._read_index(src, shard)
            if set(chunks) <= set(task.existing):
                return TaskResult(len(chunks), 0, nread, 0, tuple(chunks), resumed=True)
        key = src.object_key(shard)
        buf = await self.store.get(key)
        if buf is None:
            return TaskResult(0, 0, 0, 0)
        base = tuple(s * n for s, n in zip(shard, src.cps, strict=True))
        existing = set(task.existing)
        present: list[Coords] = []
        writes: list[tuple[str, memoryview]] = []
        for pos, view in decode_shard(buf, src.index, key=key).items():
            chunk = tuple(b + p for b, p in zip(base, pos, strict=True))
            if not src.chunk_in_bounds(chunk):
                continue
            present.append(chunk)
            if chunk not in existing:
                writes.append((self.dst.object_key(chunk), view))
        await asyncio.gather(*(self.store.set(k, v) for k, v in writes))
        written = sum(len(v) for _, v in writes)
        return TaskResult(
            len(present), len(writes), len(buf), written, tuple(present), resumed=bool(existing)
        )

    # -- same grid: verbatim copies ---------------------------------------------------

    async def _copy(self, task: Task) -> TaskResult:
        (obj,) = task.sources
        assert task.target is not None
        buf = await self.store.get(self.src.object_key(obj))
        if buf is None:
            return TaskResult(0, 0, 0, 0)
        if self.src.index is not None:
            rng = index_byte_range(self.src.index, len(buf))
            index = decode_index(
                memoryview(buf)[rng.as_slice()], self.src.index, shard_size=len(buf)
            )
            chunks = tuple(self.src.present_chunks(obj, index))
        else:
            chunks = (obj,)
        await self.store.set(self.dst.object_key(task.target), buf)
        return TaskResult(len(chunks), 1, len(buf), len(buf), chunks)

    async def _index(self, task: Task) -> TaskResult:
        assert task.target is not None
        if not self.dst.sharded:
            return TaskResult(1, 0, 0, 0, (task.target,), resumed=True)
        chunks, nread = await self._read_index(self.dst, task.target)
        return TaskResult(len(chunks), 0, nread, 0, tuple(chunks), resumed=True)


async def read_present_chunks(
    store: Store, layout: ArrayLayout, shard: Coords
) -> tuple[list[Coords], int]:
    """The chunks a shard holds (from its index alone) and the bytes read to know it.

    The index is validated against the whole object's size, so an entry pointing past
    the end of the shard is a ``CorruptShardError`` here, not a surprise later.
    """
    assert layout.index is not None
    key = layout.object_key(shard)
    result = await store.get_object(key, layout.index_request())
    if result is None:
        return [], 0
    index = decode_index(result.data, layout.index, shard_size=result.meta.size, key=key)
    return layout.present_chunks(shard, index), len(result.data)
