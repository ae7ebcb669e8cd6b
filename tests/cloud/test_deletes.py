"""Bulk deletes: what ``erase_values`` sends, counted on the client and on the server."""

from __future__ import annotations

import asyncio
import math

import pytest

from asyncshard.backends.cloud.mutations import BULK_DELETE_KEYS
from asyncshard.errors import ReadOnlyError
from asyncshard.fanout import gather_settled
from tests.cloud.conftest import Backend


def delete_requests(backend: Backend) -> int:
    """DELETEs, and S3's DeleteObjects (``POST /bucket?delete``), the server saw."""
    return sum(m in ("DELETE", "POST") for m, _, _ in backend.server_log())


async def test_erase_values_sends_one_request_per_batch(backend: Backend) -> None:
    store = backend.store
    existing = {f"d/{i}": b"x" for i in range(5)}
    if not store.supports_writes:
        with pytest.raises(ReadOnlyError):
            await store.erase_values(list(existing))
        return
    await backend.seed({**existing, "keep": b"k"})
    backend.reset_log()
    store.stats.reset()
    bulk = BULK_DELETE_KEYS.get(getattr(store, "kind", ""))
    missing = [f"never/{i}" for i in range(1000 if bulk else 3)]  # missing keys are fine
    keys = [*existing, *missing, "d/0"]  # a duplicate is deleted once
    await store.erase_values(keys)
    n = len(existing) + len(missing)
    expected = math.ceil(n / bulk) if bulk else n  # S3 and rclone: 1,005 keys in 2 requests
    assert store.stats.requests == {"delete": expected}
    assert delete_requests(backend) == expected
    assert [k async for k in store.list_prefix("")] == ["keep"]


async def test_gather_settled_leaves_nothing_running() -> None:
    """On a failure the siblings still finish before the error is raised."""
    finished: list[int] = []

    async def job(i: int) -> int:
        await asyncio.sleep(0.01 * i)
        if i == 1:
            raise ValueError("job 1 failed")
        finished.append(i)
        return i

    with pytest.raises(ValueError, match="job 1"):
        await gather_settled(job(i) for i in range(5))
    assert sorted(finished) == [0, 2, 3, 4]
    assert await gather_settled(job(i) for i in (0, 2)) == [0, 2]


async def test_gather_settled_cancelled_waits_for_its_jobs() -> None:
    """A cancelled caller waits for the jobs to end (a cancelled job could leave a write
    running in a worker thread); the cancellation propagates afterwards."""
    started, ended = asyncio.Event(), []

    async def job() -> None:
        started.set()
        await asyncio.sleep(0.1)
        ended.append(True)

    task = asyncio.ensure_future(gather_settled([job(), job()]))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == [True, True]  # both had ended when the cancellation came through
