"""walk_keys and list_keys on real servers: pages of 1,000 keys, folders listed one
request each."""

from __future__ import annotations

import pytest

from asyncshard.errors import UnsupportedOperationError
from asyncshard.walk import list_keys, walk_keys
from tests.cloud.conftest import Backend

#: More keys in one folder than one page of a listing holds (1,000 on S3).
FLAT = [f"flat/c.{i}" for i in range(1_100)]
NESTED = [f"nested/c/{i}/{j}" for i in range(20) for j in range(60)]  # 20 folders


async def refused(backend: Backend) -> None:
    """Plain HTTP lists nothing: walk_keys, list_keys and erase_prefix refuse, typed."""
    backend.reset_log()
    for call in (walk_keys, list_keys):
        with pytest.raises(UnsupportedOperationError, match="listing"):
            await call(backend.store, "nested/")
    with pytest.raises(UnsupportedOperationError, match="listing"):
        await backend.store.erase_prefix("nested/")
    assert backend.server_log() == []


async def test_walk_keys_on_object_stores(backend: Backend) -> None:
    store = backend.store
    if backend.name == "http":  # plain HTTP has no listing: a clear refusal, no request
        await refused(backend)
        return
    await store.set_many([(k, b"x") for k in [*FLAT, *NESTED, "nested/zarr.json"]])
    for folder, expected in [("flat/", FLAT), ("nested/", [*NESTED, "nested/zarr.json"])]:
        backend.reset_log()
        store.stats.reset()
        walked = await walk_keys(store, folder)
        pages = [p for m, p, _ in backend.server_log() if m == "GET"]
        assert sorted(walked) == sorted(expected)
        assert sorted(walked) == sorted([k async for k in store.list_prefix(folder)])
        if folder == "flat/":  # one list_dir, of two pages
            assert store.stats.requests["list"] - 1 == 1 and len(pages) == 2
        else:  # list_dir of nested/ and c/ (20 folders >= 16), then one per folder
            assert store.stats.requests["list"] - 1 == 2 + 20 == len(pages)


async def test_list_keys_and_erase_prefix_on_object_stores(backend: Backend) -> None:
    """A folder its first page holds: one listing, or the walk where that answers
    first. A larger one: the walk, beside one page. ``erase_prefix`` lists with
    ``list_keys`` and deletes everything it listed."""
    store = backend.store
    if backend.name == "http":  # plain HTTP has no listing: a clear refusal, no request
        await refused(backend)
        return
    small = [f"small/c/{i}/{j}" for i in range(20) for j in range(3)]
    await store.set_many([(k, b"x") for k in [*small, *NESTED]])
    store.stats.reset()
    assert sorted(await list_keys(store, "small/")) == sorted(small)
    # the walk stops when the listing answers; on servers that keep folders (SeaweedFS,
    # rclone) a whole nested listing is slower than list_dir, and the walk may finish
    assert 1 <= store.stats.requests["list"] <= 1 + 2 + 20
    store.stats.reset()
    assert sorted(await list_keys(store, "nested/")) == sorted(NESTED)
    assert store.stats.requests["list"] == 1 + 2 + 20  # a page, then the walk
    store.stats.reset()
    await store.erase_prefix("nested/")
    assert [k async for k in store.list_prefix("nested/")] == []
    assert [k async for k in store.list_prefix("small/")] != []
    assert store.stats.requests["list"] == 1 + 2 + 20 + 2  # and the two checks above
