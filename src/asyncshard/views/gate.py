"""WriteGate: writes of one shard that arrive close together leave together.

The sharding engine merges the writes of one shard submitted in one event-loop tick
into one shard write. Callers that write chunk by chunk (zarr-python: one ``set`` per
chunk, each after its own encoding, at most ``async.concurrency`` at a time) submit
them a few ticks apart, and each would become its own read-merge-write of the shard.
The gate holds such writes per group (a shard) and releases them in one tick:

* when the group has been quiet for ``window`` seconds (at most ``max_wait`` after its
  first waiting write);
* at once when the waiting writes complete the group (``complete``: every chunk of the
  shard, so it can be written without reading it), or when ``flush_at()`` writes per
  caller wait in all (the callers cannot submit more before some return: no point in
  waiting). Callers are not named: one keeps at most ``flush_at()`` writes waiting or
  running, so more at once since the last release ended means more callers;
* one release per group at a time: writes arriving while the group's writes run wait
  for them (group commit), so one process never races itself for a shard.

``on_cut(key)`` is called when group ``key`` is written in parts: it left incomplete
while every caller was at its bound (``flush_at()`` writes waiting or running per caller
seen; zarr-python's default bound is 10 chunk writes per array operation), and another
write of it arrived while those ran or within :data:`FOLLOW_UP` seconds after. A lone
write of a few chunks is never reported: nothing of its shard follows it.

A waiting write whose caller is cancelled is dropped; one already released is waited for
before the cancellation propagates (nothing the gate started outlives its caller).

Each event loop has its own groups and counts (:class:`~asyncshard.limits.PerLoop`):
writes from loops running at once in several threads are gated apart.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from asyncshard.limits import PerLoop

__all__ = ["WriteGate"]

T = TypeVar("T")

#: Seconds after a group's incomplete writes end within which a write of the group shows
#: it written in parts (zarr-python submits its next chunk writes as soon as the last
#: ones return).
FOLLOW_UP = 1.0

#: Decides from the waiting writes' tags whether they complete their group.
Complete = Callable[[Sequence[Hashable]], bool]


@dataclass(eq=False)
class _Op:
    run: Callable[[], Awaitable[Any]]
    tag: Hashable
    future: asyncio.Future[Any]
    started: bool = False


@dataclass(eq=False)
class _Group:
    pending: list[_Op] = field(default_factory=list)
    tags: list[Hashable] = field(default_factory=list)  # of ``pending``, in step
    busy: bool = False
    first: float = 0.0
    timer: asyncio.TimerHandle | None = None
    complete: Complete | None = None


class WriteGate:
    """Holds writes per group and releases each group's writes together (see the module
    docstring). ``flush_at`` returns how many writes one caller keeps waiting or running
    at most: that many per caller seen, waiting in all groups, release every idle group
    at once (``0``: every write leaves at once); ``None``: only the window and
    ``complete`` do. ``on_cut``: see the module docstring.

    Groups and counts are kept per event loop: writes from loops running at once (in
    several threads) are gated apart, each loop's touched only by its own thread."""

    def __init__(
        self,
        *,
        window: float,
        max_wait: float,
        flush_at: Callable[[], int] | None = None,
        on_cut: Callable[[Hashable], None] | None = None,
    ) -> None:
        if window < 0 or max_wait < window:
            raise ValueError("window must be >= 0 and max_wait >= window")
        self.window = window
        self.max_wait = max_wait
        self.flush_at = flush_at
        self.on_cut = on_cut
        self._gates = PerLoop(lambda: _LoopGate(self))

    async def run(
        self,
        key: Hashable,
        op: Callable[[], Awaitable[T]],
        *,
        tag: Hashable = None,
        complete: Complete | None = None,
    ) -> T:
        """``await op()`` released together with the other writes of group ``key``."""
        return await self._gates.get().run(key, op, tag, complete)


class _LoopGate:
    """The groups and counts of one event loop's writes through a :class:`WriteGate`."""

    def __init__(self, gate: WriteGate) -> None:
        self.gate = gate
        self._groups: dict[Hashable, _Group] = {}
        self._waiting = 0
        self._running = 0  # released, not finished
        self._peak = 0  # most writes waiting or running at once since a batch ended
        #: groups released incomplete: until when a write of them shows them cut short
        self._cut: dict[Hashable, float] = {}

    async def run(
        self,
        key: Hashable,
        op: Callable[[], Awaitable[T]],
        tag: Hashable,
        complete: Complete | None,
    ) -> T:
        loop = asyncio.get_running_loop()
        self._follows_cut(key)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
        item = _Op(op, tag, loop.create_future())
        if not group.pending:
            group.first = loop.time()
        group.pending.append(item)
        group.tags.append(tag)
        if group.complete is None:  # the group's writes all bring the same test
            group.complete = complete
        self._waiting += 1
        self._peak = max(self._peak, self._waiting + self._running)
        self._consider(key, group)
        try:
            result: T = await asyncio.shield(item.future)
            return result
        except asyncio.CancelledError:
            if not item.started:
                if item in group.pending:
                    i = group.pending.index(item)
                    del group.pending[i], group.tags[i]
                    self._waiting -= 1
                    if not group.pending and not group.busy:  # nothing left to release
                        if group.timer is not None:
                            group.timer.cancel()
                        if self._groups.get(key) is group:
                            del self._groups[key]
                else:  # released but not started: its batch skips it
                    item.future.cancel()
            elif not item.future.done():
                await asyncio.wait([item.future])
            raise

    def _consider(self, key: Hashable, group: _Group) -> None:
        """Release ``group`` now, or (re)arm its quiet timer."""
        if group.busy or not group.pending:
            return
        limit = self._flush_limit()
        if limit is not None and self._waiting >= limit:
            self._release_idle()
            return
        if self._completes(group):
            self._release(key, group)
            return
        loop = asyncio.get_running_loop()
        if group.timer is not None:
            group.timer.cancel()
        delay = max(0.0, min(self.gate.window, group.first + self.gate.max_wait - loop.time()))
        group.timer = loop.call_later(delay, self._fire, key, group)

    def _release_idle(self) -> None:
        """Release every group with waiting writes and none running."""
        for key, group in list(self._groups.items()):
            if not group.busy and group.pending:
                self._release(key, group)

    def _flush_limit(self) -> int | None:
        """Waiting writes that release every idle group: ``flush_at()`` per caller.

        One caller (a zarr-python operation) has at most ``flush_at()`` writes waiting or
        running; more at once (since the last batch ended) means more callers, and each
        may still submit up to that many, so the limit is that many per caller seen.
        """
        flush_at = self.gate.flush_at
        if flush_at is None:
            return None
        per_caller = flush_at()
        if per_caller <= 0:
            return 0
        return per_caller * max(1, -(-self._peak // per_caller))

    @staticmethod
    def _completes(group: _Group) -> bool:
        return group.complete is not None and group.complete(group.tags)

    def _cut_short(self, group: _Group) -> bool:
        """Whether ``group`` leaves incomplete while every caller is at its bound."""
        limit = self._flush_limit()
        if limit is None or self._completes(group):
            return False
        return self._waiting + self._running >= limit

    def _follows_cut(self, key: Hashable) -> None:
        """A write of group ``key`` arrives: if the group was just released incomplete,
        it is written in parts: ``on_cut(key)``, as a callback of its own (what it raises,
        a warning filtered into an error, reaches the loop's exception handler, not the
        writes)."""
        until = self._cut.pop(key, None)
        loop = asyncio.get_running_loop()
        if until is not None and loop.time() <= until and self.gate.on_cut is not None:
            loop.call_soon(self.gate.on_cut, key)

    def _fire(self, key: Hashable, group: _Group) -> None:
        group.timer = None
        if not group.busy and group.pending:
            self._release(key, group)

    def _release(self, key: Hashable, group: _Group) -> None:
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        if self.gate.on_cut is not None and self._cut_short(group):
            now = asyncio.get_running_loop().time()
            for stale in [k for k, until in self._cut.items() if until < now]:
                del self._cut[stale]
            self._cut[key] = math.inf  # until its writes end (see _run_batch)
        batch, group.pending, group.tags = group.pending, [], []
        self._waiting -= len(batch)
        self._running += len(batch)
        group.busy = True
        asyncio.get_running_loop().create_task(self._run_batch(key, group, batch))

    async def _run_batch(self, key: Hashable, group: _Group, batch: list[_Op]) -> None:
        """Start every write of ``batch`` in this tick (but those whose callers were
        cancelled since the release) and hand out the results."""
        live = [op for op in batch if not op.future.done()]
        for op in live:
            op.started = True
        try:
            results = await asyncio.gather(*(op.run() for op in live), return_exceptions=True)
            for op, result in zip(live, results, strict=True):
                if op.future.done():
                    continue
                if isinstance(result, BaseException):
                    op.future.set_exception(result)
                else:
                    op.future.set_result(result)
        finally:
            for op in batch:
                if not op.future.done():
                    op.future.cancel()
            self._running -= len(batch)
            if key in self._cut:
                self._cut[key] = asyncio.get_running_loop().time() + FOLLOW_UP
            self._peak = self._waiting + self._running  # counted again from here
            group.busy = False
            if group.pending:
                group.first = asyncio.get_running_loop().time()
            elif self._groups.get(key) is group:
                del self._groups[key]
            limit = self._flush_limit()
            if limit is not None and self._waiting >= limit:  # the lower peak lets go
                self._release_idle()
            elif group.pending:
                self._consider(key, group)
