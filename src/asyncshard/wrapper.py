"""WrapperStore: the base of every Store that wraps another Store (adapters and views).

It takes the wrapped store's coalescing caps and capabilities, closes the wrapped store
when closed, and passes every primitive through under a key mapping (``_inner_key``;
identity by default) with results reported under the caller's key. Subclasses
override what they change.

Counters on a wrapper mean **logical operations**: ``stats.requests[verb]`` counts, for
each call, the distinct keys callers asked for with that verb (four ranges of one key in
one ``get_partial_values`` are one ``get``), ``bytes_returned`` and ``bytes_written``
what callers got and gave, and ``bytes_fetched`` stays 0: what the operations cost is
counted by the wrapped store's own ``stats``.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import TypeVar

from asyncshard.ranges import ByteRange
from asyncshard.store import BytesLike, Data, GetResult, ObjectMeta, Store

__all__ = ["WrapperStore", "with_key"]

T = TypeVar("T")


def with_key(result: GetResult, key: str) -> GetResult:
    """``result`` reported under ``key`` (a key of a wrapper rather than of its inner store)."""
    if result.meta.key == key:
        return result
    return GetResult(result.data, dataclasses.replace(result.meta, key=key))


class WrapperStore(Store):
    """A Store over ``inner``; every primitive passes through unless overridden.

    Its ``stats`` count calls (one ``get`` per distinct key asked, one ``put`` per key
    written); the requests sent are counted by the wrapped store.
    """

    counts_calls = True

    def __init__(self, inner: Store) -> None:
        super().__init__(
            max_gap=inner.max_gap,
            max_request=inner.max_request,
            max_concurrency=inner.max_concurrency,
            max_overfetch=inner.max_overfetch,
        )
        self.inner = inner

    # -- capabilities: those of the wrapped store ---------------------------------------

    @property
    def supports_writes(self) -> bool:
        return self.inner.supports_writes

    @property
    def supports_listing(self) -> bool:
        return self.inner.supports_listing

    @property
    def supports_conditional_writes(self) -> bool:
        return self.inner.supports_conditional_writes

    @property
    def supports_conditional_deletes(self) -> bool:
        return self.inner.supports_conditional_deletes

    def version_pins_bytes(self, version: str) -> bool:
        return self.inner.version_pins_bytes(version)

    @property
    def lists_in_pages(self) -> bool:
        return self.inner.lists_in_pages

    # -- key mapping --------------------------------------------------------------------

    def _inner_key(self, key: str) -> str:
        """The wrapped store's key for one of this store's keys."""
        return key

    def _outer_key(self, inner_key: str) -> str | None:
        """This store's key for a key of the wrapped store (``None``: not visible here)."""
        return inner_key

    # -- counters: logical operations ---------------------------------------------------

    def _count(self, verb: str, keys: Iterable[str]) -> None:
        """Count one ``verb`` operation per distinct key of one call."""
        self.stats.requests[verb] += len(set(keys))

    def _count_writes(self, items: Iterable[tuple[str, BytesLike]]) -> None:
        """Count one ``put`` per distinct key of one write call and the bytes given."""
        pairs = list(items)
        self._count("put", (k for k, _ in pairs))
        self.stats.bytes_written += sum(len(v) for _, v in pairs)

    async def _fetch(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        """A read through the wrapped store, which counts what it cost (the logical
        operation is counted by the verb that asked)."""
        return await self._get(key, byte_range, if_match)

    async def _fetch_data(self, key: str, byte_range: ByteRange | None) -> Data | None:
        """:meth:`_fetch` of the bytes alone."""
        return await self._get_data(key, byte_range)

    def _reach(self) -> int:
        return self.inner._reach()  # the wrapped store's endpoint carries the requests

    # -- pass-through primitives --------------------------------------------------------

    async def _bounded(self, awaitable: Awaitable[T], nbytes: int | None = 0) -> T:
        """No bound here: the wrapped store bounds the real I/O (a bound at this level
        would also split concurrent reads that could be batched)."""
        return await awaitable

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        result = await self.inner.get_object(self._inner_key(key), byte_range, if_match=if_match)
        return None if result is None else with_key(result, key)

    async def _head(self, key: str) -> ObjectMeta | None:
        meta = await self.inner.head(self._inner_key(key))
        return None if meta is None else dataclasses.replace(meta, key=key)

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        return await self.inner.set(
            self._inner_key(key), data, if_match=if_match, if_absent=if_absent
        )

    async def _erase(self, key: str) -> None:
        await self.inner.erase_values([self._inner_key(key)])

    async def _erase_if_match(self, key: str, version: str) -> None:
        await self.inner.erase_if_match(self._inner_key(key), version)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.inner.list_prefix(self._inner_key(prefix)):
            outer = self._outer_key(key)
            if outer is not None and outer.startswith(prefix):
                yield outer

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        keys, prefixes = await self.inner.list_dir(self._inner_key(prefix))
        outer_keys = [k for k in map(self._outer_key, keys) if k is not None]
        outer_prefixes = [p for p in map(self._outer_key, prefixes) if p is not None]
        return outer_keys, outer_prefixes

    async def _prune(self, prefix: str) -> None:
        await self.inner.prune(self._inner_key(prefix))

    async def _close(self) -> None:
        await self.inner.close()
