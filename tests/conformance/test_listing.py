"""Conformance: list, list_prefix and list_dir conventions."""

from __future__ import annotations

import pytest

from asyncshard.errors import InvalidKeyError
from tests.conformance.harness import Harness

TREE = {
    "zarr.json": b"{}",
    "arr/zarr.json": b"{}",
    "arr/c/0/0": b"a",
    "arr/c/0/1": b"b",
    "arr/c/1/0": b"c",
    "arr/c/10/0": b"d",
    "arrow": b"e",
}


async def test_list_everything(listable: Harness) -> None:
    await listable.seed(TREE)
    store = listable.store
    assert sorted([k async for k in store.list()]) == sorted(TREE)
    assert sorted([k async for k in store.list_prefix("/")]) == sorted(TREE)


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("arr/", ["arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/c/10/0", "arr/zarr.json"]),
        ("arr", ["arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/c/10/0", "arr/zarr.json", "arrow"]),
        ("arr/c/1", ["arr/c/1/0", "arr/c/10/0"]),
        ("arr/c/1/", ["arr/c/1/0"]),
        ("nothing/", []),
    ],
)
async def test_list_prefix_is_a_string_prefix(
    listable: Harness, prefix: str, expected: list[str]
) -> None:
    await listable.seed(TREE)
    assert sorted([k async for k in listable.store.list_prefix(prefix)]) == expected


@pytest.mark.parametrize("prefix", ["arr/c", "arr/c/"])
async def test_list_dir_nested(listable: Harness, prefix: str) -> None:
    await listable.seed(TREE)
    keys, prefixes = await listable.store.list_dir(prefix)
    assert keys == []
    assert sorted(prefixes) == ["arr/c/0/", "arr/c/1/", "arr/c/10/"]


async def test_list_dir_root_and_leaves(listable: Harness) -> None:
    await listable.seed(TREE)
    store = listable.store
    keys, prefixes = await store.list_dir("")
    assert sorted(keys) == ["arrow", "zarr.json"] and prefixes == ["arr/"]
    keys, prefixes = await store.list_dir("arr/c/0")
    assert sorted(keys) == ["arr/c/0/0", "arr/c/0/1"] and prefixes == []
    assert await store.list_dir("missing/dir") == ([], [])


async def test_listing_counts_one_request(listable: Harness) -> None:
    await listable.seed(TREE)
    store = listable.store
    await store.list_dir("arr")
    assert store.stats.requests["list"] == 1


@pytest.mark.parametrize("prefix", ["../", "/abs/", "a//b/", "a\\b", "a/../", "x\x00"], ids=repr)
async def test_hostile_prefixes_rejected(listable: Harness, prefix: str) -> None:
    store = listable.store
    with pytest.raises(InvalidKeyError):
        [k async for k in store.list_prefix(prefix)]
    with pytest.raises(InvalidKeyError):
        await store.list_dir(prefix)
