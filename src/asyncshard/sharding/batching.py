"""Micro-batching: gather concurrent single requests into one batched call per group.

Viewers and array libraries issue many concurrent single-chunk reads (and writes). Served
one by one, each costs its own request even when its bytes sit next to another's in the
same shard. A :class:`Batcher` collects the requests submitted during one event-loop
iteration and hands them, grouped (by shard), to a batch function. A failure of the
batch reaches only the requests of its group; a batch may also fail single requests by
returning an exception in their place.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

Req = TypeVar("Req")
Res = TypeVar("Res")
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

__all__ = ["Batcher", "group_by"]


def group_by(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` grouped by ``key`` (groups and their members in first-seen order)."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


class _Alone:
    """What a request's future holds when the request is its group's only one: its caller
    runs the batch of one itself (no task)."""

    __slots__ = ()


_ALONE = _Alone()


class Batcher(Generic[Req, Res]):
    """Run ``batch(requests)`` once per group for requests submitted in the same tick.

    ``batch`` returns one result per request, in order; a result that is an exception
    is raised to that request's caller alone. A group of several requests runs in a task
    of its own; a group of one runs in its caller's task (which then owns it, as if it
    had called ``batch`` directly). With ``settle_on_cancel`` (writes), every group runs
    in a task, and a caller cancelled while its batch runs waits for the batch to finish
    before the cancellation propagates, so no write it asked for is still running
    afterwards.
    """

    def __init__(
        self,
        batch: Callable[[Sequence[Req]], Awaitable[Sequence[Res | BaseException]]],
        group: Callable[[Req], Hashable],
        *,
        settle_on_cancel: bool = False,
    ) -> None:
        self._batch = batch
        self._group = group
        self._settle = settle_on_cancel
        self._pending: list[tuple[Req, asyncio.Future[Res | _Alone]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: dict[asyncio.Future[Res | _Alone], asyncio.Task[None]] = {}

    def pending(self) -> bool:
        """Whether requests submitted in this event-loop tick wait to be batched."""
        return bool(self._pending)

    async def submit(self, request: Req) -> Res:
        """The result for ``request``, computed in a batch with its concurrent peers."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop: forget anything tied to the old one
            self._loop, self._pending, self._running = loop, [], {}
        future: asyncio.Future[Res | _Alone] = loop.create_future()
        self._pending.append((request, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        try:
            result = await future
        except asyncio.CancelledError:
            task = self._running.get(future)
            if task is None:  # not started: drop it from the pending batch
                self._pending = [p for p in self._pending if p[1] is not future]
            elif self._settle:
                await asyncio.wait([task])
            raise
        if not isinstance(result, _Alone):
            return result
        (alone,) = await self._batch([request])
        if isinstance(alone, BaseException):
            raise alone
        return alone

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        live = (item for item in pending if not item[1].done())
        for items in group_by(live, lambda item: self._group(item[0])).values():
            if len(items) == 1 and not self._settle:
                items[0][1].set_result(_ALONE)  # its caller runs it
                continue
            task = asyncio.ensure_future(self._run(items))
            for _, future in items:
                self._running[future] = task
            task.add_done_callback(functools.partial(self._finished, items))

    def _finished(
        self, items: list[tuple[Req, asyncio.Future[Res | _Alone]]], _task: asyncio.Task[None]
    ) -> None:
        for _, future in items:
            self._running.pop(future, None)

    async def _run(self, items: list[tuple[Req, asyncio.Future[Res | _Alone]]]) -> None:
        try:
            results = await self._batch([request for request, _ in items])
        except BaseException as exc:  # delivered to every waiter of the group
            for _, future in items:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), result in zip(items, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
