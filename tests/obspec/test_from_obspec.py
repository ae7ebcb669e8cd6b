"""``from_obspec`` reads: bytes alone take one ``get_range_async`` call of the client;
what that call refuses is read again through ``get_async``, never answered wrongly."""

from __future__ import annotations

from collections import Counter
from typing import Any

import obstore.store

from asyncshard.obspec import from_obspec
from asyncshard.ranges import Offset, Range, Suffix


class Counting:
    """An obstore ``MemoryStore`` that counts the obspec calls made to it."""

    def __init__(self) -> None:
        self.inner = obstore.store.MemoryStore()
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return call


async def test_bytes_alone_take_one_ranged_call() -> None:
    client = Counting()
    async with from_obspec(client) as store:
        await store.set("k", b"0123456789")
        client.calls.clear()
        assert await store.get("k") == b"0123456789"
        assert await store.get("k", Range(2, 5)) == b"234"
        assert await store.get("k", Offset(7)) == b"789"
        assert await store.get("k", Range(8, 100)) == b"89"  # clamped, as slicing does
        assert await store.get("missing") is None
        assert client.calls == {"get_range_async": 5}
        assert store.stats.requests["get"] == 5


async def test_what_the_ranged_call_refuses_is_read_again() -> None:
    client = Counting()
    async with from_obspec(client) as store:
        await store.set("empty", b"")
        await store.set("k", b"0123456789")
        client.calls.clear()
        store.stats.reset()
        assert await store.get("empty") == b""  # no range of an empty object
        assert client.calls == {"get_range_async": 1, "get_async": 1}
        assert await store.get("k", Offset(20)) == b""  # starts past the end: size first
        assert client.calls == {"get_range_async": 2, "get_async": 2, "head_async": 1}
        assert store.stats.requests == {"get": 4, "head": 1}  # every request sent counted


async def test_suffixes_and_versions_take_get_async() -> None:
    client = Counting()
    async with from_obspec(client) as store:
        await store.set("k", b"0123456789")
        client.calls.clear()
        assert await store.get("k", Suffix(3)) == b"789"
        result = await store.get_object("k", Range(0, 2))
        assert result is not None and result.data == b"01" and result.meta.version
        assert client.calls == {"get_async": 2}


async def test_a_client_that_ignores_the_range_is_not_believed() -> None:
    """A client whose ranged call sends more than the range asked is read again."""

    class Whole(Counting):
        def __getattr__(self, name: str) -> Any:
            if name == "get_range_async":

                async def whole(path: str, *, start: int, end: int) -> bytes:
                    self.calls[name] += 1
                    result = await self.inner.get_async(path)
                    return bytes(await result.bytes_async())

                return whole
            return super().__getattr__(name)

    client = Whole()
    async with from_obspec(client) as store:
        await store.set("k", b"0123456789")
        assert await store.get("k", Range(2, 5)) == b"234"
        assert client.calls["get_range_async"] == 1 and client.calls["get_async"] == 1
