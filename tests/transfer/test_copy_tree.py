"""copy_tree between local and memory stores: streaming, skipping, atomicity, errors."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncshard import (
    CopyError,
    LocalStore,
    MemoryStore,
    NothingToCopyError,
    OverlappingStoresError,
    copy_tree,
    copy_tree_async,
)
from asyncshard.objects import StoreStats
from asyncshard.transfer import CopiedObject, remove_tree_async
from asyncshard.tree_verbs import Parts
from tests.transfer.conftest import read_tree, write_tree

PART = 1 << 20


async def test_local_to_local_copies_everything_then_skips_everything(
    tmp_path: Path, tree: dict[str, bytes]
) -> None:
    summary = await copy_tree_async(tmp_path / "src", tmp_path / "dst", part_size=PART)
    assert (summary.copied, summary.skipped, summary.failed) == (len(tree), 0, 0)
    assert summary.bytes_copied == sum(map(len, tree.values()))
    assert read_tree(tmp_path / "dst") == tree
    dst = LocalStore(tmp_path / "dst")
    again = await copy_tree_async(tmp_path / "src", dst, part_size=PART)
    assert (again.copied, again.skipped) == (0, len(tree))
    assert dst.stats.requests["put"] == 0  # nothing written the second time
    assert dst.stats.bytes_written == 0


async def test_an_object_changed_at_equal_size_is_copied_again(
    tmp_path: Path, tree: dict[str, bytes]
) -> None:
    await copy_tree_async(tmp_path / "src", tmp_path / "dst", part_size=PART)
    changed = bytearray(tree["big/blob"])
    changed[-1] ^= 0xFF  # same size, last part differs
    write_tree(tmp_path / "src", {"big/blob": bytes(changed), "c/3": b"x" * 4096})
    summary = await copy_tree_async(tmp_path / "src", tmp_path / "dst", part_size=PART)
    assert (summary.copied, summary.skipped) == (2, len(tree) - 2)
    assert (tmp_path / "dst/big/blob").read_bytes() == bytes(changed)
    assert (tmp_path / "dst/c/3").read_bytes() == b"x" * 4096


async def test_size_only_skips_on_equal_sizes(tmp_path: Path, tree: dict[str, bytes]) -> None:
    await copy_tree_async(tmp_path / "src", tmp_path / "dst")
    write_tree(tmp_path / "src", {"c/3": b"x" * 4096})
    summary = await copy_tree_async(tmp_path / "src", tmp_path / "dst", size_only=True)
    assert summary.copied == 0
    assert (tmp_path / "dst/c/3").read_bytes() == tree["c/3"]


async def test_prefixes_map_keys() -> None:
    src = MemoryStore()
    await src.set_many([("raw/x", b"1"), ("raw/y/z", b"2"), ("rawer", b"3"), ("other", b"4")])
    dst = MemoryStore()
    summary = await copy_tree_async(src, dst, "raw/", "copy/")
    assert summary.copied == 2
    assert sorted([k async for k in dst.list()]) == ["copy/x", "copy/y/z"]


def test_the_sync_twin_copies(tmp_path: Path) -> None:
    write_tree(tmp_path / "s", {"k": b"v"})
    assert copy_tree(str(tmp_path / "s"), str(tmp_path / "d")).copied == 1
    assert (tmp_path / "d/k").read_bytes() == b"v"


async def test_progress_sees_every_object(tmp_path: Path, tree: dict[str, bytes]) -> None:
    seen: list[CopiedObject] = []
    await copy_tree_async(tmp_path / "src", MemoryStore(), progress=seen.append)
    assert sorted(o.key for o in seen) == sorted(tree)
    assert {o.outcome for o in seen} == {"copied"}


async def test_an_empty_source_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NothingToCopyError):
        await copy_tree_async(tmp_path / "empty", tmp_path / "dst")
    with pytest.raises(NothingToCopyError):
        await copy_tree_async(MemoryStore(), MemoryStore(), "nothing/")


async def test_overlapping_places_are_refused_before_any_request(tmp_path: Path) -> None:
    src = LocalStore(tmp_path / "data")
    for dst, dst_prefix in [
        (LocalStore(tmp_path / "data"), "copy/"),  # inside the source
        (LocalStore(tmp_path), ""),  # holds the source
        (src, ""),  # itself
    ]:
        with pytest.raises(OverlappingStoresError):
            await copy_tree_async(src, dst, "", dst_prefix)
        assert not dst.stats.requests
    assert not src.stats.requests
    memory = MemoryStore()
    with pytest.raises(OverlappingStoresError):
        await copy_tree_async(memory, memory, "a", "ab/")  # a matches ab/...
    await memory.set("a/x", b"1")
    assert (await copy_tree_async(memory, memory, "a/", "b/")).copied == 1


async def test_failures_are_counted_named_and_raised_after_the_rest(tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {"ok/1": b"1", "blocked/x": b"2", "ok/2": b"3"})
    write_tree(tmp_path / "dst", {"blocked": b"a file where a folder must go"})
    with pytest.raises(CopyError) as raised:
        await copy_tree_async(
            tmp_path / "src", tmp_path / "dst", keys=["ok/1", "gone", "blocked/x", "ok/2"]
        )
    summary = raised.value.summary
    assert (summary.copied, summary.failed) == (2, 2)
    assert sorted(k for k, _ in summary.failures) == ["blocked/x", "gone"]
    assert "blocked/x" in str(raised.value) and "gone" in str(raised.value)
    assert (tmp_path / "dst/ok/2").read_bytes() == b"3"


async def test_memory_stays_within_the_buffer_bound(tmp_path: Path) -> None:
    size, count = 24 << 20, 6  # 144 MiB through a 4 MiB budget
    for i in range(count):
        path = tmp_path / "src" / f"blob{i}"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            for _ in range(size >> 20):
                f.write(os.urandom(1 << 20))
    tracemalloc.start()
    try:
        summary = await copy_tree_async(
            LocalStore(tmp_path / "src"),
            LocalStore(tmp_path / "dst", durable=False),
            part_size=1 << 20,
            max_buffer=4 << 20,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary.copied == count
    assert peak < 16 << 20, f"peak {peak >> 20} MiB for a 4 MiB bound"  # generous margin
    assert (tmp_path / "dst/blob5").stat().st_size == size


async def _parts_then_fail() -> AsyncIterator[bytes]:
    yield b"x" * 1000
    raise OSError("the source broke off")


@pytest.mark.parametrize("store_kind", ["local", "memory"])
async def test_a_failed_streamed_write_leaves_nothing_visible(
    tmp_path: Path, store_kind: str
) -> None:
    store = LocalStore(tmp_path / "s") if store_kind == "local" else MemoryStore()
    await store.set("k", b"old")
    with pytest.raises(OSError, match="broke off"):
        await store.set_stream("k", _parts_then_fail())
    with pytest.raises(OSError, match="broke off"):
        await store.set_stream("new/k", _parts_then_fail())
    assert await store.get("k") == b"old"
    assert [k async for k in store.list()] == ["k"]
    if store_kind == "local":
        assert sorted(p.name for p in (tmp_path / "s").rglob("*")) == ["k"]


async def _two_parts() -> AsyncIterator[bytes]:
    yield b"a" * 10
    yield b"b" * 5


@pytest.mark.parametrize("store_kind", ["local", "memory"])
async def test_set_stream_takes_a_callable_that_opens_the_parts(
    tmp_path: Path, store_kind: str
) -> None:
    """Parts given as a callable (what lets an object store send a refused upload again
    from its start) are written as an iterable is, and counted once."""
    store = LocalStore(tmp_path / "s") if store_kind == "local" else MemoryStore()
    await store.set_stream("k", _two_parts)
    assert await store.get("k") == b"a" * 10 + b"b" * 5
    assert store.stats.bytes_written == 15 and store.stats.requests["put"] == 1


async def test_parts_read_again_count_their_last_pass() -> None:
    """A callable source is opened afresh at each pass, the bytes of an abandoned pass
    taken back out of ``bytes_written``; a plain iterable is read once."""
    stats = StoreStats()
    parts = Parts(_two_parts, stats)
    assert parts.reopens
    first = aiter(parts)
    assert await anext(first) == b"a" * 10  # a pass abandoned after one part
    assert stats.bytes_written == 10
    assert [p async for p in parts] == [b"a" * 10, b"b" * 5]
    assert stats.bytes_written == 15
    once = Parts(_two_parts(), stats)
    assert not once.reopens
    assert [p async for p in once] == [b"a" * 10, b"b" * 5]
    with pytest.raises(RuntimeError, match="cannot be read again"):
        aiter(once)


async def test_list_objects_is_an_async_generator_of_metadata(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set_many([("a/1", b"1"), ("a/22", b"22"), ("b", b"")])
    metas = {m.key: m.size async for m in store.list_objects("a/")}
    assert metas == {"a/1": 1, "a/22": 2}


async def test_remove_tree_deletes_below_a_prefix_only(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.set_many([(f"d/{i}", b"x") for i in range(2500)] + [("dd", b"y")])
    assert await remove_tree_async(store, "d/") == 2500
    assert [k async for k in store.list()] == ["dd"]
    assert not (tmp_path / "d").exists()
