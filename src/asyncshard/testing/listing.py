"""Conformance: list, list_prefix and list_dir conventions.

Expected listings are derived from the stored keys by two small reference functions
(:func:`keys_with_prefix`, :func:`folder_listing`); the tests about the test tree's own
folders (``structured`` harnesses) also state their expectations literally.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from asyncshard.errors import InvalidKeyError
from asyncshard.store import split_dir
from asyncshard.testing.base import ConformanceBase
from asyncshard.testing.harness import Harness
from asyncshard.walk import list_keys, walk_keys

__all__ = ["TREE", "ListingConformance", "folder_listing", "keys_with_prefix"]

TREE = {
    "zarr.json": b"{}",
    "arr/zarr.json": b"{}",
    "arr/c/0/0": b"a",
    "arr/c/0/1": b"b",
    "arr/c/1/0": b"c",
    "arr/c/10/0": b"d",
    "arrow": b"e",
}


def keys_with_prefix(keys: Iterable[str], prefix: str) -> list[str]:
    """What ``list_prefix(prefix)`` lists of a store holding ``keys``."""
    prefix = "" if prefix == "/" else prefix
    return sorted(k for k in keys if k.startswith(prefix))


def folder_listing(keys: Iterable[str], folder: str) -> tuple[list[str], list[str]]:
    """What ``list_dir(folder)`` answers for a store holding ``keys``."""
    folder = folder.strip("/") + "/" if folder.strip("/") else ""
    return split_dir(folder, keys_with_prefix(keys, folder))


async def _listed(harness: Harness, prefix: str) -> list[str]:
    return sorted([k async for k in harness.store.list_prefix(prefix)])


async def _seed_tree(harness: Harness) -> list[str]:
    """Seed :data:`TREE`; every key the store now holds (with its ``present_keys``)."""
    await harness.seed(TREE)
    return sorted({*map(harness.key, TREE), *harness.present_keys})


def _cuts(keys: Iterable[str]) -> list[str]:
    """String prefixes of stored keys: each key's folder and the key less its last
    character (which may end inside a folder or a number)."""
    cuts = {""}
    for key in keys:
        cuts.add(key[: key.rfind("/") + 1])
        cuts.add(key[:-1])
    return sorted(cuts)


class ListingConformance(ConformanceBase):
    """Listing: skipped on stores that cannot list."""

    async def test_list_everything(self, listable: Harness) -> None:
        stored = await _seed_tree(listable)
        assert sorted([k async for k in listable.store.list()]) == stored
        assert await _listed(listable, "/") == stored

    @pytest.mark.parametrize(
        ("prefix", "expected"),
        [
            pytest.param(prefix, expected, id=prefix)
            for prefix, expected in [
                ("arr/", ["arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/c/10/0", "arr/zarr.json"]),
                (
                    "arr",
                    ["arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/c/10/0", "arr/zarr.json", "arrow"],
                ),
                ("arr/c/1", ["arr/c/1/0", "arr/c/10/0"]),
                ("arr/c/1/", ["arr/c/1/0"]),
                ("nothing/", []),
            ]
        ],
    )
    async def test_list_prefix_is_a_string_prefix(
        self, structured: Harness, prefix: str, expected: list[str]
    ) -> None:
        await _seed_tree(structured)
        mapped = structured.prefix(prefix)
        present = keys_with_prefix(structured.present_keys, mapped)
        assert await _listed(structured, mapped) == sorted(
            [*map(structured.key, expected), *present]
        )

    async def test_list_prefix_of_stored_keys(self, listable: Harness) -> None:
        stored = await _seed_tree(listable)
        for cut in _cuts(stored):
            assert await _listed(listable, cut) == keys_with_prefix(stored, cut), cut

    @pytest.mark.parametrize("prefix", ["arr/c", "arr/c/"])
    async def test_list_dir_nested(self, structured: Harness, prefix: str) -> None:
        await _seed_tree(structured)
        keys, prefixes = await structured.store.list_dir(structured.prefix(prefix))
        assert keys == []
        assert sorted(prefixes) == [
            structured.prefix(p) for p in ["arr/c/0/", "arr/c/1/", "arr/c/10/"]
        ]

    async def test_list_dir_root_and_leaves(self, structured: Harness) -> None:
        await _seed_tree(structured)
        store, h = structured.store, structured
        present_keys, present_prefixes = folder_listing(h.present_keys, h.prefix(""))
        keys, prefixes = await store.list_dir(h.prefix(""))
        assert sorted(keys) == sorted([h.key("arrow"), h.key("zarr.json"), *present_keys])
        assert sorted(prefixes) == sorted({h.prefix("arr/"), *present_prefixes})
        keys, prefixes = await store.list_dir(h.prefix("arr/c/0"))
        assert sorted(keys) == [h.key("arr/c/0/0"), h.key("arr/c/0/1")] and prefixes == []
        assert await store.list_dir(h.prefix("missing/dir")) == ([], [])

    async def test_list_dir_of_stored_folders(self, listable: Harness) -> None:
        stored = await _seed_tree(listable)
        folders = {"", "missing/"} | {
            k[: i + 1] for k in stored for i, c in enumerate(k) if c == "/"
        }
        for folder in sorted(folders):
            expected = folder_listing(stored, folder)
            for form in {folder, folder.rstrip("/")}:  # "a/" and "a" name the same folder
                keys, prefixes = await listable.store.list_dir(form)
                assert (sorted(keys), sorted(prefixes)) == expected, form

    @pytest.mark.parametrize("width", [1, 2, 16])
    async def test_walk_and_list_keys_list_what_list_prefix_lists(
        self, listable: Harness, width: int
    ) -> None:
        stored = await _seed_tree(listable)
        for cut in _cuts(stored):
            walked = await walk_keys(listable.store, cut, width=width)
            assert len(walked) == len(set(walked)), cut
            assert sorted(walked) == keys_with_prefix(stored, cut), cut
            listed = await list_keys(listable.store, cut, width=width)
            assert len(listed) == len(set(listed)), cut
            assert sorted(listed) == keys_with_prefix(stored, cut), cut

    async def test_listing_counts_one_request(self, listable: Harness) -> None:
        await listable.seed(TREE)
        store, key = listable.store, listable.key("arr/c/0/0")
        await store.list_dir(key[: key.rfind("/") + 1])
        assert store.stats.requests["list"] == listable.count(requests=1, operations=1)

    @pytest.mark.parametrize(
        "prefix", ["../", "/abs/", "a//b/", "a\\b", "a/../", "x\x00"], ids=repr
    )
    async def test_hostile_prefixes_rejected(self, listable: Harness, prefix: str) -> None:
        store = listable.store
        with pytest.raises(InvalidKeyError):
            [k async for k in store.list_prefix(prefix)]
        with pytest.raises(InvalidKeyError):
            await store.list_dir(prefix)
