"""``from_obspec`` checks every answer against what it asked: a client that answers with
other bytes than those asked never makes a read return them. An answer holding more that
says which (a whole object for a range) is cut down; any other is a
``CorruptResponseError``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import obspec
import obstore.store
import pytest

from asyncshard.errors import CorruptResponseError, StoreBackendError
from asyncshard.obspec import from_obspec
from asyncshard.ranges import ByteRange, Offset, Range, Suffix

DATA = bytes(range(256)) * 4  # 1,024 bytes, each offset's byte telling where it is


class Answer:
    """obspec's ``GetResultAsync``: a body, the range it says it holds, the metadata."""

    def __init__(self, body: bytes, span: tuple[int, int], meta: obspec.ObjectMeta) -> None:
        self._body, self._span, self._meta = body, span, meta

    @property
    def attributes(self) -> obspec.Attributes:
        return {}

    @property
    def meta(self) -> obspec.ObjectMeta:
        return self._meta

    @property
    def range(self) -> tuple[int, int]:
        return self._span

    async def buffer_async(self) -> bytes:
        return self._body

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        yield self._body


class Misanswering:
    """An obspec client over obstore's ``MemoryStore`` whose reads answer as ``how`` says.

    - ``"whole"``: a ranged get with the whole object, saying so (``range`` ``(0, size)``);
    - ``"unsaid"``: a ranged get with the whole object, saying it is the range asked;
    - ``"short"``: every get with its bytes but the last, saying they are all there;
    - ``"truncated"``: every get with its bytes but the last, saying so.
    """

    def __init__(self, how: str) -> None:
        self.inner = obstore.store.MemoryStore()
        self.how = how
        self.gets = 0

    async def get_async(self, path: str, *, options: obspec.GetOptions | None = None) -> Answer:
        self.gets += 1
        asked = await self.inner.get_async(path, options=options)
        body, span = bytes(await asked.buffer_async()), asked.range
        if self.how in ("whole", "unsaid") and options and "range" in options:
            whole = await self.inner.get_async(path)
            body = bytes(await whole.buffer_async())
            span = (0, len(body)) if self.how == "whole" else span
        elif self.how in ("short", "truncated"):
            body = body[:-1]
            span = (span[0], span[1] - 1) if self.how == "truncated" else span
        return Answer(body, span, asked.meta)

    async def head_async(self, path: str) -> obspec.ObjectMeta:
        return await self.inner.head_async(path)

    async def put_async(self, path: str, file: Any, **kwargs: Any) -> obspec.PutResult:
        return await self.inner.put_async(path, file, **kwargs)


RANGES: list[ByteRange] = [Range(10, 20), Range(1000, 2000), Offset(1000), Suffix(5)]


def _want(byte_range: ByteRange) -> bytes:
    if isinstance(byte_range, Range):
        return DATA[byte_range.start : byte_range.end]
    if isinstance(byte_range, Offset):
        return DATA[byte_range.offset :]
    return DATA[-byte_range.length :]


async def test_a_whole_object_answering_a_range_is_cut_to_it() -> None:
    client = Misanswering("whole")
    async with from_obspec(client) as store:
        await store.set("k", DATA)
        for byte_range in RANGES:
            got = await store.get("k", byte_range)
            assert got is not None and bytes(got) == _want(byte_range), byte_range
            result = await store.get_object("k", byte_range)
            assert result is not None and bytes(result.data) == _want(byte_range)
            assert result.meta.size == len(DATA)
        asked = [("k", Range(2, 6)), ("k", Range(100, 110)), ("k", Suffix(3))]
        got_many = await store.get_partial_values(asked)
        assert [bytes(g) for g in got_many if g is not None] == [
            DATA[2:6],
            DATA[100:110],
            DATA[-3:],
        ]
        assert await store.get("k") == DATA


@pytest.mark.parametrize("how", ["unsaid", "short", "truncated"])
async def test_an_answer_of_other_bytes_than_asked_raises(how: str) -> None:
    client = Misanswering(how)
    async with from_obspec(client) as store:
        await store.set("k", DATA)
        for byte_range in RANGES:
            with pytest.raises(CorruptResponseError, match=r"^k: ") as info:
                await store.get("k", byte_range)
            assert isinstance(info.value, StoreBackendError) and info.value.key == "k"
            with pytest.raises(CorruptResponseError):
                await store.get_object("k", byte_range)
        with pytest.raises(CorruptResponseError):
            await store.get_partial_values([("k", Range(2, 6)), ("k", Range(500, 510))])
        assert client.gets == 2 * len(RANGES) + 1  # each read asked once, none read again


@pytest.mark.parametrize("how", ["short", "truncated"])
async def test_a_whole_read_shorter_than_the_object_raises(how: str) -> None:
    """The object's size says how long a whole read is; a body of 1,023 bytes of a
    1,024-byte object is an error, whether or not its range owns up to it."""
    client = Misanswering(how)
    async with from_obspec(client) as store:
        await store.set("k", DATA)
        with pytest.raises(CorruptResponseError, match="1024"):
            await store.get("k")
        with pytest.raises(CorruptResponseError):
            await store.get_object("k")
        with pytest.raises(CorruptResponseError):
            await store.get_partial_values([("k", None)])


async def test_a_ranged_call_answering_more_than_asked_raises() -> None:
    """``get_range_async`` answers bytes alone, so only their count can be checked: more
    than asked is another range than the one asked."""

    class WholeRanges(Misanswering):
        async def get_range_async(self, path: str, *, start: int, end: int) -> bytes:
            return bytes(await (await self.inner.get_async(path)).buffer_async())

    async with from_obspec(WholeRanges("honest"), ranged_reads=True) as store:
        await store.set("k", DATA)
        with pytest.raises(CorruptResponseError, match=r"\[10, 20\)"):
            await store.get("k", Range(10, 20))
        with pytest.raises(CorruptResponseError):
            await store.get_partial_values([("k", Range(2, 6)), ("k", Range(8, 9))])
        assert await store.get("k") == DATA  # a whole read: the whole object is asked


async def test_exact_and_clamped_answers_are_returned_as_they_are() -> None:
    async with from_obspec(Misanswering("honest")) as store:
        await store.set("k", DATA)
        for byte_range in [*RANGES, Range(1023, 1024)]:
            got = await store.get("k", byte_range)
            assert got is not None and bytes(got) == _want(byte_range)
        await store.set("empty", b"")
        assert await store.get("empty") == b""
