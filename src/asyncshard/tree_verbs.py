"""The Store verbs of whole-tree copies: streamed writes and listings with metadata.

:class:`~asyncshard.store.Store` inherits them; backends override the hooks
(``_set_stream`` and :meth:`TreeVerbs.stream_buffer` where they write parts as they come,
``_list_objects`` where they list metadata with the keys).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from asyncshard.buffers import BytesLike
from asyncshard.errors import ReadOnlyError
from asyncshard.fanout import gather_settled
from asyncshard.keys import validate_key, validate_prefix
from asyncshard.objects import ObjectMeta, StoreStats

T = TypeVar("T")

#: Keys HEADed at a time by the default :meth:`TreeVerbs.list_objects`.
LIST_HEAD_BATCH = 256

#: What :meth:`TreeVerbs.set_stream` writes: the parts, or a callable that opens them
#: from the start (each call a fresh pass), which lets a refused write be sent again.
PartSource: TypeAlias = AsyncIterable[BytesLike] | Callable[[], AsyncIterable[BytesLike]]


class Parts(AsyncIterable[BytesLike]):
    """The parts of one streamed write, counted into ``stats.bytes_written`` as they
    are taken. Iterated again, a callable source is opened again from the start and the
    bytes of the abandoned pass are taken back out of the count; other sources are read
    once (:attr:`reopens`).

    Args:
        source: the parts, or a callable that opens them.
        stats: the counters of the store written to.
    """

    def __init__(self, source: PartSource, stats: StoreStats) -> None:
        self._source = source
        self._stats = stats
        self._taken = 0
        self._opened = False

    @property
    def reopens(self) -> bool:
        """Whether the parts can be read again from the start."""
        return callable(self._source)

    def __aiter__(self) -> AsyncIterator[BytesLike]:
        source = self._source
        if self._opened and not callable(source):
            raise RuntimeError("these parts were read already and cannot be read again")
        self._opened = True
        self._stats.bytes_written -= self._taken
        self._taken = 0
        return self._counted(source() if callable(source) else source)

    async def _counted(self, parts: AsyncIterable[BytesLike]) -> AsyncIterator[BytesLike]:
        async for part in parts:
            self._taken += len(part)
            self._stats.bytes_written += len(part)
            yield part


class TreeVerbs:
    """``set_stream`` and ``list_objects`` over a store's primitives."""

    stats: StoreStats

    if TYPE_CHECKING:  # provided by Store

        @property
        def supports_writes(self) -> bool: ...

        async def _bounded(self, awaitable: Awaitable[T], nbytes: int | None = 0) -> T: ...

        async def _set(
            self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
        ) -> str | None: ...

        async def _head(self, key: str) -> ObjectMeta | None: ...

        def _list(self, prefix: str) -> AsyncIterator[str]: ...

    def stream_buffer(self, size: int, part_size: int) -> int:
        """Bytes a :meth:`set_stream` of an object of ``size`` bytes, fed parts of at
        most ``part_size`` bytes, holds in memory at once at most. The default collects
        the parts into one :meth:`set`: the whole object."""
        return size

    async def set_stream(self, key: str, parts: PartSource) -> str | None:
        """Write the object ``key`` from ``parts``, taken one after another as the
        store is ready for them; return its new version if the backend reports one.

        ``parts`` is an async iterable of the parts, or a callable that opens one from
        the start: then an object store whose upload is refused for the request rate
        sends it again from the start, paced by the endpoint's window, until
        ``throttle_timeout`` (:mod:`asyncshard.backends.cloud.streams`); a plain iterable
        is sent once.

        As atomic as :meth:`set`: readers see the previous object (or none) until the
        last part is in, and a failure, a cancellation or a killed process leaves no
        part of the new object visible (local files: a temp file renamed at the end;
        object stores: a multipart upload, invisible until completed). Counted as one
        ``put`` (more where a multipart upload sends more; an upload sent again is not
        counted again); ``bytes_written`` grows by each part (of the last pass).
        Unconditional only.

        Args:
            key: the object to write.
            parts: its parts, or a callable that opens them from the start.
        """
        validate_key(key)
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")
        self.stats.requests["put"] += 1
        return await self._set_stream(key, Parts(parts, self.stats))

    async def _set_stream(self, key: str, parts: AsyncIterable[BytesLike]) -> str | None:
        """Write ``key`` from ``parts`` atomically. The default collects them and
        writes the whole object with ``_set``; backends that write parts as they come
        override it, and :meth:`stream_buffer`."""
        buf = bytearray()
        async for part in parts:
            buf += part
        return await self._bounded(self._set(key, buf, None, False), len(buf))

    async def list_objects(self, prefix: str) -> AsyncIterator[ObjectMeta]:
        """The metadata of every object whose key starts with ``prefix`` (as
        :meth:`list_prefix` matches keys), in no particular order.

        Like :meth:`list_prefix` an async generator: iterate it with ``async for``, do
        not ``await`` it (:meth:`list_dir` is the one listing that is awaited). Object
        stores list the metadata with the keys; other stores HEAD each key listed,
        counted as ``head`` requests, and leave out objects deleted meanwhile.
        """
        prefix = validate_prefix(prefix)
        self.stats.requests["list"] += 1
        async for meta in self._list_objects(prefix):
            yield meta

    async def _list_objects(self, prefix: str) -> AsyncIterator[ObjectMeta]:
        """Metadata of every key starting with ``prefix``; the default HEADs the keys
        ``_list`` yields, ``LIST_HEAD_BATCH`` at a time."""
        batch: builtins.list[str] = []
        listed = self._list(prefix)
        while True:
            key = await anext(listed, None)
            if key is not None:
                batch.append(key)
            if batch and (key is None or len(batch) >= LIST_HEAD_BATCH):
                self.stats.requests["head"] += len(batch)
                metas = await gather_settled(self._bounded(self._head(k)) for k in batch)
                batch = []
                for meta in metas:
                    if meta is not None:
                        yield meta
            if key is None:
                return
