"""Conformance: writes, conditional writes, partial writes, erasing and key validation."""

from __future__ import annotations

import asyncio

import pytest

from asyncshard.errors import ConflictError, InvalidKeyError
from asyncshard.testing.base import ConformanceBase
from asyncshard.testing.harness import Harness
from asyncshard.testing.reads import HOSTILE_KEYS

__all__ = ["WriteConformance"]


def _selective_prefix(keys: list[str]) -> str:
    """A string prefix of some of ``keys`` but not all: one key less its last character
    where that is selective, else a whole key."""
    for key in keys:
        if not all(other.startswith(key[:-1]) for other in keys):
            return key[:-1]
    return keys[0]


class WriteConformance(ConformanceBase):
    """Writes: skipped on read-only stores (and conditions on stores ignoring them)."""

    async def test_set_get_overwrite(self, writable: Harness) -> None:
        store, key = writable.store, writable.key("a/b")
        v1 = await store.set(key, b"one")
        assert await store.get(key) == b"one"
        v2 = await store.set(key, bytearray(b"two!"))
        assert await store.get(key) == b"two!"
        meta = await store.head(key)
        assert meta is not None and meta.size == 4
        if v1 is not None:
            assert v1 != v2 and meta.version == v2

    async def test_set_from_memoryview_and_empty_value(self, writable: Harness) -> None:
        store, mv, empty = writable.store, writable.key("mv"), writable.key("empty")
        await store.set(mv, memoryview(b"0123456789")[2:5])
        assert await store.get(mv) == b"234"
        await store.set(empty, b"")
        assert await store.get(empty) == b""
        assert await store.exists(empty)

    async def test_many_concurrent_writes(self, writable: Harness) -> None:
        store = writable.store
        objects = {writable.key(f"w/{i}"): bytes([i]) * (10 + i) for i in range(50)}
        await asyncio.gather(*(store.set(k, v) for k, v in objects.items()))
        values = await store.get_partial_values([(k, None) for k in objects])
        assert [bytes(v or b"") for v in values] == list(objects.values())

    async def test_write_counts(self, writable: Harness) -> None:
        store = writable.store
        store.stats.reset()
        await store.set(writable.key("k"), b"12345")
        assert store.stats.requests["put"] == writable.count(requests=1, operations=1)
        assert store.stats.bytes_written == 5

    async def test_create_only_conflicts_when_present(self, conditional: Harness) -> None:
        store, key = conditional.store, conditional.key("k")
        await store.set(key, b"first", if_absent=True)
        with pytest.raises(ConflictError):
            await store.set(key, b"second", if_absent=True)
        assert await store.get(key) == b"first"

    async def test_stale_version_conflicts_and_overwrites_nothing(
        self, conditional: Harness
    ) -> None:
        store, key = conditional.store, conditional.key("k")
        never = conditional.key("never-written")
        await store.set(key, b"v1")
        meta1 = await store.head(key)
        assert meta1 is not None and meta1.version
        await store.set(key, b"v2", if_match=meta1.version)
        with pytest.raises(ConflictError):
            await store.set(key, b"v3", if_match=meta1.version)
        assert await store.get(key) == b"v2"
        with pytest.raises(ConflictError):
            await store.set(never, b"x", if_match=meta1.version)
        assert await store.get(never) is None

    async def test_versions_that_pin_bytes_differ_for_other_bytes(
        self, conditional: Harness
    ) -> None:
        """A version the store says pins the bytes never names other bytes: not after an
        overwrite, nor after a delete and a new write of the same size."""
        store, key = conditional.store, conditional.key("k")
        seen: dict[str, bytes] = {}
        for value in (b"aaaa", b"bbbb", b"cccc"):
            version = await store.set(key, value)
            if version is None:
                meta = await store.head(key)
                version = None if meta is None else meta.version
            if version is not None and store.version_pins_bytes(version):
                assert seen.setdefault(version, value) == value
            await store.erase_values([key])

    async def test_concurrent_conditional_writes_have_one_winner(
        self, conditional: Harness
    ) -> None:
        store, held, fresh = conditional.store, conditional.key("k"), conditional.key("fresh")
        await store.set(held, b"start")
        meta = await store.head(held)
        assert meta is not None and meta.version

        async def writers(key: str, version: str | None) -> list[bytes]:
            """Eight concurrent conditional writes of ``key``: the values that landed."""

            async def write(n: int) -> bytes | None:
                value = f"writer {n}".encode()
                try:
                    await store.set(key, value, if_match=version, if_absent=version is None)
                except ConflictError:
                    return None
                return value

            return [v for v in await asyncio.gather(*map(write, range(8))) if v is not None]

        # compare-and-swap: of writers holding one version, exactly one replaces it
        won = await writers(held, meta.version)
        assert len(won) == 1 and await store.get(held) == won[0]
        won = await writers(fresh, None)  # create-only: exactly one creates it
        assert len(won) == 1 and await store.get(fresh) == won[0]

    async def test_partial_values_patch_grouped_per_key(self, writable: Harness) -> None:
        store, a, b = writable.store, writable.key("a"), writable.key("b")
        await store.set(a, b"0123456789")
        store.stats.reset()
        await store.set_partial_values(
            [(a, 2, b"xx"), (b, 3, b"new"), (a, 8, b"YYYY"), (a, 0, b"z")]
        )
        assert await store.get(a) == b"z1xx4567YYYY"
        assert await store.get(b) == b"\x00\x00\x00new"  # gap before the run is zero-filled
        # one write per object; one logical write per key
        assert store.stats.requests["put"] == writable.count(requests=2, operations=2)

    async def test_concurrent_partial_writes_lose_nothing(self, conditional: Harness) -> None:
        store, key = conditional.store, conditional.key("shared")
        await store.set(key, bytes(64))

        async def writer(slot: int) -> None:
            for j in range(4):
                await store.set_partial_values([(key, slot * 8 + j, bytes([slot + 1]))])

        await asyncio.gather(*(writer(s) for s in range(8)))
        value = await store.get(key)
        assert value is not None
        assert bytes(value) == b"".join(bytes([s + 1]) * 4 + bytes(4) for s in range(8))

    async def test_copy(self, writable: Harness) -> None:
        store, key = writable.store, writable.key
        source, target, fresh = key("s/a"), key("t/b"), key("t/new/c")
        await store.set(source, b"source bytes")
        await store.set(target, b"old")
        store.stats.reset()
        assert await store.copy(source, target) == 12  # replaces the target
        assert await store.copy(source, fresh) == 12
        assert store.stats.requests["copy"] == 2
        assert await store.copy(key("s/missing"), key("t/x")) is None
        assert await store.get(target) == b"source bytes" == await store.get(fresh)
        await store.set(target, b"changed")  # a copy is independent of its source
        assert await store.get(source) == b"source bytes"
        assert await store.get(key("t/x")) is None
        pairs = [(source, key("m/1")), (key("s/missing"), key("m/2")), (fresh, key("m/3"))]
        assert await store.copy_many(pairs) == [12, None, 12]
        assert [await store.get(t) for _, t in pairs] == [b"source bytes", None, b"source bytes"]
        with pytest.raises(ValueError, match="duplicate"):
            await store.copy_many([(source, key("m/1")), (fresh, key("m/1"))])

    async def test_erase_values_and_missing_keys(self, writable: Harness) -> None:
        store, key = writable.store, writable.key
        await store.set(key("x/1"), b"1")
        await store.set(key("x/2"), b"2")
        await store.erase_values([key("x/1"), key("not/there")])
        assert await store.get(key("x/1")) is None
        assert await store.get(key("x/2")) == b"2"
        await store.erase_values([])
        if store.supports_listing:  # nothing erased lingers in listings
            listed = sorted([k async for k in store.list()])
            assert listed == sorted({key("x/2"), *writable.present_keys})

    async def test_prune_keeps_every_object(self, writable: Harness) -> None:
        """``prune`` removes no object: it only removes folders that hold none, where a
        store has folders (a prefix naming an object, or nothing, is fine too)."""
        store = writable.store
        keys = [writable.key(k) for k in ["p/a", "p/b/c", "p/b/d", "pq", "other"]]
        for key in keys:
            await store.set(key, key.encode())
        await store.erase_values([keys[1]])
        listed = sorted([k async for k in store.list()]) if store.supports_listing else None
        await store.prune("")
        await store.prune(keys[0])  # an object, not a folder
        await store.prune(writable.key("nothing/here"))
        for key in keys:
            got = await store.get(key)
            assert (None if got is None else bytes(got)) == (
                None if key == keys[1] else key.encode()
            )
        if listed is not None:
            assert sorted([k async for k in store.list()]) == listed

    async def test_erase_prefix(self, writable: Harness) -> None:
        store = writable.store
        keys = [writable.key(k) for k in ["p/a", "p/b/c", "p/b/d", "pq", "other"]]
        for key in keys:
            await store.set(key, b".")
        # a folder of the test tree, or (other mappings) a string prefix of some keys only
        prefix = writable.prefix("p/") if writable.structured else _selective_prefix(keys)
        kept = [not k.startswith(prefix) for k in keys]
        assert any(kept) and not all(kept)
        await store.erase_prefix(prefix)
        assert [await store.exists(k) for k in keys] == kept
        await store.erase_prefix("")
        assert not any([await store.exists(k) for k in keys])
        if store.supports_listing:
            assert [k async for k in store.list()] == []

    @pytest.mark.parametrize("key", HOSTILE_KEYS, ids=repr)
    async def test_hostile_keys_rejected_on_writes(self, writable: Harness, key: str) -> None:
        store = writable.store
        with pytest.raises(InvalidKeyError):
            await store.set(key, b"x")
        with pytest.raises(InvalidKeyError):
            await store.set_partial_values([(key, 0, b"x")])
        with pytest.raises(InvalidKeyError):
            await store.erase_values([writable.key("fine"), key])
        assert store.stats.total_requests == 0

    async def test_conditional_delete(self, writable: Harness) -> None:
        store, key = writable.store, writable.key("k")
        if not store.supports_conditional_deletes:
            pytest.skip(f"{store!r} has no conditional deletes (a capability it does not claim)")
        await store.set(key, b"1")
        old = await store.head(key)
        await store.set(key, b"2")
        assert old is not None and old.version
        with pytest.raises(ConflictError):
            await store.erase_if_match(key, old.version)
        assert await store.get(key) == b"2"
        current = await store.head(key)
        assert current is not None and current.version
        await store.erase_if_match(key, current.version)
        assert await store.get(key) is None
        with pytest.raises(ConflictError):
            await store.erase_if_match(key, current.version)  # gone: a conflict too
