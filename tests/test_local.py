"""LocalStore specifics: atomic writes, root confinement, URLs."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncshard.backends import LocalStore, MemoryStore, open_store, supported_schemes
from asyncshard.backends.local import TMP_PREFIX
from asyncshard.backends.local.descriptors import NOWAIT
from asyncshard.backends.local.store import INLINE_FILE_BYTES
from asyncshard.backends.local.writes import STAGE_MIN
from asyncshard.errors import (
    ConflictError,
    InvalidKeyError,
    StoreBackendError,
    StoreConfigError,
    StorePermissionError,
    UnknownSchemeError,
)
from asyncshard.ranges import Range


async def test_interrupted_write_keeps_previous_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path)
    await store.set("a/obj", b"old value")

    def crash(fd: int) -> None:  # the write dies after the data went to the temp file
        raise OSError("simulated crash during fsync")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(StoreBackendError, match="simulated crash"):
        await store.set("a/obj", b"new value that never lands")
    monkeypatch.undo()
    assert await store.get("a/obj") == b"old value"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["obj"]  # no temp file left


async def test_interrupted_rename_keeps_previous_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path, durable=False)
    await store.set("obj", b"old")

    def crash(src: object, dst: object, **dir_fds: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(StoreBackendError, match="simulated crash before rename"):
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


async def test_prune_removes_only_folders_that_hold_nothing(tmp_path: Path) -> None:
    """``prune`` removes what a killed delete leaves (folders emptied but not removed),
    deepest first, and nothing else: objects, temp files, the folders holding them, the
    root, a link and the outside folder it leads to all stay, and so does an empty
    staging folder (a batch between creating it and its first temp file)."""
    store = LocalStore(tmp_path / "root")
    await store.set("arr/zarr.json", b"{}")
    await store.set("arr/c/0/0", b"chunk")
    root = tmp_path / "root"
    for empty in ("arr/c/1/2", "arr/c/1/3/4", "arr/c/5", "other/x"):
        (root / empty).mkdir(parents=True)
    (root / "arr/c/6").mkdir()
    (root / "arr/c/6" / f"{TMP_PREFIX}partial").write_bytes(b"in flight")
    (root / "arr/c/7" / f"{TMP_PREFIX}stage").mkdir(parents=True)  # a batch's, not yet used
    outside = tmp_path / "outside"
    (outside / "empty").mkdir(parents=True)
    (root / "arr/c/link").symlink_to(outside)
    await store.prune("arr")
    assert sorted(
        str(p.relative_to(root)) for p in (root / "arr").rglob("*") if not p.is_file()
    ) == ["arr/c", "arr/c/0", "arr/c/6", "arr/c/7", f"arr/c/7/{TMP_PREFIX}stage", "arr/c/link"]
    assert (root / "other/x").is_dir(), "outside the prefix"
    assert (outside / "empty").is_dir() and (root / "arr/c/0/0").read_bytes() == b"chunk"
    (root / "arr/c/link").unlink()
    await store.erase_values(["arr/c/0/0"])
    await store.prune("")
    assert not (root / "other").exists() and not (root / "arr/c/0").exists()
    assert (root / "arr/c/6").is_dir() and root.is_dir()


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


def leftovers(root: Path) -> list[str]:
    """Temp files anywhere below ``root``."""
    return [p.name for p in root.rglob(f"{TMP_PREFIX}*")]


# -- typed errors instead of raw OSErrors -------------------------------------------------


async def test_file_in_the_way_of_a_folder_is_an_invalid_key(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("a", b"object a")
    for key in ["a/b", "a/b/c"]:
        with pytest.raises(InvalidKeyError, match="a file of that name exists"):
            await store.set(key, b"x")
        with pytest.raises(InvalidKeyError, match="a file of that name exists"):
            await store.set(key, b"x", if_absent=True)
        assert await store.get(key) is None
    assert await store.get("a") == b"object a"
    assert [k async for k in store.list()] == ["a"]
    assert leftovers(tmp_path) == []


def _deny(monkeypatch: pytest.MonkeyPatch, below: Path) -> None:
    """Make every ``os.open`` below ``below`` fail with EACCES (tests run as root)."""
    real_open = os.open

    def fake_open(path: str | os.PathLike[str], flags: int, *args: int, **kw: int) -> int:
        if str(path).startswith(str(below)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", fake_open)


async def test_permission_denied_is_a_store_permission_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path)
    await store.set("locked/obj", b"old")
    _deny(monkeypatch, tmp_path / "locked")
    with pytest.raises(StorePermissionError, match=r"locked/obj") as read_err:
        await store.get("locked/obj")
    assert str(tmp_path / "locked") in str(read_err.value)  # names the path
    with pytest.raises(StorePermissionError, match=str(tmp_path / "locked")):
        await store.set("locked/obj", b"new")
    monkeypatch.undo()
    assert await store.get("locked/obj") == b"old"
    assert leftovers(tmp_path) == []


_PERMISSION_CHECK = """
import asyncio, sys
from pathlib import Path
from asyncshard.backends import LocalStore
from asyncshard.errors import StorePermissionError

async def main(root: Path) -> None:
    store = LocalStore(root)
    await store.set("d/obj", b"x")
    (root / "d" / "obj").chmod(0)
    (root / "ro").mkdir()
    (root / "ro").chmod(0o555)
    for call, name in ((store.get("d/obj"), "d/obj"), (store.set("ro/new", b"x"), "ro")):
        try:
            await call
        except StorePermissionError as exc:
            assert name in str(exc), exc
        else:
            raise AssertionError(f"no StorePermissionError for {name}")
    (root / "d" / "obj").chmod(0o644)
    (root / "ro").chmod(0o755)

asyncio.run(main(Path(sys.argv[1])))
"""


def _without_root_file_access() -> None:
    """In the child, before exec: drop the capabilities that let root ignore file modes
    (CAP_DAC_OVERRIDE 1, CAP_DAC_READ_SEARCH 2) from the bounding set, so the exec'd
    interpreter runs as root that file permissions do apply to."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_unreadable_file_is_a_store_permission_error(tmp_path: Path) -> None:
    """Run in a child process; as root, one without root's file-access capabilities."""
    as_root = os.geteuid() == 0
    result = subprocess.run(
        [sys.executable, "-c", _PERMISSION_CHECK, str(tmp_path / "root")],
        preexec_fn=_without_root_file_access if as_root else None,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


async def test_too_long_names_read_as_missing_and_cannot_be_written(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("d/k", b"1")
    long = "x" * 300  # longer than NAME_MAX (255) on every common file system
    for key in [long, f"d/{long}", f"{long}/k", "d/" + "/".join(["y" * 200] * 30)]:
        assert await store.get(key) is None, key
        assert await store.get(key, Range(0, 1)) is None, key
        assert await store.head(key) is None, key
        assert not await store.exists(key)
        with pytest.raises(InvalidKeyError, match="too long"):
            await store.set(key, b"x")
        await store.erase_values([key])  # deleting a missing object is fine
        assert [k async for k in store.list_prefix(key)] == []
    assert await store.list_dir("") == ([], ["d/"])  # no folders left behind
    assert await store.list_dir("d") == (["d/k"], [])
    assert leftovers(tmp_path) == []


async def test_unexpected_os_errors_on_writes_are_backend_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path)
    version = await store.set("a/obj", b"old")

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(StoreBackendError, match="No space left") as err:
        await store.set("a/obj", b"new", if_match=version)
    assert isinstance(err.value.__cause__, OSError)
    with pytest.raises(StoreBackendError, match="No space left"):
        await store.set("b/c/new", b"new")
    monkeypatch.undo()
    assert await store.get("a/obj") == b"old"
    assert leftovers(tmp_path) == []
    assert await store.list_dir("") == ([], ["a/"])  # b/ and b/c/ were pruned


# -- failed writes leave no folders behind ------------------------------------------------


async def test_failed_writes_prune_the_folders_they_created(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with pytest.raises(ConflictError):
        await store.set("p/q/r", b"x", if_match="stale")
    assert await store.list_dir("") == ([], [])
    assert list(tmp_path.iterdir()) == []

    await store.set("d/k", b"1")
    (tmp_path / "empty").mkdir()  # made by someone else: not the failed write's to remove
    for key in ["d/e/f", "empty/x/y", "empty/z"]:
        with pytest.raises(ConflictError):
            await store.set(key, b"x", if_match="stale")
    assert await store.list_dir("") == ([], ["d/", "empty/"])
    assert await store.list_dir("d") == (["d/k"], [])
    assert list((tmp_path / "empty").iterdir()) == []
    with pytest.raises(ConflictError):
        await store.set("d/k", b"2", if_absent=True)
    assert await store.get("d/k") == b"1"
    assert leftovers(tmp_path) == []


async def test_failed_write_into_a_new_root_leaves_no_folders(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "root")
    with pytest.raises(ConflictError):
        await store.set("p/q", b"x", if_match="stale")
    assert await store.list_dir("") == ([], [])
    await store.set("p/q", b"x")
    assert await store.get("p/q") == b"x"


# -- listings show only what the API accepts ----------------------------------------------


async def test_names_the_api_rejects_are_not_listed(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("d/ok", b"1")
    (tmp_path / "back\\slash").write_bytes(b"x")
    (tmp_path / "d" / "a\\b").write_bytes(b"x")
    (tmp_path / "bad\\dir").mkdir()
    (tmp_path / "bad\\dir" / "k").write_bytes(b"x")
    assert [k async for k in store.list()] == ["d/ok"]
    assert await store.list_dir("") == ([], ["d/"])
    assert await store.list_dir("d") == (["d/ok"], [])
    await store.erase_prefix("")  # every listed key is a valid key
    assert [k async for k in store.list()] == []
    assert (tmp_path / "back\\slash").exists()  # unlisted, so untouched


async def test_links_leading_outside_are_not_listed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root = tmp_path / "root"
    store = LocalStore(root)
    await store.set("real/k", b"inside")
    (root / "out-file").symlink_to(outside / "secret")
    (root / "real" / "out-file").symlink_to(outside / "secret")
    (root / "out-dir").symlink_to(outside)
    (root / "alias").symlink_to(root / "real" / "k")  # inside, to inside: an object
    (root / "real" / "relative").symlink_to("k")
    (root / "dangling").symlink_to(root / "nothing")
    assert sorted([k async for k in store.list()]) == ["alias", "real/k", "real/relative"]
    assert sorted([k async for k in store.list_prefix("real/")]) == ["real/k", "real/relative"]
    assert await store.list_dir("") == (["alias"], ["real/"])
    assert await store.list_dir("real") == (["real/k", "real/relative"], [])
    for key in ["alias", "real/relative"]:
        assert await store.get(key) == b"inside"
    await store.erase_prefix("")  # deletes the links inside, not what they point to
    assert [k async for k in store.list()] == []
    assert (outside / "secret").read_bytes() == b"secret"
    assert (root / "real" / "out-file").is_symlink()  # unlisted, so untouched


# -- resolving paths ----------------------------------------------------------------------


def _count_lookups(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """Record the paths given to ``realpath`` and to ``lstat``."""
    realpaths: list[str] = []
    lstats: list[str] = []
    real, lstat = os.path.realpath, os.lstat

    def counting_realpath(path: str | os.PathLike[str], **kw: bool) -> str:
        realpaths.append(os.fspath(path))
        return real(path, **kw)

    def counting_lstat(path: Any, **kw: Any) -> os.stat_result:
        lstats.append(os.fspath(path) if not isinstance(path, int) else str(path))
        return lstat(path, **kw)

    monkeypatch.setattr(os.path, "realpath", counting_realpath)
    monkeypatch.setattr(os, "lstat", counting_lstat)
    return realpaths, lstats


async def test_root_is_resolved_once_and_keys_once_per_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys are resolved below the root, which is resolved once: no lookup of the
    folders above it, one ``lstat`` per key component, ``realpath`` only for links."""
    store = LocalStore(tmp_path / "lazy" / "root")
    assert await store.get("k") is None  # the root does not exist yet
    version = await store.set("a/k", b"1")  # creates it
    assert await store.get("a/k") == b"1"  # resolves the root, now that it exists
    realpaths, lstats = _count_lookups(monkeypatch)
    version = await store.set("a/k", b"2", if_match=version)
    await store.set("a/k", b"3")
    assert await store.get("a/k") == b"3"
    assert await store.head("a/k") is not None
    assert realpaths == []
    root = str(store.root)
    resolved = [p for p in lstats if p in (f"{root}/a", f"{root}/a/k")]
    # two components per write and head; none for the read, which checks the file it
    # opened through /proc/self/fd instead (on Linux); nothing at or above the root
    assert len(resolved) == (6 if os.path.isdir("/proc/self/fd") else 8), lstats
    assert not [p for p in lstats if not p.startswith(root + "/")], lstats
    (store.root / "link").symlink_to(store.root / "a")  # a link inside: an alias
    assert await store.get("link/k") == b"3"
    meta = await store.head("link/k")
    assert meta is not None and meta.size == 1
    assert realpaths == [f"{root}/link/k"]


async def test_store_through_a_linked_root(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    store = LocalStore(tmp_path / "link")
    await store.set("a/b", b"1")
    await store.set("c", b"2")
    assert sorted([k async for k in store.list()]) == ["a/b", "c"]
    assert [k async for k in store.list_prefix("a/")] == ["a/b"]
    assert await store.list_dir("a") == (["a/b"], [])
    await store.erase_values(["a/b"])
    assert await store.list_dir("") == (["c"], [])


def _swap_after_check(
    monkeypatch: pytest.MonkeyPatch, key_path: Path, swap: Callable[[], None]
) -> None:
    """Run ``swap`` right after ``key_path`` was resolved: a race won by an attacker."""
    real = os.path.realpath
    done: list[bool] = []

    def racing(path: str | os.PathLike[str], **kw: bool) -> str:
        result = real(path, **kw)
        if os.fspath(path) == str(key_path) and not done:
            done.append(True)
            swap()
        return result

    monkeypatch.setattr(os.path, "realpath", racing)


async def test_link_swapped_in_after_the_check_does_not_lead_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k").write_bytes(b"secret")
    root = tmp_path / "root"
    store = LocalStore(root)
    await store.set("real/k", b"inside")
    await store.set("obj", b"mine")
    (root / "alias").symlink_to(root / "real")

    def repoint_alias() -> None:
        (root / "alias").unlink()
        (root / "alias").symlink_to(outside)

    _swap_after_check(monkeypatch, root / "alias" / "k", repoint_alias)
    assert await store.get("alias/k") == b"inside"  # read the folder that was checked
    monkeypatch.undo()
    (root / "alias").unlink()
    (root / "alias").symlink_to(root / "real")
    _swap_after_check(monkeypatch, root / "alias" / "new", repoint_alias)
    await store.set("alias/new", b"x")
    assert not (outside / "new").exists()
    assert (root / "real" / "new").read_bytes() == b"x"
    monkeypatch.undo()

    def replace_obj() -> None:  # the object itself becomes a link to the outside
        (root / "obj").unlink()
        (root / "obj").symlink_to(outside / "k")

    _swap_after_check(monkeypatch, root / "obj", replace_obj)
    assert await store.get("obj") != b"secret"


async def test_special_files_are_not_objects(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("d/k", b"1")
    os.mkfifo(tmp_path / "d" / "fifo")  # opening it for reading must not block
    assert await store.get("d/fifo") is None
    assert await store.head("d/fifo") is None
    assert await store.list_dir("d") == (["d/k"], [])
    assert [k async for k in store.list()] == ["d/k"]


# -- bulk deletes -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "memory"])
async def test_erase_values_counts_one_delete_per_key(tmp_path: Path, kind: str) -> None:
    store = LocalStore(tmp_path) if kind == "local" else MemoryStore()
    for key in ["a/1", "a/2", "b/c/3", "keep"]:
        await store.set(key, b"x")
    store.stats.reset()
    await store.erase_values(["a/1", "a/2", "b/c/3", "missing", "a/1"])  # dup deleted once
    assert store.stats.requests == {"delete": 4}
    assert [k async for k in store.list()] == ["keep"]
    if kind == "local":
        assert [p.name for p in tmp_path.iterdir()] == ["keep"]  # emptied folders pruned


async def test_local_bulk_delete_is_one_thread_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path, durable=False)
    keys = [f"f{i % 7}/k{i}" for i in range(300)]
    for key in keys:
        await store.set(key, b"x")
    hops: list[object] = []
    real = asyncio.to_thread

    async def counting(fn: Callable[..., object], *args: object) -> object:
        hops.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    await store.erase_values(keys)
    assert len(hops) == 1
    assert list(tmp_path.iterdir()) == []


async def test_a_failing_key_does_not_stop_the_others(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    store = LocalStore(root)
    await store.set("a", b"1")
    await store.set("z/b", b"2")
    (root / "link").symlink_to(outside)
    with pytest.raises(InvalidKeyError, match="outside"):
        await store.erase_values(["a", "link/x", "z/b"])
    assert [k async for k in store.list()] == []  # both real objects are gone


# -- stale temporary files ----------------------------------------------------------------


def temp_file(folder: Path, age: float) -> Path:
    """A leftover temp file whose last write was ``age`` seconds ago."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{TMP_PREFIX}{age:.0f}-{len(list(folder.iterdir()))}"
    path.write_bytes(b"half a shard")
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


async def test_a_write_removes_stale_temp_files_in_its_folder(tmp_path: Path) -> None:
    stale, fresh = temp_file(tmp_path / "d", 7200), temp_file(tmp_path / "d", 60)
    elsewhere = temp_file(tmp_path / "other", 7200)
    store = LocalStore(tmp_path)
    await store.set("d/obj", b"new")
    assert not stale.exists()
    assert fresh.exists()  # a live writer in another process may still rename it
    assert elsewhere.exists()  # only the folder written to is swept
    again = temp_file(tmp_path / "d", 7200)
    await store.set("d/obj2", b"x")
    assert again.exists()  # a folder is swept at most once per temp_max_age
    await LocalStore(tmp_path, temp_max_age=None).set("other/obj", b"x")
    assert elsewhere.exists()


async def test_cleanup_temp_files_sweeps_the_tree(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set("keep/obj", b"x")
    stale = [temp_file(tmp_path, 7200), temp_file(tmp_path / "a" / "b", 7200)]
    stale.append(temp_file(tmp_path / "keep", 4000))
    fresh = temp_file(tmp_path / "keep", 10)
    assert await store.cleanup_temp_files() == 3
    assert not any(p.exists() for p in stale) and fresh.exists()
    assert not (tmp_path / "a").exists()  # folders emptied by the sweep are pruned
    assert await store.cleanup_temp_files(max_age=0) == 1
    assert await store.get("keep/obj") == b"x"
    assert await LocalStore(tmp_path / "nowhere").cleanup_temp_files() == 0


def staging_folder(folder: Path, age: float) -> Path:
    """What a batch killed mid-way leaves: a staging folder holding a temp file, both
    last changed ``age`` seconds ago."""
    stage = folder / f"{TMP_PREFIX}stage-{age:.0f}"
    stage.mkdir(parents=True)
    stamp = time.time() - age
    (stage / f"{TMP_PREFIX}1").write_bytes(b"a chunk")
    os.utime(stage / f"{TMP_PREFIX}1", (stamp, stamp))
    os.utime(stage, (stamp, stamp))
    return stage


async def test_a_batch_into_one_folder_stages_its_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STAGE_MIN objects or more for one folder: their temp files are created in a
    staging folder there and renamed in; nothing of it stays, on success or failure."""
    store = LocalStore(tmp_path)
    items = [(f"a/c.{i}", bytes([i]) * 10) for i in range(STAGE_MIN)]
    created: list[str] = []
    real_open = os.open

    def recording_open(path: str, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            created.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    await store.set_many([*items, ("b/few", b"x")])
    monkeypatch.undo()
    staged = {Path(p).parent for p in created if Path(p).parent.name.startswith(TMP_PREFIX)}
    assert [p.parent for p in staged] == [tmp_path / "a"]
    assert sum(Path(p).parent in staged for p in created) == STAGE_MIN  # not b/few's
    assert await store.get_many([k for k, _ in items]) == [v for _, v in items]
    assert sorted(os.listdir(tmp_path / "a")) == sorted(k[2:] for k, _ in items)
    await store.set("f", b"a file")
    for folder, n in [("a", STAGE_MIN), ("new", STAGE_MIN), ("new", STAGE_MIN - 1)]:
        with pytest.raises(InvalidKeyError):  # "f" is a file: "f/x" cannot be written
            await store.set_many([(f"{folder}/d.{i}", b"1") for i in range(n)] + [("f/x", b"2")])
        assert not [p for p in tmp_path.rglob("*") if p.name.startswith(TMP_PREFIX)]
        assert await store.get(f"{folder}/d.0") is None
    assert not (tmp_path / "new").exists()  # the folder the failed batch made is gone


async def test_keys_named_like_temp_files_are_refused(tmp_path: Path) -> None:
    """Listings hide such names and sweeps remove them: they cannot be objects."""
    store = LocalStore(tmp_path)
    await store.set("ok", b"x")
    for key in [f"{TMP_PREFIX}x", f"a/{TMP_PREFIX}x/y"]:
        with pytest.raises(InvalidKeyError, match="temporary files"):
            await store.set(key, b"x")
        with pytest.raises(InvalidKeyError, match="temporary files"):
            await store.set_many([("fine", b"x"), (key, b"x")])
        with pytest.raises(InvalidKeyError, match="temporary files"):
            await store.copy("ok", key)
    assert sorted([k async for k in store.list()]) == ["ok"]


async def test_staging_folders_left_by_a_killed_batch_are_hidden_and_swept(
    tmp_path: Path,
) -> None:
    stale, fresh = staging_folder(tmp_path / "d", 7200), staging_folder(tmp_path / "e", 60)
    store = LocalStore(tmp_path, temp_max_age=None)  # no sweeps
    await store.set("d/obj", b"x")
    assert sorted([k async for k in store.list()]) == ["d/obj"]
    assert await store.list_dir("") == ([], ["d/", "e/"])  # e/ holds nothing listable
    assert await store.list_dir("d") == (["d/obj"], [])
    await LocalStore(tmp_path).set("d/obj2", b"y")  # a write sweeps its folder
    assert not stale.exists() and fresh.exists()
    assert await store.cleanup_temp_files(max_age=0) == 1
    assert not (tmp_path / "e").exists()  # emptied by the sweep: pruned
    assert sorted([k async for k in store.list()]) == ["d/obj", "d/obj2"]


# -- opening ------------------------------------------------------------------------------


def test_must_exist_and_url(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="no such folder"):
        LocalStore(tmp_path / "missing", must_exist=True)
    store = LocalStore(tmp_path, must_exist=True)
    assert store.url == tmp_path.as_uri()
    assert isinstance(open_store(store.url), LocalStore)
    assert MemoryStore().url is None


async def test_cached_small_reads_skip_the_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small read whose bytes are in the page cache runs on the event loop (a thread
    hop costs more than the read); large reads and ``inline_reads=False`` use a thread.
    Results are the same either way."""
    import asyncio as aio

    from asyncshard.backends import local

    hops: list[str] = []
    real = aio.to_thread

    async def counting(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(func.__name__)
        return await real(func, *args, **kwargs)

    store = LocalStore(tmp_path / "root")
    big = bytes(range(256)) * (local.INLINE_READ // 256 + 1)
    await store.set("small", b"0123456789")
    await store.set("big", big)
    monkeypatch.setattr(local.store.asyncio, "to_thread", counting)
    if not local.store.NOWAIT:
        pytest.skip("no RWF_NOWAIT/preadv here: every read uses a thread")
    assert await store.get("small", Range(2, 5)) == b"234"
    assert await store.get("missing") is None
    assert hops == []
    assert await store.get("big") == big
    assert hops == ["_read"]
    threaded = LocalStore(tmp_path / "root", inline_reads=False)
    assert await threaded.get("small") == b"0123456789"
    assert hops == ["_read", "_read"]


async def test_batch_reads_run_in_at_most_batch_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of reads wait for one of ``batch_threads`` threads: files in the page
    cache are Python work under the GIL, which more threads only fight over (without
    inline reads: every batch goes to a thread)."""
    store = LocalStore(tmp_path, batch_threads=2, inline_reads=False)
    await store.set_many([(f"k{i}", bytes([i])) for i in range(8)])
    running, peak = 0, 0
    lock = threading.Lock()
    real = store._read_batch

    def slow(keys: list[str]) -> Any:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        try:
            return real(keys)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(store, "_read_batch", slow)
    got = await asyncio.gather(*(store.get_many([f"k{i}", "none"]) for i in range(8)))
    assert got == [[bytes([i]), None] for i in range(8)]
    assert peak == 2
    assert store.open_options["batch_threads"] == 2
    # a cancelled batch keeps its thread, and its place, until the thread ends
    peak = 0
    first = asyncio.ensure_future(store.get_many(["k0"]))
    second = asyncio.ensure_future(store.get_many(["k1"]))
    await asyncio.sleep(0.02)
    first.cancel()
    third = asyncio.ensure_future(store.get_many(["k2"]))
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == [bytes([1])] and await third == [bytes([2])]
    assert peak == 2
    with pytest.raises(ValueError, match="batch_threads"):
        LocalStore(tmp_path, batch_threads=0)
    opened = open_store(tmp_path.as_uri(), batch_threads=3)
    assert isinstance(opened, LocalStore) and opened.open_options["batch_threads"] == 3


async def test_a_batch_renames_each_folder_under_one_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``set_many`` takes each folder's lock once for its run of objects; objects in
    folders visited in turn all land, each atomically."""
    from asyncshard.backends.local import writes

    store = LocalStore(tmp_path)
    locks: list[str] = []
    real = writes.locked

    def spy(folder: str) -> Any:
        locks.append(os.path.relpath(folder, tmp_path))
        return real(folder)

    monkeypatch.setattr(writes, "locked", spy)
    keys = ["a/1", "a/2", "a/3", "b/1", "b/2", "a/4", "top"]
    await store.set_many([(k, k.encode()) for k in keys])
    assert locks == ["a", "b", "a", "."]
    assert await store.get_many(keys) == [k.encode() for k in keys]
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(TMP_PREFIX)]


@pytest.mark.skipif(not NOWAIT, reason="needs RWF_NOWAIT (Linux)")
async def test_batch_reads_of_small_cached_files_need_no_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get_many`` reads small files in the page cache on the event loop; from the
    first file it cannot read so (too large, a link, not a file) the rest of the batch
    goes to one worker thread, in order, with the same answers and counters."""
    store = LocalStore(tmp_path)
    big = bytes(INLINE_FILE_BYTES + 1)
    await store.set_many([("a/k0", b"0"), ("a/k1", b"1"), ("b/big", big), ("b/k2", b"")])
    (tmp_path / "a" / "alias").symlink_to("k1")
    threads: list[list[str]] = []
    real = store._read_batch

    def in_thread(keys: list[str], now: bool = False) -> Any:
        if not now:
            threads.append(list(keys))
        return real(keys, now)

    monkeypatch.setattr(store, "_read_batch", in_thread)
    assert await store.get_many(["a/k0", "a/none", "a/k1"]) == [b"0", None, b"1"]
    assert threads == []  # all on the loop
    got = await store.get_many(["a/k0", "b/big", "a/k1", "b/k2"])
    assert got == [b"0", big, b"1", b""]
    assert threads == [["b/big", "a/k1", "b/k2"]]
    assert await store.get_many(["a/alias", "a/k0"]) == [b"1", b"0"]
    assert threads[-1] == ["a/alias", "a/k0"]
    assert store.stats.requests["get"] == 9
    assert store.stats.bytes_fetched == 4 + len(big) + 2
