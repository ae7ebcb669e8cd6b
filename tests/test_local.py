"""LocalStore specifics: atomic writes, root confinement, URLs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from asyncshard.backends import LocalStore, MemoryStore, open_store, supported_schemes
from asyncshard.backends.local import TMP_PREFIX
from asyncshard.errors import InvalidKeyError, UnknownSchemeError
from asyncshard.ranges import Range


async def test_interrupted_write_keeps_previous_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path)
    await store.set("a/obj", b"old value")

    def crash(fd: int) -> None:  # the write dies after the data went to the temp file
        raise OSError("simulated crash during fsync")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="simulated crash"):
        await store.set("a/obj", b"new value that never lands")
    monkeypatch.undo()
    assert await store.get("a/obj") == b"old value"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["obj"]  # no temp file left


async def test_interrupted_rename_keeps_previous_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path, durable=False)
    await store.set("obj", b"old")

    def crash(src: object, dst: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        await store.set("obj", b"new")
    monkeypatch.undo()
    assert await store.get("obj") == b"old"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]


async def test_temp_files_are_not_listed(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("d/real", b"1")
    (tmp_path / "d" / f"{TMP_PREFIX}leftover").write_bytes(b"x")
    assert [k async for k in store.list()] == ["d/real"]
    assert await store.list_dir("d") == (["d/real"], [])


async def test_symlink_out_of_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    store = LocalStore(root)
    with pytest.raises(InvalidKeyError, match="outside"):
        await store.get("link/secret")
    with pytest.raises(InvalidKeyError, match="outside"):
        await store.set("link/new", b"x")
    assert not (outside / "new").exists()


async def test_range_read_reads_only_the_range(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    big = tmp_path / "big"
    with open(big, "wb") as f:  # a sparse 1 GiB file: reading it whole would take seconds
        f.truncate(1 << 30)
        f.seek((1 << 30) - 4)
        f.write(b"tail")
    assert await store.get("big", Range((1 << 30) - 4, 1 << 30)) == b"tail"
    assert store.stats.bytes_fetched == 4


async def test_deletes_prune_empty_folders(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("a/b/c/d", b"1")
    await store.set("a/x", b"2")
    await store.erase_values(["a/b/c/d"])
    assert not (tmp_path / "a" / "b").exists()
    assert (tmp_path / "a" / "x").exists()


async def test_directory_is_not_an_object(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("dir/file", b"1")
    assert await store.get("dir") is None
    assert await store.head("dir") is None
    with pytest.raises(InvalidKeyError):
        await store.set("dir", b"x")


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    for url in [str(tmp_path), f"file://{tmp_path}", f"file://localhost{tmp_path}"]:
        store = open_store(url)
        assert isinstance(store, LocalStore) and store.root == tmp_path
    with pytest.raises(UnknownSchemeError, match=r"supported: .*file://.*memory://"):
        open_store("ftp://host/x")
    assert {"file", "memory", "s3", "gs", "http", "https"} <= set(supported_schemes())
