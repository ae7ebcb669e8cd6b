"""Conformance: reads, ranges, partial reads, conditional reads and key validation."""

from __future__ import annotations

import asyncio

import pytest

from asyncshard.errors import ConflictError, InvalidKeyError
from asyncshard.ranges import ByteRange, Offset, Range, Suffix
from tests.conformance.harness import Harness

DATA = bytes(range(256)) * 4  # 1024 bytes, every byte value
HOSTILE_KEYS = ["../x", "a/../../x", "/abs", "a//b", "a\\b", "a\x00b", "./a", "a/.", "a/", ""]


async def test_missing_key_reads_as_none(harness: Harness) -> None:
    await harness.seed({"present": b"x"})
    store = harness.store
    assert await store.get("absent") is None
    assert await store.get("absent", Range(0, 4)) is None
    assert await store.get_object("absent") is None
    assert await store.head("absent") is None
    assert not await store.exists("absent")
    assert await store.exists("present")


async def test_whole_object_and_metadata(harness: Harness) -> None:
    await harness.seed({"a/b/obj.bin": DATA, "empty": b""})
    store = harness.store
    assert bytes(await store.get("a/b/obj.bin") or b"") == DATA
    assert await store.get("empty") == b""
    meta = await store.head("a/b/obj.bin")
    assert meta is not None and meta.size == len(DATA) and meta.key == "a/b/obj.bin"
    result = await store.get_object("a/b/obj.bin", Range(10, 20))
    assert result is not None and result.meta.size == len(DATA)
    assert result.meta.version == meta.version


@pytest.mark.parametrize(
    ("byte_range", "expected"),
    [
        (Range(0, 10), DATA[0:10]),
        (Range(100, 356), DATA[100:356]),
        (Range(1000, 1024), DATA[1000:]),
        (Range(1000, 5000), DATA[1000:]),  # past the end: clamped
        (Offset(1000), DATA[1000:]),
        (Offset(0), DATA),
        (Suffix(24), DATA[-24:]),
        (Suffix(5000), DATA),  # longer than the object: whole object
    ],
    ids=repr,
)
async def test_range_forms(harness: Harness, byte_range: ByteRange, expected: bytes) -> None:
    await harness.seed({"obj": DATA})
    assert bytes(await harness.store.get("obj", byte_range) or b"x") == expected


@pytest.mark.parametrize(
    "byte_range", [Range(1024, 1100), Range(2000, 3000), Offset(1024), Offset(5000)], ids=repr
)
async def test_ranges_starting_at_or_past_the_end_are_empty(
    harness: Harness, byte_range: ByteRange
) -> None:
    await harness.seed({"obj": DATA})
    assert await harness.store.get("obj", byte_range) == b""


async def test_partial_values_keep_input_order(harness: Harness) -> None:
    await harness.seed({"a": DATA, "b": DATA[::-1]})
    pairs: list[tuple[str, ByteRange | None]] = [
        ("b", Range(0, 4)),
        ("a", Range(500, 510)),
        ("missing", Range(0, 4)),
        ("a", Range(0, 4)),
        ("a", Range(0, 4)),  # duplicate
        ("a", Range(2, 8)),  # overlapping
        ("b", Suffix(3)),
        ("a", Offset(1020)),
        ("a", Range(1020, 2000)),  # past the end inside a coalesced request
        ("b", None),
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


async def test_close_ranges_cost_one_request(harness: Harness) -> None:
    await harness.seed({"obj": DATA})
    store = harness.store
    ranges = [Range(0, 10), Range(20, 30), Range(40, 50), Range(60, 70)]
    values = await store.get_partial_values([("obj", r) for r in ranges])
    assert [bytes(v or b"") for v in values] == [DATA[r.start : r.end] for r in ranges]
    assert store.stats.requests["get"] == 1
    assert store.stats.bytes_fetched == 70
    assert store.stats.bytes_returned == 40


async def test_far_ranges_cost_one_request_each(harness: Harness) -> None:
    store = harness.store
    size = 3 * store.max_gap + 300
    blob = bytes(i % 251 for i in range(size))
    await harness.seed({"obj": blob})
    starts = [0, store.max_gap + 100, 2 * store.max_gap + 200]
    values = await store.get_partial_values([("obj", Range(s, s + 10)) for s in starts])
    assert [bytes(v or b"") for v in values] == [blob[s : s + 10] for s in starts]
    assert store.stats.requests["get"] == 3


async def test_whole_object_request_serves_every_range_of_its_key(harness: Harness) -> None:
    await harness.seed({"obj": DATA})
    store = harness.store
    values = await store.get_partial_values(
        [("obj", None), ("obj", Range(5, 9)), ("obj", Suffix(2)), ("obj", Offset(1022))]
    )
    assert [bytes(v or b"") for v in values] == [DATA, DATA[5:9], DATA[-2:], DATA[-2:]]
    assert store.stats.requests["get"] == 1


async def test_conditional_read(harness: Harness) -> None:
    await harness.seed({"obj": DATA})
    store = harness.store
    meta = await store.head("obj")
    assert meta is not None and meta.version
    result = await store.get_object("obj", Range(0, 4), if_match=meta.version)
    assert result is not None and bytes(result.data) == DATA[:4]
    with pytest.raises(ConflictError):
        await store.get_object("obj", Range(0, 4), if_match="not-the-version")
    with pytest.raises(ConflictError):
        await store.get_partial_values([("obj", Range(0, 4))], if_match={"obj": "stale"})


async def test_many_concurrent_reads(harness: Harness) -> None:
    objects = {f"c/{i}": bytes([i]) * 100 for i in range(50)}
    await harness.seed(objects)
    results = await asyncio.gather(*(harness.store.get(k, Range(0, 10)) for k in objects))
    assert [bytes(r or b"") for r in results] == [v[:10] for v in objects.values()]


async def test_unicode_and_space_keys(harness: Harness) -> None:
    await harness.seed({"dír/naïve key.bin": b"u"})
    assert await harness.store.get("dír/naïve key.bin") == b"u"


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=repr)
async def test_hostile_keys_rejected_on_reads(harness: Harness, key: str) -> None:
    store = harness.store
    with pytest.raises(InvalidKeyError):
        await store.get(key)
    with pytest.raises(InvalidKeyError):
        await store.head(key)
    with pytest.raises(InvalidKeyError):
        await store.exists(key)
    with pytest.raises(InvalidKeyError):
        await store.get_partial_values([("fine", None), (key, Range(0, 1))])
    assert store.stats.total_requests == 0
