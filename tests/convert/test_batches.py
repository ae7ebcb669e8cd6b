"""The batch verbs conversions use: ``get_many``, ``set_many`` (memory, local), and what
``copy`` does on local files beyond the conformance suite's ``test_copy``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.backends.local import TMP_PREFIX
from asyncshard.errors import InvalidKeyError
from asyncshard.store import Store


@pytest.fixture(params=["memory", "local"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    yield MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "root")


async def test_get_many_and_set_many(store: Store) -> None:
    items = [(f"a/c/{i}/{j}", bytes([i, j]) * 50) for i in range(3) for j in range(4)]
    versions = await store.set_many(items)
    assert len(versions) == len(items) and all(versions)
    assert store.stats.requests["put"] == len(items)
    keys = [k for k, _ in items] + ["a/missing", "a/c/0/0"]
    got = await store.get_many(keys)
    assert got[: len(items)] == [v for _, v in items]
    assert got[-2] is None and got[-1] == items[0][1]
    assert store.stats.requests["get"] == len(items) + 1  # distinct keys
    with pytest.raises(ValueError, match="duplicate"):
        await store.set_many([("x", b"1"), ("x", b"2")])
    with pytest.raises(InvalidKeyError):
        await store.set_many([("ok", b"1"), ("../bad", b"2")])
    assert await store.get("ok") is None  # validated before anything is written


async def test_local_copy_is_a_link_and_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("a", b"data")
    await store.copy("a", "d/b")
    assert os.stat(tmp_path / "a").st_ino == os.stat(tmp_path / "d" / "b").st_ino
    await store.copy("a", "d/b")  # onto the very same file: still no temp file left
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(TMP_PREFIX)]


async def test_local_failed_batch_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("f", b"a file")
    with pytest.raises(InvalidKeyError):  # "f" is a file: "f/x" cannot be written
        await store.set_many([("g/1", b"1"), ("f/x", b"2")])
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(TMP_PREFIX)]
    assert await store.get("f") == b"a file"


async def test_local_batches_follow_links_inside_the_root(tmp_path: Path) -> None:
    """A link inside the root is an alias for batches too (folders resolved once)."""
    store = LocalStore(tmp_path / "root")
    await store.set("d/real", b"target")
    os.symlink(tmp_path / "root" / "d" / "real", tmp_path / "root" / "d" / "alias")
    os.symlink(tmp_path / "root" / "d", tmp_path / "root" / "folder-alias")
    assert await store.get_many(["d/alias", "folder-alias/real"]) == [b"target", b"target"]
    await store.set_many([("d/alias", b"written through")])
    assert await store.get("d/real") == b"written through"
    os.symlink("/etc/hostname", tmp_path / "root" / "d" / "escape")
    with pytest.raises(InvalidKeyError):
        await store.get_many(["d/escape"])
