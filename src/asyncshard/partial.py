"""Partial values: reads of many byte ranges coalesced into few requests, and byte runs
written into objects by read-modify-write (:meth:`Store.get_partial_values`,
:meth:`Store.set_partial_values`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import ClassVar, Protocol

from asyncshard.buffers import BytesLike, Data
from asyncshard.keys import validate_key
from asyncshard.objects import GetResult, StoreStats, apply_runs, retry_on_conflict
from asyncshard.ranges import OVERFETCH_SLACK, ByteRange, Offset, Range, Suffix, coalesce, resolve

__all__ = ["patch", "plan_key", "read_ranges", "slack_of"]


class _Partial(Protocol):
    """What the planning needs of a store (every :class:`~asyncshard.store.Store`)."""

    max_gap: int
    max_request: int
    max_overfetch: float | None
    stats: StoreStats
    counts_calls: ClassVar[bool]

    @property
    def supports_conditional_writes(self) -> bool: ...

    def _reach(self) -> int: ...

    async def _fetch(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None: ...

    async def _fetch_data(self, key: str, byte_range: ByteRange | None) -> Data | None: ...

    async def get_object(
        self, key: str, byte_range: ByteRange | None = None, *, if_match: str | None = None
    ) -> GetResult | None: ...

    async def set(
        self, key: str, value: BytesLike, *, if_match: str | None = None, if_absent: bool = False
    ) -> str | None: ...


async def read_ranges(
    store: _Partial,
    key_ranges: Iterable[tuple[str, ByteRange | None]],
    if_match: Mapping[str, str] | None,
) -> list[Data | None]:
    """:meth:`Store.get_partial_values`: each key's ranges planned by :func:`plan_key`,
    every request at once (the store bounds them)."""
    items = list(key_ranges)
    by_key: dict[str, list[int]] = {}
    try:
        for i, (key, _) in enumerate(items):
            by_key.setdefault(key, []).append(i)
    except TypeError:  # an unhashable key: say what is wrong with it
        for key, _ in items:
            validate_key(key)
        raise
    for key in by_key:  # each distinct key once
        validate_key(key)
    if store.counts_calls:
        store.stats.requests["get"] += len(by_key)
    out: list[Data | None] = [None] * len(items)
    jobs: list[Awaitable[None]] = []
    for key, idxs in by_key.items():
        version = if_match.get(key) if if_match else None
        jobs.extend(plan_key(store, key, [(i, items[i][1]) for i in idxs], version, out))
    if len(jobs) == 1:  # the common case of one coalesced request: no task needed
        await jobs[0]
    else:
        await asyncio.gather(*jobs)
    return out


def plan_key(
    store: _Partial,
    key: str,
    members: Sequence[tuple[int, ByteRange | None]],
    version: str | None,
    out: list[Data | None],
) -> list[Awaitable[None]]:
    """The requests that serve ``members`` (``(output index, range)``) of one key into
    ``out``: one whole read if any range is ``None``, else the coalesced bounded ranges
    plus one request per offset or suffix.

    Over a long round trip a merged request may over-fetch, besides ``max_overfetch``
    of its wanted bytes, up to the bytes the endpoint delivers in one round trip
    (:meth:`Window.reach <asyncshard.window.Window.reach>`, at most ``max_gap``): a
    request saved is a round trip's worth of bytes."""
    if any(rng is None for _, rng in members):
        return [_serve(store, key, None, version, [(i, rng, 0) for i, rng in members], out)]
    bounded = [(i, rng) for i, rng in members if isinstance(rng, Range)]
    jobs: list[Awaitable[None]] = [
        _serve(store, key, rng, version, [(i, None, 0)], out)
        for i, rng in members
        if isinstance(rng, (Offset, Suffix))
    ]
    plan = coalesce(
        [r for _, r in bounded],
        max_gap=store.max_gap,
        max_request=store.max_request,
        max_overfetch=store.max_overfetch,
        slack=slack_of(store),
    )
    for req in plan:
        parts = [(bounded[m][0], bounded[m][1], req.start) for m in req.members]
        jobs.append(_serve(store, key, Range(req.start, req.end), version, parts, out))
    return jobs


def slack_of(store: _Partial) -> int:
    """Bytes of gaps any merged request of ``store`` may read, whatever it wants: a
    page, or over a long round trip the window's reach (at most ``max_gap``)."""
    return max(OVERFETCH_SLACK, min(store._reach(), store.max_gap))


async def _serve(
    store: _Partial,
    key: str,
    rng: ByteRange | None,
    version: str | None,
    parts: Sequence[tuple[int, ByteRange | None, int]],
    out: list[Data | None],
) -> None:
    """Fetch ``rng`` of ``key`` once and cut each part ``(index, range, base)`` from it."""
    if version is None:
        data = await store._fetch_data(key, rng)
    else:
        result = await store._fetch(key, rng, version)
        data = None if result is None else result.data
    if data is None:
        return
    view = memoryview(data)
    returned = 0
    for i, part, base in parts:
        if part is None:
            piece = view
        elif isinstance(part, Range):
            piece = view[part.start - base : part.end - base]
        else:
            start, end = resolve(part, len(view))
            piece = view[start:end]
        out[i] = piece
        returned += len(piece)
    store.stats.bytes_returned += returned


async def patch(store: _Partial, key: str, runs: Sequence[tuple[int, BytesLike]]) -> None:
    """Apply byte ``runs`` to one object: read, patch, write back conditionally, again
    on a conflict."""

    async def attempt() -> None:
        current = await store.get_object(key)
        buf = apply_runs(None if current is None else current.data, runs)
        conditional = store.supports_conditional_writes
        await store.set(
            key,
            buf,
            if_match=current.meta.version if conditional and current else None,
            if_absent=conditional and current is None,
        )

    await retry_on_conflict(attempt, key)
