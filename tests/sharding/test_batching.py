"""The micro-batcher: requests of one tick grouped into one batch call per group."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from asyncshard.sharding.batching import Batcher


class Recorder:
    """A batch function that records each call (its requests and the task it ran in)
    and answers ``request * 10``; request ``-1`` fails alone, ``-55`` fails its batch."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[list[int], asyncio.Task[object] | None]] = []
        self.delay = delay
        self.finished = 0

    async def __call__(self, requests: Sequence[int]) -> list[int | BaseException]:
        self.calls.append((list(requests), asyncio.current_task()))
        await asyncio.sleep(self.delay)
        if -55 in requests:
            raise RuntimeError("the whole batch failed")
        self.finished += 1
        return [ValueError(f"bad {r}") if r == -1 else r * 10 for r in requests]


def by_tens(request: int) -> int:
    return abs(request) // 10


async def test_one_batch_per_group_of_a_tick() -> None:
    batch = Recorder()
    batcher: Batcher[int, int] = Batcher(batch, by_tens)
    results = await asyncio.gather(*(batcher.submit(r) for r in (1, 2, 11, 3, 25)))
    assert results == [10, 20, 110, 30, 250]
    assert sorted(sorted(requests) for requests, _ in batch.calls) == [[1, 2, 3], [11], [25]]


async def test_a_group_of_one_runs_in_its_callers_task() -> None:
    """No task of its own: the batch of one runs where its caller awaits (and with
    several requests in the group, in a task of the group's)."""
    batch = Recorder()
    batcher: Batcher[int, int] = Batcher(batch, by_tens)

    async def caller(request: int) -> tuple[int, asyncio.Task[object] | None]:
        return await batcher.submit(request), asyncio.current_task()

    (alone, alone_task), (first, first_task), (second, _) = await asyncio.gather(
        caller(5), caller(21), caller(22)
    )
    assert (alone, first, second) == (50, 210, 220)
    ran_in = {tuple(requests): task for requests, task in batch.calls}
    assert ran_in[(5,)] is alone_task
    assert ran_in[(21, 22)] is not first_task


async def test_failures_reach_their_callers_only() -> None:
    batch = Recorder()
    batcher: Batcher[int, int] = Batcher(batch, by_tens)
    # groups: [-1, 4] (one request fails), [-55] (its batch fails), [33], [21]
    outcomes = await asyncio.gather(
        *(batcher.submit(r) for r in (-1, 4, 33, -55, 21)), return_exceptions=True
    )
    assert isinstance(outcomes[0], ValueError), "the failed request"
    assert outcomes[1] == 40, "its neighbour in the batch"
    assert outcomes[2] == 330
    assert isinstance(outcomes[3], RuntimeError), "a failed batch of one"
    assert outcomes[4] == 210
    assert sorted(sorted(requests) for requests, _ in batch.calls) == [[-55], [-1, 4], [21], [33]]
    alone = await asyncio.gather(batcher.submit(-1), return_exceptions=True)
    assert isinstance(alone[0], ValueError), "a failed request alone"


async def test_a_caller_cancelled_before_its_batch_runs_runs_nothing() -> None:
    batch = Recorder()
    batcher: Batcher[int, int] = Batcher(batch, by_tens)
    task = asyncio.ensure_future(batcher.submit(7))
    await asyncio.sleep(0)  # submitted: the flush is due
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)
    assert batch.calls == []
    assert await batcher.submit(8) == 80, "the batcher carries on"


async def test_a_cancelled_writer_waits_for_its_batch() -> None:
    """``settle_on_cancel``: even a group of one runs in a task, which a cancelled
    caller waits for, so its write is not left running (nor cut short)."""
    batch = Recorder(delay=0.05)
    batcher: Batcher[int, int] = Batcher(batch, by_tens, settle_on_cancel=True)
    task = asyncio.ensure_future(batcher.submit(7))
    await asyncio.sleep(0.01)  # the batch runs
    assert batch.calls and batch.calls[0][1] is not task
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert batch.finished == 1, "the write ended before the cancellation came through"
