"""LocalStore versions never repeat, even where timestamps are coarse and inodes reused.

The tests run on an ext2 image (one-second timestamps, freed inodes handed out again),
loop-mounted; they are skipped, with the reason, where that is not possible (not root,
no ``mkfs.ext2``, no loop device).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncshard.backends import LocalStore
from asyncshard.backends.local import files as local_files
from asyncshard.cache import LoadingCache
from asyncshard.errors import ConflictError
from asyncshard.sharding import ZarrShardedStore
from tests.zarr.helpers import array_doc


def _mkfs() -> str | None:
    found = shutil.which("mkfs.ext2") or shutil.which("mkfs.ext2", path="/usr/sbin:/sbin")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "e2fsprogs"], capture_output=True, timeout=300
        )
        found = shutil.which("mkfs.ext2") or shutil.which("mkfs.ext2", path="/usr/sbin:/sbin")
    return found


@pytest.fixture
def ext2(tmp_path: Path) -> Iterator[Path]:
    """A freshly made ext2 file system, loop-mounted; unmounted and removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("loop-mounting an ext2 image needs root")
    mkfs = _mkfs()
    if mkfs is None:
        pytest.skip("mkfs.ext2 (e2fsprogs) is not installed and could not be installed")
    image, mount = tmp_path / "ext2.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run([mkfs, "-q", "-F", str(image)], check=True, capture_output=True)
    done = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext2 image: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        for _ in range(20):
            if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
                break
            subprocess.run(["sync"], check=False)
        else:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        image.unlink(missing_ok=True)


async def _stale_accepted(store: LocalStore, rounds: int = 20) -> int:
    """How many of ``rounds`` stale ``if_match`` writes are accepted after two rewrites
    of the same size (the ABA a reused inode with an unchanged mtime produces)."""
    accepted = 0
    for i in range(rounds):
        key = f"k{i % 3}"
        stale = await store.set(key, b"value-A")
        await store.set(key, b"value-B")
        await store.set(key, b"value-C")
        try:
            await store.set(key, b"value-D", if_match=stale)
        except ConflictError:
            continue
        accepted += 1
    return accepted


async def test_stale_if_match_is_refused_on_a_coarse_file_system(ext2: Path) -> None:
    store = LocalStore(ext2 / "root")
    assert await _stale_accepted(store) == 0
    versions = [await store.set("same", b"12345678") for _ in range(50)]
    assert len(set(versions)) == 50, "a version came back for a new write"
    head = await store.head("same")
    got = await store.get_object("same")
    assert head is not None and got is not None
    assert head.version == got.meta.version == versions[-1]


async def test_versions_without_xattrs_never_repeat(
    ext2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the file system keeps no user xattrs, versions are ``inode-mtime-size`` and
    every write under the lock makes the mtime later than the object it replaces."""
    monkeypatch.setattr(local_files, "set_token", lambda fd, token: False)
    store = LocalStore(ext2 / "root")
    assert await _stale_accepted(store, rounds=6) == 0
    versions = [await store.set("same", b"12345678") for _ in range(6)]
    assert len(set(versions)) == 6
    assert all(not v.startswith("t") for v in versions)


WRITERS, CHUNKS, WRITES = 4, 8, 100


def _writer(root: str, writer: int, gate: str) -> None:
    async def run() -> None:
        store = await ZarrShardedStore.open(LocalStore(root), "arr", cache=LoadingCache())
        while not os.path.exists(gate):  # start together, so that the writes overlap
            await asyncio.sleep(0.001)
        for seq in range(1, WRITES + 1):
            for chunk in range(writer, CHUNKS, WRITERS):
                await store.set(f"arr/c/{chunk}", f"{chunk}:{seq:04d}".encode())

    asyncio.run(run())


async def test_processes_writing_one_shard_lose_nothing(ext2: Path) -> None:
    root = ext2 / "data"
    inner = LocalStore(root)
    await inner.set("arr/zarr.json", json.dumps(array_doc([CHUNKS], [CHUNKS], [1])).encode())
    ctx = multiprocessing.get_context("spawn")
    gate = ext2 / "go"
    procs = [ctx.Process(target=_writer, args=(str(root), w, str(gate))) for w in range(WRITERS)]
    for proc in procs:
        proc.start()
    await asyncio.sleep(2.0)  # every writer has imported and opened its store
    gate.touch()
    for proc in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0
    reader = await ZarrShardedStore.open(LocalStore(root), "arr", cache=LoadingCache())
    got = {c: await reader.get(f"arr/c/{c}") for c in range(CHUNKS)}
    lost = {c: v for c, v in got.items() if v != f"{c}:{WRITES:04d}".encode()}
    assert not lost, f"acknowledged chunk writes lost: {lost}"


async def test_without_tokens_a_writer_reads_the_shard_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inode-mtime-size`` versions do not pin the bytes, so an adapter keeps no copy of
    the shards it wrote there: its next partial update reads the shard (with tokens it
    merges into its copy)."""
    for tokens in (True, False):
        if not tokens:
            monkeypatch.setattr(local_files, "set_token", lambda fd, token: False)
        inner = LocalStore(tmp_path / f"tokens-{tokens}")
        await inner.set("arr/zarr.json", json.dumps(array_doc([16], [8], [1])).encode())
        store = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())
        await store.set_values({f"arr/c/{i}": b"A" for i in range(8)})
        version = await inner.head("arr/c/0")
        assert version is not None and version.version is not None
        assert inner.version_pins_bytes(version.version) is tokens
        inner.stats.reset()
        await store.set("arr/c/0", b"B")
        assert inner.stats.requests["get"] == (0 if tokens else 1)


def _no_tokens(monkeypatch: pytest.MonkeyPatch, *, generations: bool) -> None:
    """Versions as on a file system without user xattrs (and without inode generations)."""
    monkeypatch.setattr(local_files, "set_token", lambda fd, token: False)
    monkeypatch.setattr(local_files, "token_of", lambda target: None)
    if not generations:
        monkeypatch.setattr(local_files, "generation_of", lambda target: None)


async def _rewrites_repeating_a_version(store: LocalStore, rounds: int = 30) -> int:
    """How often a delete and a new write of the same size (same tick, the freed inode
    reused) bring back the version the deleted object had. Each round starts without
    the key, so neither write is a replacement (whose mtime a write moves past the
    object it replaces)."""
    repeated = 0
    for i in range(rounds):
        await store.erase_values(["x"])
        old = await store.set("x", b"%08d" % i)
        await store.erase_values(["x"])
        repeated += await store.set("x", b"%08d" % (i + 1)) == old
    return repeated


async def test_without_tokens_the_inode_generation_tells_a_rewrite_apart(
    ext2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without user xattrs, a delete and a new write of the same size in one tick get
    the freed inode number and the same mtime: the inode's generation (drawn anew when
    the number is used again) still makes the version new, so a reader holding the old
    version (a cached shard index) has its conditioned read refused instead of reading
    the new object's bytes at the old offsets."""
    _no_tokens(monkeypatch, generations=False)
    assert await _rewrites_repeating_a_version(LocalStore(ext2 / "plain")), (
        "the case this is about did not happen"
    )
    monkeypatch.undo()
    _no_tokens(monkeypatch, generations=True)
    store = LocalStore(ext2 / "root")
    assert await _rewrites_repeating_a_version(store) == 0
    version = await store.set("y", b"01234567")
    assert not version.startswith(local_files.TOKEN_PREFIX) and "." in version.split("-")[0]
    for _ in range(30):
        old = await store.set("y", b"01234567")
        await store.erase_values(["y"])
        await store.set("y", b"76543210")
        with pytest.raises(ConflictError):
            await store.get_object("y", if_match=old)


async def test_a_shard_deleted_and_written_again_with_its_version_loses_nothing(
    ext2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without tokens or inode generations, on coarse timestamps: writer B deletes the
    shard writer A wrote and writes it again, same size, same clock tick, freed inode
    reused, so it gets A's version back. A's next partial update still reads the shard
    (a copy A kept would be accepted by its conditional write and replace B's chunks)."""
    _no_tokens(monkeypatch, generations=False)
    inner = LocalStore(ext2 / "root")
    n = 8
    await inner.set("arr/zarr.json", json.dumps(array_doc([2 * n], [n], [1])).encode())
    keeper = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())
    await keeper.set_values({f"arr/c/{i}": b"K" for i in range(n, 2 * n)})  # keeps the folder
    repeated = 0
    for _ in range(30):
        await inner.erase_values(["arr/c/0"])
        a = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())
        b = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())
        await a.set_values({f"arr/c/{i}": b"A" for i in range(n)})
        written = await inner.head("arr/c/0")
        await b.erase_values([f"arr/c/{i}" for i in range(n)])
        await b.set_values({f"arr/c/{i}": b"B" for i in range(n)})
        now = await inner.head("arr/c/0")
        assert written is not None and now is not None
        repeated += now.version == written.version
        await a.set("arr/c/0", b"a")
        reader = await ZarrShardedStore.open(inner, "arr", cache=LoadingCache())
        got = [await reader.get(f"arr/c/{i}") for i in range(1, n)]
        assert got == [b"B"] * (n - 1)
    assert repeated  # the case this is about happened


@pytest.mark.parametrize("tokens", [True, False])
@pytest.mark.parametrize("writer_is_reader", [True, False])
async def test_remembered_metadata_is_not_handed_to_a_rewritten_file(
    ext2: Path, monkeypatch: pytest.MonkeyPatch, tokens: bool, writer_is_reader: bool
) -> None:
    """A reader remembers a file's metadata by its identity (device, inode, size, mtime,
    ctime) to skip reading its tag again. A delete and a same-size rewrite within one
    clock tick repeat that identity (the freed inode reused): the rewritten file, by this
    store or another one, gets its own version, and the old one is refused."""
    if not tokens:
        _no_tokens(monkeypatch, generations=True)
    reader = LocalStore(ext2 / "root")
    writer = reader if writer_is_reader else LocalStore(ext2 / "root")
    for i in range(30):
        await writer.erase_values(["y"])
        old = await writer.set("y", b"%08d" % i)
        got = await reader.get_object("y")  # remembered by the reader
        assert got is not None and got.meta.version == old
        await writer.erase_values(["y"])
        new = await writer.set("y", b"%08d" % (i + 1))
        assert new != old
        head_now = reader.head_now("y")
        assert getattr(head_now, "version", new) == new
        got = await reader.get_object("y")
        assert got is not None and got.meta.version == new
        with pytest.raises(ConflictError):
            await reader.get_object("y", if_match=old)
