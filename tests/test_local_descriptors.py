"""LocalStore reads on the event loop through kept descriptors (``descriptors.py``).

A file read in part keeps its descriptor open; every later read checks, with a ``stat``
of the path, that the path still names that file unchanged. These tests change the
files behind the store's back (as another process would) and check that every read
sees the current object, that descriptors stay bounded and are closed on delete and on
close, and that reads answer exactly as the thread path does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from asyncshard.backends import LocalStore
from asyncshard.backends.local import deletes, descriptors, files
from asyncshard.errors import ConflictError, InvalidKeyError
from asyncshard.ranges import Range, Suffix
from asyncshard.store import WOULD_WAIT, GetResult, NowResult, ObjectMeta

pytestmark = pytest.mark.skipif(
    not descriptors.NOWAIT, reason="no RWF_NOWAIT or /proc here: every read uses a thread"
)
SIZE = 100_000


def open_below(folder: Path) -> int:
    """How many descriptors of this process name a file below ``folder`` (other tests'
    descriptors, opened or closed meanwhile, do not count)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(folder) + os.sep)
    return count


def blob(seed: int) -> bytes:
    return bytes((i * seed + seed) % 251 for i in range(SIZE))


def answered(result: NowResult) -> GetResult:
    assert isinstance(result, GetResult), result
    return result


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "root", open_files=4)


def opens(store: LocalStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every descriptor the store opens for a read."""
    calls: list[str] = []
    real = store._root.open_fast

    def counting(key: str, *, check: bool = True) -> int | None:
        calls.append(key)
        return real(key, check=check)

    monkeypatch.setattr(store._root, "open_fast", counting)
    return calls


async def test_partial_reads_reuse_one_descriptor(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.set("shard", blob(3))
    calls = opens(store, monkeypatch)
    for start in (0, 4096, 50_000, 99_990):
        got = answered(store.get_now("shard", Range(start, start + 16)))
        assert bytes(got.data) == blob(3)[start : start + 16]
        assert got.meta.size == SIZE
    assert calls == ["shard"]
    assert store._inline.open_count == 1
    assert bytes(answered(store.get_now("shard", Suffix(5))).data) == blob(3)[-5:]
    assert await store.get("shard", Range(10, 20)) == blob(3)[10:20]  # the async verb too
    assert calls == ["shard"]


async def test_whole_reads_keep_nothing(store: LocalStore) -> None:
    await store.set("flat", b"0123456789")
    assert bytes(answered(store.get_now("flat")).data) == b"0123456789"
    assert store._inline.open_count == 0


async def test_metadata_of_a_whole_file_is_remembered_until_it_changes(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file read whole again, unchanged, reuses its metadata (no ``getxattr``) from its
    second opening on; a new version token set in place, a rewrite in place and a
    replacement are all seen. (A file changed within ``SETTLED_NS`` of being remembered
    has its tag read again: ``test_local_versions``.)"""
    monkeypatch.setattr(descriptors, "SETTLED_NS", 0)  # as if written long ago
    await store.set("flat", b"0123456789")
    answered(store.get_now("flat"))  # opened once: nothing remembered yet
    first = answered(store.get_now("flat"))
    tokens: list[object] = []
    real = descriptors.tag_of

    def counting(target: int | str) -> files.Tag:
        tokens.append(target)
        return real(target)

    monkeypatch.setattr(descriptors, "tag_of", counting)
    again = answered(store.get_now("flat"))
    assert again.meta == first.meta and tokens == []
    path = tmp_path / "root" / "flat"
    time.sleep(0.02)  # file times move in clock ticks (a few ms): let the change show
    try:
        os.setxattr(path, files.VERSION_XATTR, b"another-token")
    except OSError:
        pytest.skip("no user xattrs on this file system")
    retagged = answered(store.get_now("flat"))
    assert retagged.meta.version == "tanother-token" and len(tokens) == 1
    time.sleep(0.02)
    with open(path, "r+b") as f:  # the same size, other bytes
        f.write(b"ABC")
    rewritten = answered(store.get_now("flat"))
    assert bytes(rewritten.data) == b"ABC3456789" and len(tokens) == 2
    await LocalStore(tmp_path / "root").set("flat", b"replaced!!")
    replaced = answered(store.get_now("flat"))
    assert bytes(replaced.data) == b"replaced!!"
    assert replaced.meta.version not in (first.meta.version, retagged.meta.version)


async def test_head_now_vouches_only_for_a_file_settled_when_read(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``head_now`` answers on the calling thread. It returns the metadata object of a
    read (the bytes of that read are still the file's) only while the path names the
    file of that read, unchanged, and the file had last changed ``SETTLED_NS`` before
    it was read: a rewrite in place within one clock tick keeps the identity. Otherwise
    it returns equal metadata in a new object, or the current file's."""
    await store.set("flat", b"0123456789")
    first = answered(store.get_now("flat"))  # the file changed just now: not settled
    now = store.head_now("flat")
    assert now == first.meta and now is not first.meta
    monkeypatch.setattr(descriptors, "SETTLED_NS", 0)
    later = store.head_now("flat")  # settled now, but not when it was read
    assert later == first.meta and later is not first.meta
    settled = answered(store.get_now("flat"))
    assert settled.meta == first.meta and settled.meta is not first.meta
    stats = store.stats.requests
    before = (stats["head"], stats["get"])
    assert store.head_now("flat") is settled.meta
    assert (stats["head"], stats["get"]) == (before[0] + 1, before[1])
    path = tmp_path / "root" / "flat"
    time.sleep(0.02)  # file times move in clock ticks (a few ms): let the change show
    with open(path, "r+b") as f:  # the same size, other bytes
        f.write(b"ABC")
    rewritten = store.head_now("flat")
    assert isinstance(rewritten, ObjectMeta) and rewritten != settled.meta
    assert answered(store.get_now("flat")).meta is rewritten
    await LocalStore(tmp_path / "root").set("flat", b"replaced!!")
    replaced = store.head_now("flat")
    assert isinstance(replaced, ObjectMeta) and replaced.version != rewritten.version
    path.unlink()
    assert store.head_now("flat") is None
    assert store.head_now("never") is None
    assert LocalStore(tmp_path / "root", inline_reads=False).head_now("flat") is WOULD_WAIT


async def test_a_remembered_file_is_not_located_again_but_another_file_is(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``/proc/self/fd`` check runs once per remembered file identity: a file read
    whole again skips it (from its third opening on: its metadata is remembered from the
    second), and a folder swapped for a link to outside (another identity behind the
    same key) is located again and refused."""
    await store.set("dir/f", b"inside!")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(b"OUTSIDE")
    located: list[int] = []
    real = store._root.inside

    def counting(fd: int, key: str) -> bool:
        located.append(fd)
        return real(fd, key)

    monkeypatch.setattr(store._root, "inside", counting)
    for _ in range(3):
        assert bytes(answered(store.get_now("dir/f")).data) == b"inside!"
    assert len(located) == 2
    os.rename(tmp_path / "root" / "dir", tmp_path / "kept")
    (tmp_path / "root" / "dir").symlink_to(outside)
    assert store.get_now("dir/f") is WOULD_WAIT  # refused here; the thread path says why
    assert len(located) == 3
    with pytest.raises(InvalidKeyError, match="outside the store root"):
        await store.get("dir/f")


async def test_replaced_file_is_seen_at_once(tmp_path: Path, store: LocalStore) -> None:
    """Replaced by another writer (a second store, as another process would), by a plain
    rename, or rewritten in place: the next read has the new bytes and version."""
    await store.set("shard", blob(3))
    first = answered(store.get_now("shard", Range(0, 8)))
    other = LocalStore(tmp_path / "root")
    await other.set("shard", blob(5))
    second = answered(store.get_now("shard", Range(0, 8)))
    assert bytes(second.data) == blob(5)[:8] and second.meta.version != first.meta.version
    path = tmp_path / "root" / "shard"
    (tmp_path / "root" / "new").write_bytes(blob(7))
    os.rename(tmp_path / "root" / "new", path)  # same size, no version token
    third = answered(store.get_now("shard", Range(0, 8)))
    assert bytes(third.data) == blob(7)[:8] and third.meta.version != second.meta.version
    with open(path, "r+b") as f:  # in place: the same inode, other bytes
        f.write(b"INPLACE!")
    assert bytes(answered(store.get_now("shard", Range(0, 8))).data) == b"INPLACE!"
    with open(path, "ab") as f:  # grown in place
        f.write(b"tail")
    grown = answered(store.get_now("shard", Suffix(4)))
    assert bytes(grown.data) == b"tail" and grown.meta.size == SIZE + 4


async def test_deleted_file_reads_as_missing_and_is_closed(
    tmp_path: Path, store: LocalStore
) -> None:
    await store.set("a", blob(3))
    await store.set("b", blob(5))
    answered(store.get_now("a", Range(0, 8)))
    answered(store.get_now("b", Range(0, 8)))
    assert store._inline.open_count == 2
    os.unlink(tmp_path / "root" / "a")  # behind the store's back
    assert store.get_now("a", Range(0, 8)) is None
    assert await store.get("a", Range(0, 8)) is None
    assert store._inline.open_count == 1
    await store.erase_values(["b"])  # through the store: closed at once
    assert store._inline.open_count == 0
    assert store.get_now("b", Range(0, 8)) is None


async def test_conditions_hold_on_a_kept_descriptor(store: LocalStore) -> None:
    version = await store.set("shard", blob(3))
    answered(store.get_now("shard", Range(0, 8)))
    got = answered(store.get_now("shard", Range(8, 16), if_match=version))
    assert bytes(got.data) == blob(3)[8:16]
    with pytest.raises(ConflictError):
        store.get_now("shard", Range(0, 8), if_match="not-the-version")
    newer = await store.set("shard", blob(5))
    with pytest.raises(ConflictError):
        store.get_now("shard", Range(0, 8), if_match=version)
    assert (
        bytes(answered(store.get_now("shard", Range(0, 8), if_match=newer)).data) == (blob(5)[:8])
    )


async def test_descriptors_are_bounded_and_closed(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "root", open_files=3)
    for i in range(10):
        await store.set(f"s/{i}", blob(i + 1))
    for i in range(10):
        assert bytes(answered(store.get_now(f"s/{i}", Range(1, 9))).data) == blob(i + 1)[1:9]
        assert store._inline.open_count == min(i + 1, 3)
    assert open_below(tmp_path) == 3
    await store.close()
    assert store._inline.open_count == 0
    assert open_below(tmp_path) == 0
    none = LocalStore(tmp_path / "root", open_files=0)
    answered(none.get_now("s/0", Range(0, 4)))
    assert none._inline.open_count == 0
    with pytest.raises(ValueError, match="open_files"):
        LocalStore(tmp_path / "root", open_files=-1)


async def test_what_the_loop_cannot_read_goes_to_a_thread(tmp_path: Path) -> None:
    """A large read, a folder, a link name and ``inline_reads=False`` decline
    (``WOULD_WAIT``); the async verbs still answer them."""
    store = LocalStore(tmp_path / "root")
    big = os.urandom(descriptors.INLINE_READ + 1)
    await store.set("big", big)
    await store.set("dir/x", b"x")
    (tmp_path / "root" / "alias").symlink_to("big")
    assert store.get_now("big") is WOULD_WAIT
    assert await store.get("big") == big
    assert store.get_now("dir") is WOULD_WAIT
    assert await store.get("dir") is None
    assert store.get_now("alias", Range(0, 4)) is WOULD_WAIT
    assert await store.get("alias", Range(0, 4)) == big[:4]
    threaded = LocalStore(tmp_path / "root", inline_reads=False)
    assert threaded.get_now("dir/x") is WOULD_WAIT
    assert await threaded.get("dir/x") == b"x"
    assert threaded.open_options["open_files"] == descriptors.DEFAULT_OPEN_FILES


def deleted_open_files() -> list[str]:
    """Files this process holds open that no longer have a name."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            out.append(target)
    return out


async def test_writes_copies_and_deletes_through_the_store_free_the_old_file(
    tmp_path: Path, store: LocalStore
) -> None:
    """A kept descriptor of a file the store replaces or deletes is closed once the
    change is done: the old file's space is freed at once."""
    for change in ("set", "set_many", "copy", "erase", "erase_if_match"):
        version = await store.set("shard", blob(3))
        await store.set("other", blob(5))
        answered(store.get_now("shard", Range(0, 8)))
        assert store._inline.open_count == 1
        if change == "set":
            await store.set("shard", blob(7))
        elif change == "set_many":
            await store.set_many([("shard", blob(7))])
        elif change == "copy":
            await store.copy("other", "shard")
        elif change == "erase":
            await store.erase_values(["shard"])
        else:
            await store.erase_if_match("shard", version)
        assert store._inline.open_count == 0, change
        assert not [p for p in deleted_open_files() if p.startswith(str(tmp_path))], change


async def test_kept_descriptors_are_closed_before_the_change_runs(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The descriptor of a file a write, copy or delete replaces is closed before that
    change starts, while the file is still linked: the change (in its worker thread)
    then frees the old file's blocks, never a ``close`` on the event loop (10 ms for
    16 MiB on ext4)."""
    seen: list[tuple[str, int]] = []

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            seen.append((name, store._inline.open_count))
            return real(*args, **kwargs)

        return run

    monkeypatch.setattr(deletes, "unlink_many", spy("erase", deletes.unlink_many))
    monkeypatch.setattr(deletes, "unlink_if_match", spy("erase_if_match", deletes.unlink_if_match))
    for name in ("write", "write_batch", "link_batch"):
        monkeypatch.setattr(store._writer, name, spy(name, getattr(store._writer, name)))
    changes: dict[str, Callable[[str], Awaitable[object]]] = {
        "write": lambda _: store.set("shard", blob(7)),
        "write_batch": lambda _: store.set_many([("shard", blob(7))]),
        "link_batch": lambda _: store.copy("other", "shard"),
        "erase": lambda _: store.erase_values(["shard"]),
        "erase_if_match": lambda version: store.erase_if_match("shard", version),
    }
    for name, change in changes.items():
        version = await store.set("shard", blob(3))
        await store.set("other", blob(5))
        answered(store.get_now("shard", Range(0, 8)))
        assert store._inline.open_count == 1
        seen.clear()
        await change(version or "")
        assert seen == [(name, 0)], name


async def test_no_descriptor_leaks_on_unexpected_errors(
    tmp_path: Path, store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metadata that cannot be turned into an answer (an mtime no ``datetime`` holds)
    raises without leaving the descriptor open."""
    await store.set("shard", blob(3))

    def broken(*_: object) -> object:
        raise ValueError("year 10000 is out of range")

    monkeypatch.setattr(descriptors, "meta_of", broken)
    for _ in range(5):
        with pytest.raises(ValueError):
            store.get_now("shard", Range(0, 8))
    assert open_below(tmp_path) == 0


def test_a_dropped_store_closes_its_descriptors(tmp_path: Path) -> None:
    import asyncio
    import gc

    store = LocalStore(tmp_path / "root")
    asyncio.run(store.set("shard", blob(3)))
    answered(store.get_now("shard", Range(0, 8)))
    assert open_below(tmp_path) == 1
    del store
    gc.collect()
    assert open_below(tmp_path) == 0


async def test_a_kept_descriptor_reads_with_the_settled_metadata(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file read in part before it settled keeps its descriptor; once ``head_now``
    remembers it again as settled, reads through that descriptor return the settled
    metadata object, so that what they give can be vouched for."""
    await store.set("shard", blob(3))
    early = answered(store.get_now("shard", Range(0, 8)))
    assert store._inline.open_count == 1
    monkeypatch.setattr(descriptors, "SETTLED_NS", 0)
    settled = store.head_now("shard")
    assert settled == early.meta and settled is not early.meta
    again = answered(store.get_now("shard", Range(8, 16)))
    assert again.meta is settled and store.head_now("shard") is settled


async def test_files_opened_once_leave_no_metadata_behind(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass over many files (a conversion, ``verify``) opens each once: their metadata
    is not remembered (the doorkeeper's false positives aside), so the store's memory
    does not grow with the pass. Files opened again are remembered, within a bound in
    bytes that charges each key's length. Reads go through ``get``, which tries the
    inline path first (what remembers) and takes a thread when a page is not cached:
    ``RWF_NOWAIT`` may answer "would block" for a page the kernel holds locked."""
    keys = [f"c/{i // 100}/{i % 100}" for i in range(3000)]
    await store.set_many([(k, b"x" * 8) for k in keys])
    inline = store._inline
    for key in keys:
        assert bytes(await store.get(key) or b"") == b"x" * 8
    assert len(inline._metas) <= 3
    assert store.head_now("c/0/0") is not None and len(inline._metas) <= 4
    for key in keys:
        assert await store.get(key) is not None
    assert len(inline._metas) == len(keys)
    assert inline._metas_bytes == sum(descriptors.ENTRY_BYTES + len(k) for k in keys)
    await store.erase_values(keys[:10])
    assert inline._metas_bytes == sum(descriptors.ENTRY_BYTES + len(k) for k in keys[10:])
    monkeypatch.setattr(descriptors, "REMEMBERED_BYTES", 100 * (descriptors.ENTRY_BYTES + 6))
    other = LocalStore(store.root)
    for _ in range(2):
        for key in keys[10:]:
            assert await other.get(key) is not None
    assert 0 < len(other._inline._metas) <= 100
    assert other._inline._metas_bytes <= descriptors.REMEMBERED_BYTES


def test_the_doorkeeper_starts_over_after_its_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key counts as seen from its second sighting on, until ``SEEN_KEYS`` other keys
    were seen once: then everything is forgotten."""
    monkeypatch.setattr(descriptors, "SEEN_KEYS", 50)
    door = descriptors.Doorkeeper()
    assert not door.seen("a") and door.seen("a") and door.seen("a")
    firsts = [door.seen(f"k{i}") for i in range(49)]
    assert sum(firsts) <= 1 and door.seen("a")  # 50 keys so far
    assert not door.seen("new")  # the 51st: it starts over
    assert not door.seen("a") and door.seen("new")
