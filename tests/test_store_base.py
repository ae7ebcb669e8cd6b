"""The Store base class itself: the concurrency bound across event loops, conflict retries."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from collections import Counter

import pytest

from asyncshard.buffers import unwrapped
from asyncshard.errors import ConflictError
from asyncshard.ranges import ByteRange
from asyncshard.store import GetResult, ObjectMeta, Store, retry_on_conflict

LIMIT = 2


class GatedStore(Store):
    """Each ``_get`` waits for its loop's gate; records the most concurrent calls per loop."""

    def __init__(self) -> None:
        super().__init__(max_concurrency=LIMIT)
        self.lock = threading.Lock()
        self.active: Counter[asyncio.AbstractEventLoop] = Counter()
        self.peak: Counter[asyncio.AbstractEventLoop] = Counter()
        self.gates: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}

    def gate(self) -> asyncio.Event:
        return self.gates.setdefault(asyncio.get_running_loop(), asyncio.Event())

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        loop = asyncio.get_running_loop()
        with self.lock:
            self.active[loop] += 1
            self.peak[loop] = max(self.peak[loop], self.active[loop])
        try:
            await self.gate().wait()
        finally:
            with self.lock:
                self.active[loop] -= 1
        return GetResult(b"x", ObjectMeta(key, 1))

    async def _head(self, key: str) -> ObjectMeta | None:
        return None


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_two_loops_used_alternately_keep_their_bounds() -> None:
    store = GatedStore()
    loops = [asyncio.new_event_loop(), asyncio.new_event_loop()]
    tasks: list[asyncio.Task[object]] = []
    try:
        for _ in range(2):  # each loop in turn starts more reads than the bound
            for loop in loops:
                tasks += [loop.create_task(store.get(f"k{i}")) for i in range(3)]
                loop.run_until_complete(_settle())
                assert store.active[loop] == LIMIT
        for loop in loops:
            store.gates[loop].set()
            loop.run_until_complete(asyncio.gather(*(t for t in tasks if t.get_loop() is loop)))
    finally:
        for loop in loops:
            loop.close()
    assert all(t.result() == b"x" for t in tasks)
    assert [store.peak[loop] for loop in loops] == [LIMIT, LIMIT]


def test_two_loops_in_two_threads_keep_their_bounds() -> None:
    store = GatedStore()
    barrier = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []

    async def use_store() -> None:
        first = [asyncio.create_task(store.get(f"a{i}")) for i in range(3)]
        await _settle()  # LIMIT reads running, one waiting: this loop has its semaphore
        barrier.wait()  # both loops have made theirs
        second = [asyncio.create_task(store.get(f"b{i}")) for i in range(3)]
        await _settle()
        barrier.wait()
        store.gate().set()
        await asyncio.gather(*first, *second)

    def thread() -> None:
        try:
            asyncio.run(use_store())
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=thread) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert sorted(store.peak.values()) == [LIMIT, LIMIT]


def test_closed_loops_are_not_kept_alive() -> None:
    """A semaphore that ever made a task wait references its loop; closed loops go."""
    store = GatedStore()
    refs: list[weakref.ref[asyncio.AbstractEventLoop]] = []
    for _ in range(3):
        loop = asyncio.new_event_loop()
        refs.append(weakref.ref(loop))
        tasks = [loop.create_task(store.get(f"k{i}")) for i in range(LIMIT + 1)]
        loop.run_until_complete(_settle())  # one read waits: the semaphore is bound
        store.gates[loop].set()
        loop.run_until_complete(asyncio.gather(*tasks))
        loop.close()
        del loop, tasks
        store.gates.clear()
        store.active.clear()
        store.peak.clear()

    async def one_more_read() -> None:
        store.gate().set()
        assert await store.get("k") == b"x"

    asyncio.run(one_more_read())
    store.gates.clear()
    gc.collect()
    assert [r for r in refs if r() is not None] == []


async def test_a_writer_that_keeps_losing_waits_its_turn() -> None:
    """Conflicts past the attempt count are retried while the patience lasts: a writer
    on a busy object is not failed while others' writes keep landing."""
    started = time.monotonic()
    tries = 0

    async def attempt() -> str:
        nonlocal tries
        tries += 1
        if time.monotonic() - started < 0.15:
            raise ConflictError("k: changed meanwhile", key="k")
        return "written"

    assert await retry_on_conflict(attempt, "k", attempts=2, patience=5.0) == "written"
    assert tries > 2


async def test_retries_end_after_the_attempts_and_the_patience() -> None:
    tries = 0

    async def attempt() -> None:
        nonlocal tries
        tries += 1
        raise ConflictError("k: changed meanwhile", key="k")

    started = time.monotonic()
    with pytest.raises(ConflictError, match="gave up after"):
        await retry_on_conflict(attempt, "k", attempts=3, patience=0.1)
    assert time.monotonic() - started >= 0.1 and tries >= 3
    tries = 0
    with pytest.raises(ConflictError):  # no patience: the attempt count alone
        await retry_on_conflict(attempt, "k", attempts=4, patience=0)
    assert tries == 4


def test_unwrapped_gives_the_viewed_bytes_only_when_whole() -> None:
    data = b"0123456789"
    assert unwrapped(memoryview(data)) is data
    assert unwrapped(data) is data
    for part in (memoryview(data)[2:5], memoryview(data)[::2]):
        assert unwrapped(part) is part, "a part is not the whole object"
    buffer = bytearray(data)
    assert unwrapped(memoryview(buffer)) is buffer
