"""``from_obspec`` reads: bytes alone take one ``get_range_async`` call of a client whose
ranged answers can be trusted; what that call refuses is read again through
``get_async``, never answered wrongly."""

from __future__ import annotations

import asyncio
import functools
import http.server
import threading
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import obstore.store
import pytest

from asyncshard.errors import BucketNotFoundError, StoreBackendError
from asyncshard.obspec import from_obspec
from asyncshard.ranges import Offset, Range, Suffix
from tests.obspec.conftest import s3_client
from tests.servers.fixtures import unique_prefix
from tests.servers.s3 import S3Server


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
    async with from_obspec(client, ranged_reads=True) as store:
        await store.set("k", b"0123456789")
        client.calls.clear()
        assert await store.get("k") == b"0123456789"
        assert await store.get("k", Range(2, 5)) == b"234"
        assert await store.get("k", Offset(7)) == b"789"
        assert await store.get("k", Range(8, 100)) == b"89"  # clamped, as slicing does
        assert await store.get("missing") is None
        assert client.calls == {"get_range_async": 5}
        assert store.stats.requests["get"] == 5


async def test_what_the_ranged_call_refuses_is_clamped_after_a_head() -> None:
    client = Counting()
    async with from_obspec(client, ranged_reads=True) as store:
        await store.set("empty", b"")
        await store.set("k", b"0123456789")
        client.calls.clear()
        store.stats.reset()
        assert await store.get("empty") == b""  # no range of an empty object
        assert client.calls == {"get_range_async": 1, "head_async": 1}
        assert await store.get("k", Offset(20)) == b""  # starts past the end
        assert client.calls == {"get_range_async": 2, "head_async": 2}
        assert await store.get("k", Range(8, 20)) == b"89"  # clamped by the call itself
        assert store.stats.requests == {"get": 3, "head": 2}  # every request sent counted


async def test_suffixes_and_versions_take_get_async() -> None:
    client = Counting()
    async with from_obspec(client, ranged_reads=True) as store:
        await store.set("k", b"0123456789")
        client.calls.clear()
        assert await store.get("k", Suffix(3)) == b"789"
        result = await store.get_object("k", Range(0, 2))
        assert result is not None and result.data == b"01" and result.meta.version
        assert client.calls == {"get_async": 2}


async def test_a_client_not_known_to_answer_ranges_exactly_reads_with_get_async() -> None:
    """A ranged answer carries no range to check it by, so only clients known to answer
    exactly the range (obstore's stores, ``to_obspec``'s) take that call by default: one
    that sends whole objects would otherwise pass for a range reaching past the end."""

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
        assert await store.get("k", Range(2, 100)) == b"23456789"
        assert await store.get("k", Offset(7)) == b"789"
        assert await store.get("k") == b"0123456789"
        assert client.calls["get_range_async"] == 0


class _Log(http.server.SimpleHTTPRequestHandler):
    """Python's file server: it answers every ``Range`` with the whole file (200)."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.requests.append(self.headers.get("Range") or "")
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_server_without_ranges_gets_whole_reads_cut(tmp_path: Path) -> None:
    (tmp_path / "k").write_bytes(b"0123456789")
    handler = functools.partial(_Log, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Log.requests = []
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        client = obstore.store.HTTPStore.from_url(url, client_options={"allow_http": True})

        async def reads() -> list[bytes | None]:
            async with from_obspec(client) as store:  # an obstore store: ranged reads
                got = [await store.get("k"), await store.get("k")]
                got += [await store.get("k", Range(2, 5)), await store.get("k", Offset(8))]
                result = await store.get_object("k", Range(1, 3))
                assert result is not None and result.meta.size == 10
                got.append(result.data)
                assert store.stats.requests["get"] == 6
                return [None if g is None else bytes(g) for g in got]

        assert asyncio.run(reads()) == [b"0123456789"] * 2 + [b"234", b"89", b"12"]

        async def ranged_first() -> bytes | None:
            async with from_obspec(client) as store:  # a ranged read with the version
                first = await store.get_object("k", Range(4, 6))
                again = await store.get_object("k", Range(6, 7))
                assert first is not None and again is not None
                assert store.stats.requests["get"] == 3  # refused, whole, whole
                return bytes(first.data) + bytes(again.data)

        assert asyncio.run(ranged_first()) == b"456"
        # the first read asked a range (answered whole: refused), then read it plainly;
        # every later read asks no range, and ranges are cut from the whole object
        assert len(_Log.requests) == 9 and _Log.requests[0].startswith("bytes=0-")
        assert _Log.requests[1:6] == [""] * 5
        assert _Log.requests[6] == "bytes=4-5" and _Log.requests[7:] == ["", ""]
    finally:
        server.shutdown()
        server.server_close()


async def test_a_missing_bucket_is_an_error_on_every_read(s3_server: S3Server) -> None:
    """S3 answers a missing bucket with a 404 as for a missing key; its error code tells
    them apart, and no read takes it for a missing object."""
    client = s3_client(s3_server, bucket="no-such-bucket-" + unique_prefix().lower())
    async with from_obspec(client) as store:
        with pytest.raises(BucketNotFoundError):
            await store.get("k")
        with pytest.raises(BucketNotFoundError):
            await store.get("k", Range(0, 4))
        with pytest.raises(BucketNotFoundError):
            await store.get_object("k")


async def test_a_missing_key_named_like_a_bucket_error_reads_as_missing(
    s3_server: S3Server,
) -> None:
    """Only the error code of a response tells a missing bucket: not a key that spells
    one (messages repeat the key: raw from obstore's memory store, encoded from S3)."""
    names = ["logs/ContainerNotFound.txt", "a<Code>NoSuchBucket</Code>b"]
    for client in (obstore.store.MemoryStore(), s3_client(s3_server)):
        async with from_obspec(client) as store:
            for name in names:
                assert await store.get(name) is None
                assert await store.get(name, Range(0, 4)) is None
                assert await store.get_object(name) is None


async def test_a_clamped_read_that_fails_raises_a_store_error() -> None:
    """A range refused, then its clamped read failing too: an asyncshard error."""

    class Failing(Counting):
        def __getattr__(self, name: str) -> Any:
            if name in ("get_async", "get_range_async"):

                async def fail(*args: Any, **kwargs: Any) -> Any:
                    raise RuntimeError("the server broke")

                return fail
            return super().__getattr__(name)

    client = Failing()
    async with from_obspec(client, ranged_reads=True) as store:
        await store.set("k", b"0123456789")
        with pytest.raises(StoreBackendError, match="the server broke"):
            await store.get("k", Range(2, 5))
