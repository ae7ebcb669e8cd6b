"""Running a write's per-object jobs so that none outlives the call.

A write of many objects fans out into one job per object (a shard, a key). With a bare
``asyncio.gather``, one failing job makes the call raise while its siblings keep running
(retrying conflicts for seconds) and land later, possibly over a newer, acknowledged
write. :func:`run_writes` instead waits for every job to finish before it returns or raises,
and reports which keys were written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, TypeVar

from asyncshard.errors import PartialWriteError

__all__ = ["gather_settled", "run_writes"]

T = TypeVar("T")


async def _finish(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Wait until every task is done; a cancelled caller still waits (a cancelled job
    could leave its write running in a worker thread, landing later), then re-raises."""
    cancelled = False
    while True:
        try:
            await asyncio.wait(tasks)
            break
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


async def gather_settled(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """Run ``awaitables`` concurrently; their results in order once all are done.

    Unlike a bare ``asyncio.gather``, nothing is left running when this returns or
    raises: if one fails, the others still run to their end, then the first failure (in
    input order) is raised.
    """
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    if not tasks:
        return []
    await _finish(tasks)
    for task in tasks:
        failure = asyncio.CancelledError() if task.cancelled() else task.exception()
        if failure is not None:
            raise failure
    return [task.result() for task in tasks]


async def run_writes(jobs: Sequence[tuple[Sequence[str], Awaitable[object]]]) -> None:
    """Run ``(keys, job)`` pairs concurrently and wait until every job has finished.

    Returns when all succeeded. When every failing job failed with one error and nothing
    was written, that error is raised as it is (a single object failed); otherwise a
    failure raises :class:`PartialWriteError` naming the keys written and not written.
    A cancelled caller still waits for the jobs to finish (a cancelled job could leave
    its write running in a worker thread, landing later) before the cancellation
    propagates: nothing started here is running once this returns or raises.
    """
    if not jobs:
        return
    tasks = [asyncio.ensure_future(job) for _, job in jobs]
    await _finish(tasks)
    written: list[str] = []
    failed: dict[str, BaseException] = {}
    for (keys, _), task in zip(jobs, tasks, strict=True):
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        if error is None:
            written.extend(keys)
        else:
            failed.update(dict.fromkeys(keys, error))
    if failed:
        first = next(iter(failed.values()))
        if not written and all(e is first for e in failed.values()):
            raise first
        raise PartialWriteError(written, failed) from first
