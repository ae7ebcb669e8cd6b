"""to_obspec: obspec's semantics over asyncshard stores, and what an obspec reader of a
sharded view costs."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from obspec import exceptions as obspec_errors

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.obspec import from_obspec, is_obspec_client, to_obspec
from asyncshard.store import Store
from tests.zarr.helpers import array_doc, chunk_bytes, sharded


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "root")


async def test_get_head_and_ranges(store: Store) -> None:
    client = to_obspec(store)
    await store.set("a/obj", b"0123456789")
    result = await client.get_async("a/obj")
    assert bytes(await result.buffer_async()) == b"0123456789"
    assert result.range == (0, 10) and result.attributes == {}
    meta = result.meta
    assert meta["path"] == "a/obj" and meta["size"] == 10 and meta["e_tag"]
    assert (await client.head_async("a/obj"))["e_tag"] == meta["e_tag"]
    cases = {
        (2, 5): (b"234", (2, 5)),
        (8, 20): (b"89", (8, 10)),
    }
    for spec, (data, span) in cases.items():
        got = await client.get_async("a/obj", options={"range": spec})
        assert (bytes(await got.buffer_async()), got.range) == (data, span)
    got = await client.get_async("a/obj", options={"range": {"suffix": 3}})
    assert (bytes(await got.buffer_async()), got.range) == (b"789", (7, 10))
    got = await client.get_async("a/obj", options={"range": {"offset": 7}})
    assert (bytes(await got.buffer_async()), got.range) == (b"789", (7, 10))
    assert b"".join([bytes(c) async for c in await client.get_async("a/obj")]) == b"0123456789"
    assert bytes(await client.get_range_async("a/obj", start=1, end=3)) == b"12"
    assert bytes(await client.get_range_async("a/obj", start=1, length=3)) == b"123"
    parts = await client.get_ranges_async("a/obj", starts=[0, 5], lengths=[2, 2])
    assert [bytes(p) for p in parts] == [b"01", b"56"]
    head_only = await client.get_async("a/obj", options={"head": True})
    assert head_only.meta["size"] == 10 and bytes(await head_only.buffer_async()) == b""


async def test_missing_objects_and_failed_conditions_raise_obspec_errors(store: Store) -> None:
    client = to_obspec(store)
    for call in (
        client.get_async("nope"),
        client.head_async("nope"),
        client.get_range_async("nope", start=0, end=1),
        client.get_ranges_async("nope", starts=[0], ends=[1]),
    ):
        with pytest.raises(FileNotFoundError):
            await call
    first = await client.put_async("k", b"v1")
    assert first["e_tag"]
    with pytest.raises(obspec_errors.PreconditionError):
        await client.get_async("k", options={"if_match": "stale"})
    with pytest.raises(obspec_errors.NotModifiedError):
        await client.get_async("k", options={"if_none_match": first["e_tag"]})
    past = datetime.now(UTC) - timedelta(days=1)
    with pytest.raises(obspec_errors.PreconditionError):
        await client.get_async("k", options={"if_unmodified_since": past})
    future = datetime.now(UTC) + timedelta(days=1)
    with pytest.raises(obspec_errors.NotModifiedError):
        await client.get_async("k", options={"if_modified_since": future})
    with pytest.raises(obspec_errors.NotSupportedError):
        await client.get_async("k", options={"version": "1"})


async def test_put_modes_map_to_conditional_writes(store: Store) -> None:
    client = to_obspec(store)
    created = await client.put_async("k", b"one", mode="create")
    with pytest.raises(obspec_errors.AlreadyExistsError):
        await client.put_async("k", b"two", mode="create")
    updated = await client.put_async("k", io.BytesIO(b"two"), mode={"e_tag": created["e_tag"]})
    with pytest.raises(obspec_errors.PreconditionError):
        await client.put_async("k", b"three", mode={"e_tag": created["e_tag"]})
    assert await store.get("k") == b"two" and updated["e_tag"] != created["e_tag"]
    await client.put_async("parts", [b"ab", memoryview(b"cd")])
    assert await store.get("parts") == b"abcd"
    with pytest.raises(obspec_errors.NotSupportedError):  # never dropped silently
        await client.put_async("k", b"x", tags={"a": "b"})
    assert await store.get("k") == b"two"


async def test_listing_delete_copy_rename(store: Store) -> None:
    client = to_obspec(store)
    for key in ("d/a", "d/b", "d/sub/c", "dx"):
        await client.put_async(key, key.encode())
    chunks = [chunk async for chunk in client.list_async("d")]
    assert sorted(m["path"] for c in chunks for m in c) == ["d/a", "d/b", "d/sub/c"]
    after = [m["path"] async for c in client.list_async("d", offset="d/a") for m in c]
    assert sorted(after) == ["d/b", "d/sub/c"]
    listed = await client.list_with_delimiter_async("d")
    assert listed["common_prefixes"] == ["d/sub"]
    assert sorted(m["path"] for m in listed["objects"]) == ["d/a", "d/b"]
    await client.copy_async("d/a", "e/a")
    with pytest.raises(obspec_errors.AlreadyExistsError):
        await client.copy_async("d/b", "e/a", overwrite=False)
    await client.rename_async("d/b", "e/b")
    assert await store.get("e/b") == b"d/b" and await store.get("d/b") is None
    await client.delete_async(["e/a", "e/b"])
    await client.delete_async("dx")
    assert [k async for k in store.list_prefix("e/")] == [] and not await store.exists("dx")


def test_synchronous_twins(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "root")
    client = to_obspec(store)
    client.put("k", b"0123456789")
    assert bytes(client.get("k").buffer()) == b"0123456789"
    assert bytes(client.get_range("k", start=2, end=4)) == b"23"
    assert [bytes(p) for p in client.get_ranges("k", starts=[0, 8], ends=[1, 10])] == [
        b"0",
        b"89",
    ]
    assert client.head("k")["size"] == 10
    assert [m["path"] for chunk in client.list() for m in chunk] == ["k"]
    client.copy("k", "k2")
    client.rename("k2", "k3")
    assert client.list_with_delimiter()["objects"][0]["path"] in ("k", "k3")
    client.delete(["k", "k3"])
    assert list(client.list()) == []


async def test_an_obspec_reader_of_a_sharded_view_pays_the_sharded_budget() -> None:
    """Inner chunks read through obspec: 2 requests cold (index, data), 1 warm, and one
    coalesced request for many chunks of one shard."""
    inner = MemoryStore()
    doc = array_doc([16, 16], [8, 8], [4, 4])
    view = await sharded(inner, doc)
    chunks = {(i, j): chunk_bytes((i, j), 16) for i in range(2) for j in range(2)}
    await view.set_values({f"arr/c/{i}/{j}": data for (i, j), data in chunks.items()})
    view2 = await sharded(inner, doc)  # a fresh index cache
    client = to_obspec(view2)
    inner.stats.reset()
    assert bytes(await client.get_range_async("arr/c/0/0", start=0, end=16)) == chunks[0, 0]
    assert inner.stats.requests["get"] == 2  # the index, then the chunk
    inner.stats.reset()
    assert bytes(await client.get_range_async("arr/c/0/1", start=0, end=16)) == chunks[0, 1]
    assert inner.stats.requests["get"] == 1  # the index is cached
    inner.stats.reset()
    parts = await client.get_ranges_async("arr/c/1/1", starts=[0, 8], ends=[8, 16])
    assert b"".join(bytes(p) for p in parts) == chunks[1, 1]
    assert inner.stats.requests["get"] == 1


def test_is_obspec_client() -> None:
    import obstore.store

    assert is_obspec_client(obstore.store.MemoryStore())
    assert is_obspec_client(to_obspec(MemoryStore()))
    assert not is_obspec_client(MemoryStore()) and not is_obspec_client("s3://bucket")
    with pytest.raises(TypeError, match="not an obspec client"):
        from_obspec(object())


async def test_open_store_takes_an_obspec_client() -> None:
    import obstore.store

    from asyncshard.backends import open_store

    async with open_store(obstore.store.MemoryStore()) as store:
        await store.set("k", b"v", if_absent=True)
        assert await store.get("k") == b"v" and store.stats.requests["put"] == 1
    with pytest.raises(TypeError, match="obspec client"):
        open_store(42)
