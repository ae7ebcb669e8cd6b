"""Conformance: reads, ranges, partial reads, conditional reads and key validation."""

from __future__ import annotations

import asyncio

import pytest

from asyncshard.errors import ConflictError, InvalidKeyError
from asyncshard.ranges import ByteRange, Offset, Range, Suffix
from asyncshard.store import WOULD_WAIT, GetResult, WouldWait
from asyncshard.testing.base import ConformanceBase
from asyncshard.testing.harness import Harness

__all__ = ["DATA", "HOSTILE_KEYS", "ReadConformance"]

DATA = bytes(range(256)) * 4  # 1024 bytes, every byte value
#: Keys every store must refuse with ``InvalidKeyError`` before any I/O (never mapped).
HOSTILE_KEYS = ["../x", "a/../../x", "/abs", "a//b", "a\\b", "a\x00b", "./a", "a/.", "a/", ""]


class ReadConformance(ConformanceBase):
    """Reads: every store runs these."""

    async def test_missing_key_reads_as_none(self, harness: Harness) -> None:
        await harness.seed({"present": b"x"})
        store, absent = harness.store, harness.key("absent")
        assert await store.get(absent) is None
        assert await store.get(absent, Range(0, 4)) is None
        assert await store.get_object(absent) is None
        assert await store.head(absent) is None
        assert not await store.exists(absent)
        assert await store.exists(harness.key("present"))

    async def test_whole_object_and_metadata(self, harness: Harness) -> None:
        await harness.seed({"a/b/obj.bin": DATA, "empty": b""})
        store, key = harness.store, harness.key("a/b/obj.bin")
        assert bytes(await store.get(key) or b"") == DATA
        assert await store.get(harness.key("empty")) == b""
        meta = await store.head(key)
        assert meta is not None and meta.size == len(DATA) and meta.key == key
        result = await store.get_object(key, Range(10, 20))
        assert result is not None and result.meta.size == len(DATA)
        assert result.meta.version == meta.version

    @pytest.mark.parametrize(
        ("byte_range", "expected"),
        [
            pytest.param(rng, expected, id=repr(rng))
            for rng, expected in [
                (Range(0, 10), DATA[0:10]),
                (Range(100, 356), DATA[100:356]),
                (Range(1000, 1024), DATA[1000:]),
                (Range(1000, 5000), DATA[1000:]),  # past the end: clamped
                (Offset(1000), DATA[1000:]),
                (Offset(0), DATA),
                (Suffix(24), DATA[-24:]),
                (Suffix(5000), DATA),  # longer than the object: whole object
            ]
        ],
    )
    async def test_range_forms(
        self, harness: Harness, byte_range: ByteRange, expected: bytes
    ) -> None:
        await harness.seed({"obj": DATA})
        assert bytes(await harness.store.get(harness.key("obj"), byte_range) or b"x") == expected

    @pytest.mark.parametrize(
        "byte_range", [Range(1024, 1100), Range(2000, 3000), Offset(1024), Offset(5000)], ids=repr
    )
    async def test_ranges_starting_at_or_past_the_end_are_empty(
        self, harness: Harness, byte_range: ByteRange
    ) -> None:
        await harness.seed({"obj": DATA})
        assert await harness.store.get(harness.key("obj"), byte_range) == b""

    async def test_partial_values_keep_input_order(self, harness: Harness) -> None:
        await harness.seed({"a": DATA, "b": DATA[::-1]})
        a, b = harness.key("a"), harness.key("b")
        pairs: list[tuple[str, ByteRange | None]] = [
            (b, Range(0, 4)),
            (a, Range(500, 510)),
            (harness.key("missing"), Range(0, 4)),
            (a, Range(0, 4)),
            (a, Range(0, 4)),  # duplicate
            (a, Range(2, 8)),  # overlapping
            (b, Suffix(3)),
            (a, Offset(1020)),
            (a, Range(1020, 2000)),  # past the end inside a coalesced request
            (b, None),
        ]
        values = await harness.store.get_partial_values(pairs)
        expected = [
            DATA[::-1][0:4],
            DATA[500:510],
            None,
            DATA[0:4],
            DATA[0:4],
            DATA[2:8],
            DATA[::-1][-3:],
            DATA[1020:],
            DATA[1020:],
            DATA[::-1],
        ]
        assert [None if v is None else bytes(v) for v in values] == expected

    async def test_close_ranges_cost_one_request(self, harness: Harness) -> None:
        await harness.seed({"obj": DATA})
        store, key = harness.store, harness.key("obj")
        ranges = [Range(0, 10), Range(20, 30), Range(40, 50), Range(60, 70)]
        values = await store.get_partial_values([(key, r) for r in ranges])
        assert [bytes(v or b"") for v in values] == [DATA[r.start : r.end] for r in ranges]
        assert store.stats.requests["get"] == harness.count(requests=1, operations=1)
        # a backend fetched the gaps too; a wrapper fetched nothing itself
        assert store.stats.bytes_fetched == harness.count(requests=70, operations=0)
        assert store.stats.bytes_returned == 40

    async def test_far_ranges_cost_one_request_each(self, harness: Harness) -> None:
        store, key = harness.store, harness.key("obj")
        size = 3 * store.max_gap + 300
        blob = bytes(i % 251 for i in range(size))
        await harness.seed({"obj": blob})
        starts = [0, store.max_gap + 100, 2 * store.max_gap + 200]
        values = await store.get_partial_values([(key, Range(s, s + 10)) for s in starts])
        assert [bytes(v or b"") for v in values] == [blob[s : s + 10] for s in starts]
        assert store.stats.requests["get"] == harness.count(requests=3, operations=1)

    async def test_whole_object_request_serves_every_range_of_its_key(
        self, harness: Harness
    ) -> None:
        await harness.seed({"obj": DATA})
        store, key = harness.store, harness.key("obj")
        values = await store.get_partial_values(
            [(key, None), (key, Range(5, 9)), (key, Suffix(2)), (key, Offset(1022))]
        )
        assert [bytes(v or b"") for v in values] == [DATA, DATA[5:9], DATA[-2:], DATA[-2:]]
        assert store.stats.requests["get"] == harness.count(requests=1, operations=1)

    async def test_conditional_read(self, harness: Harness) -> None:
        await harness.seed({"obj": DATA})
        store, key = harness.store, harness.key("obj")
        meta = await store.head(key)
        assert meta is not None and meta.version
        result = await store.get_object(key, Range(0, 4), if_match=meta.version)
        assert result is not None and bytes(result.data) == DATA[:4]
        with pytest.raises(ConflictError):
            await store.get_object(key, Range(0, 4), if_match="not-the-version")
        with pytest.raises(ConflictError):
            await store.get_partial_values([(key, Range(0, 4))], if_match={key: "stale"})

    async def test_many_concurrent_reads(self, harness: Harness) -> None:
        objects = {f"c/{i}": bytes([i]) * 100 for i in range(50)}
        await harness.seed(objects)
        store = harness.store

        async def read(n: int, key: str) -> bytes:
            for _ in range(n % 3):  # reads start in three event-loop ticks
                await asyncio.sleep(0)
            return bytes(await store.get(harness.key(key), Range(0, 10)) or b"")

        results = await asyncio.gather(*(read(n, k) for n, k in enumerate(objects)))
        assert results == [v[:10] for v in objects.values()]

    async def test_unicode_and_space_keys(self, harness: Harness) -> None:
        await harness.seed({"dír/naïve key.bin": b"u"})
        assert await harness.store.get(harness.key("dír/naïve key.bin")) == b"u"

    @pytest.mark.parametrize("key", HOSTILE_KEYS, ids=repr)
    async def test_hostile_keys_rejected_on_reads(self, harness: Harness, key: str) -> None:
        store = harness.store
        with pytest.raises(InvalidKeyError):
            await store.get(key)
        with pytest.raises(InvalidKeyError):
            await store.head(key)
        with pytest.raises(InvalidKeyError):
            await store.exists(key)
        with pytest.raises(InvalidKeyError):
            await store.get_partial_values([(harness.key("fine"), None), (key, Range(0, 1))])
        assert store.stats.total_requests == 0

    async def test_get_now_answers_like_get_object_or_declines(self, harness: Harness) -> None:
        """``get_now`` gives ``get_object``'s answer, counted like it, or ``WOULD_WAIT``
        (nothing counted); it sees a replaced object at once."""
        await harness.seed({"obj": DATA})
        store, key = harness.store, harness.key("obj")
        for rng in [None, Range(10, 20), Suffix(24), Offset(1000), Range(2000, 3000)]:
            before = store.stats.requests["get"]
            now = store.get_now(key, rng)
            if isinstance(now, WouldWait):
                assert store.stats.requests["get"] == before
                continue
            assert store.stats.requests["get"] == before + 1
            expected = await store.get_object(key, rng)
            assert now is not None and expected is not None
            assert bytes(now.data) == bytes(expected.data)
            assert (now.meta.key, now.meta.size) == (key, len(DATA))
            assert now.meta.version == expected.meta.version
        assert store.get_now(harness.key("absent")) in (None, WOULD_WAIT)
        meta = await store.head(key)
        assert meta is not None
        before = store.stats.requests["get"]
        with pytest.raises(ConflictError):
            if store.get_now(key, Range(0, 4), if_match="not-the-version") is WOULD_WAIT:
                before -= 1  # declined: nothing counted
                raise ConflictError("declined", key=key)
        assert store.stats.requests["get"] == before + 1, "a failed read counts as get_object's"
        await harness.seed({"obj": DATA[::-1]})  # replaced: seen at once
        for _ in range(2):
            now = store.get_now(key, Range(0, 4))
            if not isinstance(now, WouldWait):
                assert now is not None and bytes(now.data) == DATA[::-1][:4]
        for hostile in HOSTILE_KEYS:
            with pytest.raises(InvalidKeyError):
                store.get_now(hostile)

    async def test_head_now_answers_like_head_or_declines(self, harness: Harness) -> None:
        """``head_now`` gives ``head``'s answer, counted like it, or ``WOULD_WAIT``
        (nothing counted; always so without ``supports_head_now``); it never vouches for
        a replaced object."""
        await harness.seed({"obj": DATA})
        store, key = harness.store, harness.key("obj")
        await store.get(key)  # a store may answer only for objects it has read
        store.get_now(key)
        for _ in range(2):
            before = store.stats.requests["head"]
            now = store.head_now(key)
            if isinstance(now, WouldWait):
                assert store.stats.requests["head"] == before
                continue
            assert store.supports_head_now
            assert store.stats.requests["head"] == before + 1
            meta = await store.head(key)
            assert now is not None and meta is not None
            assert (now.key, now.size, now.version) == (key, len(DATA), meta.version)
        assert store.head_now(harness.key("absent")) in (None, WOULD_WAIT)
        old = await store.head(key)
        read = store.get_now(key)
        await harness.seed({"obj": DATA[::-1]})  # replaced, the same size
        new = await store.head(key)
        assert old is not None and new is not None
        now = store.head_now(key)
        if not isinstance(now, WouldWait):
            assert now is not None and now.version == new.version != old.version
            # the metadata object of a read vouches for its bytes: never after a change
            assert not isinstance(read, GetResult) or now is not read.meta
        for hostile in HOSTILE_KEYS:
            with pytest.raises(InvalidKeyError):
                store.head_now(hostile)
