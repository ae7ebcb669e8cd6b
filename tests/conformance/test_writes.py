"""Conformance: writes, conditional writes, partial writes, erasing and key validation."""

from __future__ import annotations

import asyncio

import pytest

from asyncshard.errors import ConflictError, InvalidKeyError
from tests.conformance.harness import Harness
from tests.conformance.test_reads import HOSTILE_KEYS


@pytest.fixture
def conditional(writable: Harness) -> Harness:
    """Writable stores that honour write conditions; others are skipped, saying why."""
    if not writable.store.supports_conditional_writes:
        pytest.skip(f"{writable.store!r} ignores write conditions ({', '.join(writable.quirks)})")
    return writable


async def test_set_get_overwrite(writable: Harness) -> None:
    store = writable.store
    v1 = await store.set("a/b", b"one")
    assert await store.get("a/b") == b"one"
    v2 = await store.set("a/b", bytearray(b"two!"))
    assert await store.get("a/b") == b"two!"
    meta = await store.head("a/b")
    assert meta is not None and meta.size == 4
    if v1 is not None:
        assert v1 != v2 and meta.version == v2


async def test_set_from_memoryview_and_empty_value(writable: Harness) -> None:
    store = writable.store
    await store.set("mv", memoryview(b"0123456789")[2:5])
    assert await store.get("mv") == b"234"
    await store.set("empty", b"")
    assert await store.get("empty") == b""
    assert await store.exists("empty")


async def test_write_counts(writable: Harness) -> None:
    store = writable.store
    store.stats.reset()
    await store.set("k", b"12345")
    assert store.stats.requests["put"] == 1 and store.stats.bytes_written == 5


async def test_create_only_conflicts_when_present(conditional: Harness) -> None:
    store = conditional.store
    await store.set("k", b"first", if_absent=True)
    with pytest.raises(ConflictError):
        await store.set("k", b"second", if_absent=True)
    assert await store.get("k") == b"first"


async def test_stale_version_conflicts_and_overwrites_nothing(conditional: Harness) -> None:
    store = conditional.store
    await store.set("k", b"v1")
    meta1 = await store.head("k")
    assert meta1 is not None and meta1.version
    await store.set("k", b"v2", if_match=meta1.version)
    with pytest.raises(ConflictError):
        await store.set("k", b"v3", if_match=meta1.version)
    assert await store.get("k") == b"v2"
    with pytest.raises(ConflictError):
        await store.set("never-written", b"x", if_match=meta1.version)
    assert await store.get("never-written") is None


async def test_partial_values_patch_grouped_per_key(writable: Harness) -> None:
    store = writable.store
    await store.set("a", b"0123456789")
    store.stats.reset()
    await store.set_partial_values(
        [("a", 2, b"xx"), ("b", 3, b"new"), ("a", 8, b"YYYY"), ("a", 0, b"z")]
    )
    assert await store.get("a") == b"z1xx4567YYYY"
    assert await store.get("b") == b"\x00\x00\x00new"  # gap before the run is zero-filled
    assert store.stats.requests["put"] == 2  # one write per object


async def test_concurrent_partial_writes_lose_nothing(conditional: Harness) -> None:
    store = conditional.store
    await store.set("shared", bytes(64))

    async def writer(slot: int) -> None:
        for j in range(4):
            await store.set_partial_values([("shared", slot * 8 + j, bytes([slot + 1]))])

    await asyncio.gather(*(writer(s) for s in range(8)))
    value = await store.get("shared")
    assert value is not None
    assert bytes(value) == b"".join(bytes([s + 1]) * 4 + bytes(4) for s in range(8))


async def test_erase_values_and_missing_keys(writable: Harness) -> None:
    store = writable.store
    await store.set("x/1", b"1")
    await store.set("x/2", b"2")
    await store.erase_values(["x/1", "not/there"])
    assert await store.get("x/1") is None
    assert await store.get("x/2") == b"2"
    await store.erase_values([])


async def test_erase_prefix(writable: Harness) -> None:
    store = writable.store
    for key in ["p/a", "p/b/c", "p/b/d", "pq", "other"]:
        await store.set(key, b".")
    await store.erase_prefix("p/")
    assert [await store.exists(k) for k in ["p/a", "p/b/c", "pq", "other"]] == [
        False,
        False,
        True,
        True,
    ]
    await store.erase_prefix("")
    assert not await store.exists("other")


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=repr)
async def test_hostile_keys_rejected_on_writes(writable: Harness, key: str) -> None:
    store = writable.store
    with pytest.raises(InvalidKeyError):
        await store.set(key, b"x")
    with pytest.raises(InvalidKeyError):
        await store.set_partial_values([(key, 0, b"x")])
    with pytest.raises(InvalidKeyError):
        await store.erase_values(["fine", key])
    assert store.stats.total_requests == 0


async def test_conditional_delete(writable: Harness) -> None:
    store = writable.store
    if not store.supports_conditional_deletes:
        pytest.skip(f"{store!r} has no conditional deletes; sharded stores write empty shards")
    await store.set("k", b"1")
    old = await store.head("k")
    await store.set("k", b"2")
    assert old is not None and old.version
    with pytest.raises(ConflictError):
        await store.delete_if_match("k", old.version)
    assert await store.get("k") == b"2"
    current = await store.head("k")
    assert current is not None and current.version
    await store.delete_if_match("k", current.version)
    assert await store.get("k") is None
    with pytest.raises(ConflictError):
        await store.delete_if_match("k", current.version)  # gone: a conflict too
