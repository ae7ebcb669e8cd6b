"""The write gate of the inner-chunk view: chunk writes of one shard arriving a few ticks
apart leave together (one shard write), counted at the backend."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence

import pytest

from asyncshard.backends import MemoryStore
from asyncshard.buffers import BytesLike
from asyncshard.cache import LoadingCache
from asyncshard.sharding.engine.indexes import KEPT_SHARDS
from asyncshard.sharding.volume import PrecomputedVolume
from asyncshard.views import UnshardedView
from asyncshard.views.datasets import Dataset
from asyncshard.views.gate import WriteGate
from tests.precomputed.test_store import volume_store
from tests.zarr_python.helpers import sharded_doc

#: 1-d uint8 array of 16 elements: shards of 8 = 4 inner chunks of 2 (2 shards).
ARRAY = sharded_doc()


async def _view(
    window: float, flush_at: Callable[[], int] | None = None
) -> tuple[MemoryStore, UnshardedView]:
    inner = MemoryStore()
    await inner.set("a/zarr.json", json.dumps(ARRAY).encode())
    view = UnshardedView(inner, writable=True, write_window=window, write_flush_at=flush_at)
    await view.get("a/zarr.json")  # the view knows the array
    inner.stats.reset()
    return inner, view


async def _spaced(*writes: Callable[[], object]) -> None:
    """Start the writes one event-loop tick apart; wait for all."""
    tasks = []
    for write in writes:
        tasks.append(asyncio.ensure_future(write()))  # type: ignore[arg-type]
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)


def _set(view: UnshardedView, i: int) -> Callable[[], object]:
    return lambda: view.set(f"a/c/{i}", bytes([i, i]))


async def test_writes_a_few_ticks_apart_make_one_shard_write() -> None:
    inner, view = await _view(window=0.05)
    await _spaced(_set(view, 0), _set(view, 1), lambda: view.erase_values(["a/c/2"]))
    assert inner.stats.requests == {"get": 1, "put": 1}  # one read-merge-write
    inner, view = await _view(window=0)  # without the gate: one shard write per tick
    await _spaced(_set(view, 0), _set(view, 1), lambda: view.erase_values(["a/c/2"]))
    assert inner.stats.requests == {"get": 1, "put": 3}  # then from the shard as written


async def test_a_whole_shard_leaves_at_once_without_a_read() -> None:
    inner, view = await _view(window=30)
    start = time.monotonic()
    await _spaced(*(_set(view, i) for i in range(4)))
    assert time.monotonic() - start < 5  # did not wait for the window
    assert inner.stats.requests == {"put": 1}
    assert await view.get("a/c/3") == bytes([3, 3])


async def test_enough_waiting_writes_leave_at_once() -> None:
    inner, view = await _view(window=30, flush_at=lambda: 3)
    await asyncio.wait_for(_spaced(_set(view, 0), _set(view, 4), _set(view, 5)), 5)
    assert inner.stats.requests == {"get": 2, "put": 2}  # two shards, one write each


async def test_writes_arriving_during_a_shard_write_wait_for_it() -> None:
    inner, view = await _view(window=30, flush_at=lambda: 1)  # every write leaves at once
    await _spaced(_set(view, 0), _set(view, 1), _set(view, 2))
    assert inner.stats.requests["put"] == 2  # the first alone; the others after it, together


async def test_a_cancelled_waiting_write_writes_nothing() -> None:
    _, view = await _view(window=0.05)
    doomed = asyncio.ensure_future(view.set("a/c/0", b"\x07\x07"))
    kept = asyncio.ensure_future(view.set("a/c/1", b"\x01\x01"))
    await asyncio.sleep(0)
    doomed.cancel()
    await kept
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert await view.get("a/c/0") is None and await view.get("a/c/1") == b"\x01\x01"


class _SlowWrites(MemoryStore):
    """A store whose writes take a while (a shard write's I/O)."""

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        await asyncio.sleep(0.01)
        return await super()._set(key, data, if_match, if_absent)


async def test_concurrent_callers_share_shard_writes() -> None:
    """Four callers that each keep at most ``flush_at()`` writes in flight (zarr-python's
    ``async.concurrency``, one per array operation), two per shard: once the gate has
    seen more writes in flight than one caller keeps, it no longer releases every shard
    whenever ``flush_at()`` writes wait, so a shard write carries both callers' writes
    (24 shard writes when it did, 12 at best). Every value lands."""
    inner = _SlowWrites()
    doc = sharded_doc(shape=256, shard=128, chunk=2)  # 64 chunks per shard
    await inner.set("a/zarr.json", json.dumps(doc).encode())
    view = UnshardedView(inner, writable=True, write_window=0.05, write_flush_at=lambda: 4)
    await view.get("a/zarr.json")
    inner.stats.reset()

    async def operation(chunks: range) -> None:
        bound = asyncio.Semaphore(4)

        async def write(i: int) -> None:
            async with bound:
                await asyncio.sleep(0)  # encoding the chunk
                await view.set(f"a/c/{i}", bytes([i, i]))

        await asyncio.gather(*(write(i) for i in chunks))

    ranges = [range(0, 24), range(24, 48), range(64, 88), range(88, 112)]
    await asyncio.wait_for(asyncio.gather(*(operation(r) for r in ranges)), 10)
    assert inner.stats.requests["put"] <= 18
    chunks = [i for r in ranges for i in r]
    assert [await view.get(f"a/c/{i}") for i in chunks] == [bytes([i, i]) for i in chunks]


async def test_a_lower_peak_releases_every_waiting_shard() -> None:
    """flush_at 2: caller B's two writes of shard 1 leave at once; caller A's two writes
    of shard 0 arrive while they run (4 in flight: two callers, limit 4). When B's shard
    write ends, A's writes are all one caller has: they leave then, not after the
    window."""
    inner = _SlowWrites()
    await inner.set("a/zarr.json", json.dumps(ARRAY).encode())
    view = UnshardedView(inner, writable=True, write_window=30, write_flush_at=lambda: 2)
    await view.get("a/zarr.json")

    async def caller_a() -> None:
        await asyncio.sleep(0.001)  # B's writes run by now
        await asyncio.gather(view.set("a/c/0", b"\0\0"), view.set("a/c/1", b"\1\1"))

    caller_b = asyncio.gather(view.set("a/c/4", b"\4\4"), view.set("a/c/5", b"\5\5"))
    await asyncio.wait_for(asyncio.gather(caller_a(), caller_b), 5)  # not the 30 s window
    assert await view.get("a/c/1") == b"\1\1" and await view.get("a/c/5") == b"\5\5"


async def test_a_caller_cancelled_as_its_write_is_released_writes_nothing() -> None:
    """Cancelled in the tick its group is released (before the batch starts): its write
    leaves the batch, so nothing of it runs after the caller saw the cancellation."""
    gate = WriteGate(window=30, max_wait=60, flush_at=lambda: 2)
    ran: list[int] = []

    def op(n: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            ran.append(n)

        return run

    first = asyncio.ensure_future(gate.run("g", op(1)))
    await asyncio.sleep(0)  # waiting in the gate
    second = asyncio.ensure_future(gate.run("g", op(2)))  # its first step releases both
    first.cancel()  # handled after that step, before the batch's task starts
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert ran == [2]


async def test_a_precomputed_shard_written_whole_leaves_at_once() -> None:
    """Every chunk of a precomputed volume shard (the ids that hash to it) through the
    gate: released at once and written without a read, as a whole Zarr shard is."""
    inner = await volume_store()
    volume = await PrecomputedVolume.open(inner, "data/vol", cache=LoadingCache())
    scale = volume.scale("8_8_8")
    x, y, z = scale.scale.grid_shape
    names = [
        scale.scale.chunk_name((i, j, k)) for i in range(x) for j in range(y) for k in range(z)
    ]
    by_shard: dict[str, list[str]] = {}
    for name in names:
        by_shard.setdefault(scale.store.shard_key(scale.chunk_id(name)), []).append(name)
    members = max(by_shard.values(), key=len)
    view = UnshardedView(inner, writable=True, write_window=30, write_flush_at=lambda: 10**6)
    await view.get("data/vol/info")
    inner.stats.reset()
    writes = (view.set(f"data/vol/8_8_8/{n}", n.encode()) for n in members)
    await asyncio.wait_for(asyncio.gather(*writes), 5)
    assert inner.stats.requests == {"put": 1}


def _kept(dataset: Dataset, shard_key: str) -> bool:
    """Whether the dataset's sharded store keeps a copy of ``shard_key``."""
    (scope,) = dataset.scopes
    return KEPT_SHARDS.peek((scope.store.indexes.namespace, shard_key)) is not None


async def _dataset(view: UnshardedView) -> Dataset:
    node = await view.folders.find("a/c/0")
    assert node is not None and node.dataset is not None
    return node.dataset


async def test_closing_the_view_drops_the_shards_its_datasets_kept() -> None:
    _, view = await _view(window=0)
    await view.set("a/c/0", b"\1\1")
    dataset = await _dataset(view)
    assert _kept(dataset, "a/c/0")
    await view.close()
    assert not _kept(dataset, "a/c/0")


async def test_a_dataset_erased_through_the_view_keeps_no_shard() -> None:
    """``erase_prefix`` at an array's folder deletes its shards in the wrapped store; an
    array made again there with the same metadata (the same sharded store, reused) does
    not first try a conditional write from the copy of a shard that is gone."""
    inner, view = await _view(window=0)
    await view.set("a/c/0", b"\1\1")
    dataset = await _dataset(view)
    await view.erase_prefix("a/")
    assert not _kept(dataset, "a/c/0")
    await inner.set("a/zarr.json", json.dumps(ARRAY).encode())
    assert await _dataset(view) is dataset  # the same stores
    inner.stats.reset()
    await view.set("a/c/0", b"\2\2")
    assert inner.stats.requests["put"] == 1  # no failed write from a copy first
    assert await view.get("a/c/0") == b"\2\2"


async def test_a_dataset_reopened_with_other_shards_drops_what_the_old_one_kept() -> None:
    inner, view = await _view(window=0)
    await view.set("a/c/0", b"\1\1")
    old = await _dataset(view)
    await inner.set("a/zarr.json", json.dumps(sharded_doc(shard=4)).encode())
    view.folders.invalidate("a/")
    assert await _dataset(view) is not old
    assert not _kept(old, "a/c/0")


def test_event_loops_running_at_once_keep_their_own_groups() -> None:
    """Two threads, each with its own event loop, write group ``k`` through one gate at
    the same time: each loop's two writes complete its group and leave at once (a gate
    that kept one loop's state at a time dropped the first loop's waiting write)."""
    gate = WriteGate(window=30, max_wait=30)
    first_in, other_done = threading.Event(), threading.Event()
    results: dict[str, object] = {}

    def pair(tags: Sequence[Hashable]) -> bool:
        return len(tags) == 2

    async def writes(name: str, *, pause: bool) -> list[str]:
        async def op() -> str:
            return name

        one = asyncio.ensure_future(gate.run("k", op, tag=1, complete=pair))
        await asyncio.sleep(0)
        if pause:  # the other loop writes while this one's first write waits
            first_in.set()
            await asyncio.to_thread(other_done.wait, 10)
        two = asyncio.ensure_future(gate.run("k", op, tag=2, complete=pair))
        return list(await asyncio.wait_for(asyncio.gather(one, two), 5))

    def thread(name: str, pause: bool) -> None:
        try:
            if not pause:
                first_in.wait(10)
            results[name] = asyncio.run(writes(name, pause=pause))
        except BaseException as exc:  # reported by the assertion below
            results[name] = exc
        finally:
            if not pause:
                other_done.set()

    threads = [threading.Thread(target=thread, args=(n, n == "a")) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == {"a": ["a", "a"], "b": ["b", "b"]}


async def test_a_dataset_pushed_out_of_the_remembered_folders_drops_what_it_kept() -> None:
    inner = MemoryStore()
    for folder in ("a", "b"):
        await inner.set(f"{folder}/zarr.json", json.dumps(ARRAY).encode())
    view = UnshardedView(inner, writable=True, write_window=0, max_folders=2)
    await view.set("a/c/0", b"\1\1")
    dataset = await _dataset(view)
    assert _kept(dataset, "a/c/0")
    await view.get("b/zarr.json")  # the root and b/ are the two remembered folders now
    assert not _kept(dataset, "a/c/0")


def test_a_cancelled_lone_write_leaves_nothing_holding_its_loop() -> None:
    """A write cancelled while it waits alone in its group takes the group (and its
    quiet timer, which refers to the loop) with it: a closed loop is not kept alive."""
    gate = WriteGate(window=30, max_wait=30)
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def main() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))

        async def op() -> int:
            return 1

        task = asyncio.ensure_future(gate.run("k", op))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    gc.collect()
    assert loops[0]() is None
