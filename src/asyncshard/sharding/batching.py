"""Micro-batching: gather concurrent single reads into one batched call per group.

Viewers and array libraries issue many concurrent single-chunk reads. Served one by one,
each costs its own request even when its bytes sit next to another's in the same shard.
A :class:`Batcher` collects the requests submitted during one event-loop iteration and
hands them, grouped (by shard), to a batch function that can coalesce their ranges. A
failure in one group reaches only the requests of that group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

Req = TypeVar("Req")
Res = TypeVar("Res")


class Batcher(Generic[Req, Res]):
    """Run ``batch(requests)`` once per group for requests submitted in the same tick."""

    def __init__(
        self,
        batch: Callable[[Sequence[Req]], Awaitable[Sequence[Res]]],
        group: Callable[[Req], Hashable],
    ) -> None:
        self._batch = batch
        self._group = group
        self._pending: list[tuple[Req, asyncio.Future[Res]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: set[asyncio.Task[None]] = set()

    async def submit(self, request: Req) -> Res:
        """The result for ``request``, computed in a batch with its concurrent peers."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop: forget anything tied to the old one
            self._loop, self._pending = loop, []
        future: asyncio.Future[Res] = loop.create_future()
        self._pending.append((request, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        groups: dict[Hashable, list[tuple[Req, asyncio.Future[Res]]]] = {}
        for item in pending:
            groups.setdefault(self._group(item[0]), []).append(item)
        for items in groups.values():
            task = asyncio.ensure_future(self._run(items))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, items: list[tuple[Req, asyncio.Future[Res]]]) -> None:
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
            if not future.done():
                future.set_result(result)
