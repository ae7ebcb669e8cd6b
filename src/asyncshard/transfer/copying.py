"""``copy_tree``: copy every object below a prefix from one store to another.

The source is listed as a stream (:meth:`~asyncshard.store.Store.list_objects`) into a
bounded queue that workers take objects from, so no key list is ever held whole. Each
worker HEADs the destination object (unless the destination prefix was empty when the
copy started), skips it when it is provably equal (:mod:`.compare`), and otherwise
copies it: an object of at most ``part_size`` bytes with one read and one
:meth:`~asyncshard.store.Store.set`, a larger one part by part, every part read at
the version of the first, into :meth:`~asyncshard.store.Store.set_stream`, which may
read it again from its start (an upload refused for the request rate is sent again,
paced by the destination's request window). Each object holds its share of the
``max_buffer`` byte budget while it is read and written, so the bytes in memory stay
under that bound whatever the sizes. Requests are bounded by each store's own
concurrency bound; the workers only keep both stores busy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from typing import Any, cast

from asyncshard.backends.places import place_of
from asyncshard.backends.registry import opened
from asyncshard.errors import (
    AsyncShardError,
    ConflictError,
    CopyError,
    NothingToCopyError,
    OverlappingStoresError,
    ReadOnlyError,
    UnsupportedOperationError,
)
from asyncshard.keys import validate_prefix
from asyncshard.store import ObjectMeta, Store
from asyncshard.transfer.compare import VanishedError, equal_objects, read_parts
from asyncshard.transfer.summary import ByteBudget, CopiedObject, CopySummary

__all__ = ["DEFAULT_MAX_BUFFER", "DEFAULT_PART_SIZE", "copy_tree_async"]

#: Objects larger than this are read and written in parts of this size.
DEFAULT_PART_SIZE = 8 * 1024 * 1024
#: Bytes the objects being copied hold in memory at once, at most.
DEFAULT_MAX_BUFFER = 256 * 1024 * 1024
#: Times an object that changes while it is read is read again from its start.
_ATTEMPTS = 3
#: Workers at most (each waits on its stores' own bounds).
_MAX_WORKERS = 256

Progress = Callable[[CopiedObject], None]


async def copy_tree_async(
    src: Any,
    dst: Any,
    prefix: str = "",
    dst_prefix: str = "",
    *,
    keys: Iterable[str] | None = None,
    size_only: bool = False,
    part_size: int = DEFAULT_PART_SIZE,
    max_buffer: int = DEFAULT_MAX_BUFFER,
    progress: Progress | None = None,
    storage_options: Mapping[str, Any] | None = None,
    dst_storage_options: Mapping[str, Any] | None = None,
) -> CopySummary:
    """Copy every object whose key starts with ``prefix`` from ``src`` to ``dst``,
    ``prefix`` replaced by ``dst_prefix``; skip those already equal at ``dst``.

    Objects stream (parts of ``part_size``, at most ``max_buffer`` bytes in memory);
    each appears at ``dst`` whole or not at all, so an interrupted copy is completed by
    running it again. Objects equal at ``dst`` are skipped: equal sizes and equal
    content hashes (MD5 ETags), or else equal bytes, compared by streaming
    (docs/ARCHITECTURE.md, "Whole-tree copies").

    Args:
        src: the source: a Store, a URL or a path.
        dst: the destination: a Store, a URL or a path.
        prefix: copy the source keys starting with this string (``""``: all).
        dst_prefix: what ``prefix`` becomes at the destination.
        keys: copy these source keys instead of listing ``prefix`` (stores that cannot
            list, such as plain HTTP); each must start with ``prefix``.
        size_only: skip objects of equal size without comparing contents (fast, but
            blind to an object rewritten at the same size).
        part_size: objects larger than this are read and written in parts of it.
        max_buffer: bytes held in memory by the objects in flight, at most.
        progress: called with a :class:`CopiedObject` as each object is done.
        storage_options: options to open ``src`` with (a URL only).
        dst_storage_options: options to open ``dst`` with (a URL only).

    Returns:
        The :class:`CopySummary`.

    Raises:
        NothingToCopyError: the source holds no object below ``prefix``.
        OverlappingStoresError: source and destination overlap (before any request).
        ReadOnlyError: the destination takes no writes (plain HTTP; before any request).
        CopyError: some objects failed; the others were copied (``.summary``).
    """
    if part_size <= 0:
        raise ValueError("part_size must be > 0")
    budget = ByteBudget(max_buffer)
    prefix, dst_prefix = validate_prefix(prefix), validate_prefix(dst_prefix)
    async with opened(src, storage_options) as source, opened(dst, dst_storage_options) as target:
        check_apart(source, prefix, target, dst_prefix, exact=keys is not None)
        if not target.supports_writes:  # one refusal, not one failure per object
            raise ReadOnlyError(f"cannot copy into {_where(target, dst_prefix)}: it is read-only")
        copier = _Copier(source, target, prefix, dst_prefix, budget, part_size, size_only)
        copier.progress = progress
        await copier.run(keys)
    summary = copier.summary
    if not summary.objects:
        raise NothingToCopyError(f"nothing to copy: no object at {_where(source, prefix)}")
    if summary.failed:
        raise CopyError(
            f"{summary}; failed: "
            + ", ".join(key for key, _ in summary.failures[:5])
            + (", ..." if summary.failed > 5 else ""),
            summary,
        )
    return summary


def _where(store: Store, prefix: str) -> str:
    base = store.url or repr(store)
    return f"{base.rstrip('/')}/{prefix}" if prefix else base


def check_apart(
    src: Store, prefix: str, dst: Store, dst_prefix: str, *, exact: bool = False
) -> None:
    """:class:`OverlappingStoresError` if the objects below ``prefix`` of ``src`` and
    below ``dst_prefix`` of ``dst`` may be the same (compared as places, as plain
    string prefixes: ``a`` overlaps ``ab``); ``exact``: if they are the same place
    (explicit keys, not a listing that could meet its own copies)."""
    if src is dst:
        a, b = prefix, dst_prefix
    else:
        here, there = place_of(src), place_of(dst)
        if here is None or there is None:
            return  # a store with no place outside the process: distinct objects
        if (here.kind, here.server, here.bucket) != (there.kind, there.server, there.bucket):
            return
        a = "".join(p + "/" for p in here.prefix) + prefix
        b = "".join(p + "/" for p in there.prefix) + dst_prefix
    if a == b or (not exact and (a.startswith(b) or b.startswith(a))):
        raise OverlappingStoresError(
            f"{_where(src, prefix)} and {_where(dst, dst_prefix)} overlap: a copy onto "
            "itself or into itself"
        )


def _busy(store: Store) -> int:
    """Requests worth keeping in flight on ``store``: its ``max_concurrency``, or, when
    its endpoint's adaptive window alone bounds it, half the worker ceiling (the window
    admits what the endpoint takes; the byte budget bounds memory)."""
    return store.max_concurrency or _MAX_WORKERS // 2


class _Copier:
    """One copy: the listing, the workers and the summary they fill."""

    def __init__(
        self,
        src: Store,
        dst: Store,
        prefix: str,
        dst_prefix: str,
        budget: ByteBudget,
        part_size: int,
        size_only: bool,
    ) -> None:
        self.src, self.dst = src, dst
        self.prefix, self.dst_prefix = prefix, dst_prefix
        self.budget, self.part_size, self.size_only = budget, part_size, size_only
        self.summary = CopySummary()
        self.progress: Progress | None = None
        self.compare = True
        self.workers = max(1, min(_busy(src) + _busy(dst), _MAX_WORKERS))

    async def run(self, keys: Iterable[str] | None) -> None:
        self.compare = await self._destination_has_objects()
        queue: asyncio.Queue[ObjectMeta | str | None] = asyncio.Queue(2 * self.workers)
        workers = [asyncio.create_task(self._work(queue)) for _ in range(self.workers)]
        try:
            async for item in self._listed(keys):
                await queue.put(item)
            for _ in workers:
                await queue.put(None)
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _destination_has_objects(self) -> bool:
        """Whether anything is below the destination prefix (else nothing to compare)."""
        listing = cast(AsyncGenerator[str, None], self.dst.list_prefix(self.dst_prefix))
        try:
            return await anext(listing, None) is not None
        except UnsupportedOperationError:
            return True  # cannot tell: compare each object
        finally:
            await listing.aclose()

    async def _listed(self, keys: Iterable[str] | None) -> AsyncIterator[ObjectMeta | str]:
        if keys is None:
            async for meta in self.src.list_objects(self.prefix):
                yield meta
            return
        for key in keys:
            if not key.startswith(self.prefix):
                raise ValueError(f"key {key!r} does not start with the prefix {self.prefix!r}")
            yield key

    async def _work(self, queue: asyncio.Queue[ObjectMeta | str | None]) -> None:
        while (item := await queue.get()) is not None:
            key = item if isinstance(item, str) else item.key
            meta = None if isinstance(item, str) else item
            try:
                done = await self._one(key, meta)
            except (AsyncShardError, OSError) as exc:
                self._done(CopiedObject(key, "failed", meta.size if meta else 0), exc)
            else:
                self._done(done)

    def _done(self, done: CopiedObject, error: BaseException | None = None) -> None:
        self.summary.add(done, error)
        if self.progress is not None:
            self.progress(done)

    async def _one(self, key: str, meta: ObjectMeta | None) -> CopiedObject:
        if meta is None:
            meta = await self.src.head(key)
            if meta is None:
                await self.src.get(key)  # a missing bucket says so here; a HEAD cannot
                raise NothingToCopyError(f"no such object: {_where(self.src, key)}")
        target = self.dst_prefix + key[len(self.prefix) :]
        share = await self.budget.acquire(self._share(meta.size))
        try:
            if self.compare:
                found = await self.dst.head(target)
                if found is not None and await equal_objects(
                    self.src,
                    meta,
                    self.dst,
                    found,
                    part_size=self.part_size,
                    size_only=self.size_only,
                ):
                    return CopiedObject(key, "skipped", meta.size)
            for attempt in range(_ATTEMPTS):
                try:
                    size = await self._copy(key, target, meta.size)
                except ConflictError:
                    if attempt == _ATTEMPTS - 1:
                        raise
                else:
                    return CopiedObject(key, "copied", size)
        finally:
            self.budget.release(share)
        raise AssertionError("unreachable")

    def _share(self, size: int) -> int:
        """The budget an object of ``size`` bytes takes: itself when small, else what
        the destination's streamed write holds, and two parts while it is compared."""
        if size <= self.part_size:
            return max(size, 1) * (2 if self.compare else 1)
        streamed = self.dst.stream_buffer(size, self.part_size)
        return max(streamed + self.part_size, 2 * self.part_size)

    async def _copy(self, key: str, target: str, size: int) -> int:
        """Copy one object (read again from its start if it changes meanwhile)."""
        if size <= self.part_size:
            found = await self.src.get_object(key)
            if found is None:
                raise VanishedError(f"{key}: gone from the source (deleted meanwhile?)")
            if len(found.data) <= self.part_size:
                await self.dst.set(target, found.data)
                return len(found.data)
            del found  # grown past a part since it was listed: stream it
        written = 0
        opened: list[AsyncGenerator[Any, None]] = []

        def parts() -> AsyncGenerator[Any, None]:
            """A fresh pass over the object from its start, its parts pinned to the
            version of its first (an upload refused for the request rate is sent again)."""
            nonlocal written
            written = 0
            opened.append(counted())
            return opened[-1]

        async def counted() -> AsyncGenerator[Any, None]:
            nonlocal written
            async for data in read_parts(self.src, key, self.part_size):
                written += len(data)
                yield data

        try:
            await self.dst.set_stream(target, parts)
        finally:
            for stream in opened:
                with contextlib.suppress(Exception):
                    await stream.aclose()
        return written
