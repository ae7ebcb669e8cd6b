"""Listing a sharded dataset: chunk keys come from the shard indexes.

A listing of the wrapped store finds the shards; each shard's index (one read per shard,
cached) names its chunks. Pass-through objects are listed under their own keys unless a
chunk of the same name hides them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Generic

from asyncshard.sharding.engine.indexes import ShardIndexes, stale_on_conflict
from asyncshard.sharding.engine.strategy import C
from asyncshard.store import DEFAULT_MAX_CONCURRENCY

__all__ = ["ShardListing"]


class ShardListing(Generic[C]):
    """The listing side of a sharded adapter (``indexes``: its shard indexes)."""

    def __init__(self, indexes: ShardIndexes[C]) -> None:
        self.indexes = indexes
        self.format = indexes.format
        self.inner = indexes.inner

    async def keys(self, prefix: str) -> AsyncIterator[str]:
        """Every key of the adapter starting with ``prefix``: pass-through keys as the
        wrapped store lists them, then the chunk keys of the shards found."""
        fmt = self.format
        shard_keys: list[str] = []
        async for inner_key in self.inner.list_prefix(fmt.list_source(prefix)):
            if fmt.is_shard(inner_key):
                shard_keys.append(inner_key)
                continue
            key = fmt.outer_key(inner_key)
            if key is not None and key.startswith(prefix) and not fmt.shadows(key):
                yield key
        for key in await self.chunk_keys(shard_keys):
            if key.startswith(prefix):
                yield key

    async def folder(self, prefix: str) -> tuple[list[str], list[str]]:
        """The keys and child prefixes of the wrapped store's folder ``prefix``, as this
        adapter's keys (chunk keys from the folder's shards); only where the format does
        not walk (:meth:`ShardFormat.walks`)."""
        fmt = self.format
        keys, prefixes = await self.inner.list_dir(fmt.inner_key(prefix))
        shards = [k for k in keys if fmt.is_shard(k)]
        plain = [
            key
            for key in (fmt.outer_key(k) for k in keys if not fmt.is_shard(k))
            if key is not None and not fmt.shadows(key)
        ]
        child_prefixes = [p for p in map(fmt.outer_key, prefixes) if p is not None]
        return [*plain, *await self.chunk_keys(shards)], child_prefixes

    async def chunk_keys(self, shard_keys: Sequence[str]) -> list[str]:
        """The chunk keys stored in the given shards."""
        keys = (self.format.chunk_key(s, c) for s, c in await self.chunks(shard_keys))
        return [k for k in keys if k is not None]

    async def chunks(self, shard_keys: Sequence[str]) -> list[tuple[str, C]]:
        """``(shard key, chunk)`` of every chunk stored in the given shards (indexes through
        the cache, at most the wrapped store's concurrency at a time)."""
        limit = asyncio.Semaphore(self.inner.max_concurrency or DEFAULT_MAX_CONCURRENCY)
        fmt, indexes = self.format, self.indexes

        async def chunks_of(shard_key: str) -> list[C]:
            async def from_index() -> list[C]:
                with stale_on_conflict(shard_key):
                    return await fmt.chunks_in(indexes, shard_key)

            async def from_snapshot() -> list[C]:
                whole = await self.inner.get(shard_key)
                if whole is None:
                    return []
                return list(fmt.split(shard_key, memoryview(whole)))

            async with limit:
                return await indexes.retry_stale(shard_key, from_index, from_snapshot)

        found = await asyncio.gather(*(chunks_of(s) for s in shard_keys))
        return [(s, c) for s, chunks in zip(shard_keys, found, strict=True) for c in chunks]
