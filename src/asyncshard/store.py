"""The Store contract: one async key-value API over every backend and adapter.

A backend implements a handful of primitives (``_get``, ``_head``, ``_set``,
``_erase``, ``_list``); this base class turns them into the public verbs, validates
keys, coalesces ranges, runs requests concurrently under a bound, and counts what every
call costs in :class:`StoreStats`.

Conventions (identical on every store):

* Keys are ``/``-separated relative paths. Empty segments (``a//b``, a trailing ``/``),
  ``.`` and ``..`` segments, a leading ``/``, backslashes and NUL raise
  :class:`~asyncshard.errors.InvalidKeyError`.
* Byte ranges clamp at the end of the object like Python slicing (see
  :mod:`asyncshard.ranges`); a missing object reads as ``None``.
* ``list_prefix(p)`` matches keys that start with the string ``p`` (``""`` or ``"/"``
  lists everything, ``"a/"`` lists below ``a``, ``"a"`` also matches ``ab``).
  ``list_dir(p)`` treats ``p`` as a directory (``"a"`` and ``"a/"`` are the same) and
  returns the full keys directly inside it and the full child prefixes, each ending in
  ``/``. Listing order is not specified.
* Writes may be conditional: ``if_absent=True`` only creates, ``if_match=version`` only
  replaces that version; a failed condition raises :class:`ConflictError` and changes
  nothing. Reads may be conditional too (``if_match``), which is how sharded stores detect
  a shard rewritten under a cached index.
"""

from __future__ import annotations

import builtins
import inspect
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

from asyncshard.buffers import BytesLike, Data
from asyncshard.errors import ReadOnlyError, UnsupportedOperationError
from asyncshard.fanout import gather_settled
from asyncshard.keys import dir_prefix, split_dir, validate_key, validate_prefix
from asyncshard.limits import LoopSemaphores
from asyncshard.objects import (
    WOULD_WAIT,
    GetResult,
    NowResult,
    ObjectMeta,
    StoreStats,
    WouldWait,
    apply_runs,
    check_condition,
    retry_on_conflict,
)
from asyncshard.partial import patch, read_ranges
from asyncshard.ranges import MAX_OVERFETCH, ByteRange
from asyncshard.tree_verbs import TreeVerbs
from asyncshard.window import Window, in_slot, span_of

__all__ = [
    "WOULD_WAIT",
    "BytesLike",
    "Data",
    "GetResult",
    "NowResult",
    "ObjectMeta",
    "Store",
    "StoreStats",
    "WouldWait",
    "apply_runs",
    "check_condition",
    "dir_prefix",
    "retry_on_conflict",
    "split_dir",
    "validate_key",
    "validate_prefix",
]

T = TypeVar("T")

DEFAULT_MAX_GAP = 64 * 1024
DEFAULT_MAX_REQUEST = 16 * 1024 * 1024
DEFAULT_MAX_CONCURRENCY = 32


class Store(TreeVerbs, ABC):
    """Abstract async key-value store; see the module docstring for the conventions.

    Each public verb validates its keys, counts the call, then runs primitives:

    ====================================  =============================================
    public verb                           primitive a backend implements
    ====================================  =============================================
    ``get``                               ``_get_data`` (default: ``_get``), through
                                          ``_fetch_data``: bounded, counted
    ``get_object``                        ``_get`` (through ``_fetch``: bounded, counted)
    ``get_partial_values``                ``_get`` per coalesced range (``_get_data``
                                          where no version is asked)
    ``get_many``                          ``_get_many`` (default: ``_get_data`` each)
    ``head``, ``exists``                  ``_head``
    ``get_now``, ``head_now``             ``_get_now``, ``_head_now`` (default: decline)
    ``set``                               ``_set``
    ``set_many``                          ``_set_many`` (default: ``_set`` each)
    ``set_partial_values``                ``_get`` + ``_set`` per key (read-modify-write)
    ``copy``, ``copy_many``               ``_copy``, ``_copy_many`` (default: read + set)
    ``erase_values``                      ``_erase_many`` (default: ``_erase`` each)
    ``erase_if_match``                    ``_erase_if_match``
    ``erase_prefix``                      ``list_prefix`` + ``erase_values``
    ``prune``                             ``_prune`` (default: nothing to do)
    ``list``, ``list_prefix``             ``_list``
    ``list_dir``                          ``_list_dir``
    ``close``                             ``_close``
    ====================================  =============================================

    Request kinds in :attr:`stats` are named after the wire: ``get``, ``head``, ``put``,
    ``delete``, ``copy``, ``list``.
    """

    #: ``stats`` counts calls (one ``get`` per distinct key asked: adapters) instead of
    #: the requests the primitives send (backends).
    counts_calls: ClassVar[bool] = False

    def __init__(
        self,
        *,
        max_gap: int = DEFAULT_MAX_GAP,
        max_request: int = DEFAULT_MAX_REQUEST,
        max_concurrency: int | None = DEFAULT_MAX_CONCURRENCY,
        max_overfetch: float | None = MAX_OVERFETCH,
    ) -> None:
        if (
            max_gap < 0
            or max_request <= 0
            or (max_concurrency is not None and max_concurrency <= 0)
        ):
            raise ValueError("max_gap must be >= 0; max_request, max_concurrency > 0")
        if max_overfetch is not None and not max_overfetch >= 0:
            raise ValueError("max_overfetch must be >= 0, or None for no bound")
        self.max_gap = max_gap
        self.max_request = max_request
        self.max_overfetch = max_overfetch
        self.max_concurrency = max_concurrency
        self.stats = StoreStats()
        self._limits = None if max_concurrency is None else LoopSemaphores(max_concurrency)
        #: The adaptive request window shared with every store on the same endpoint
        #: (:mod:`asyncshard.window`); ``None``: only ``max_concurrency`` bounds requests.
        self.window: Window | None = None

    # -- capabilities -------------------------------------------------------------------

    @property
    def supports_writes(self) -> bool:
        """Whether ``set``/``erase_*`` work."""
        return True

    @property
    def supports_listing(self) -> bool:
        """Whether ``list``/``list_prefix``/``list_dir`` work."""
        return True

    @property
    def supports_conditional_writes(self) -> bool:
        """Whether ``set(..., if_match=..., if_absent=...)`` is honoured atomically."""
        return True

    @property
    def supports_conditional_deletes(self) -> bool:
        """Whether :meth:`erase_if_match` works."""
        return False

    @property
    def supports_head_now(self) -> bool:
        """Whether :meth:`head_now` can answer (else it always declines)."""
        return False

    def version_pins_bytes(self, version: str) -> bool:
        """Whether an object at ``version`` always holds the same bytes (no other content
        of its key ever gets that version), so a copy taken at it stays exact while the
        object is at it. ``False`` unless the backend knows."""
        return False

    @property
    def lists_in_pages(self) -> bool:
        """Whether a listing comes in pages, each a round trip (object stores): then a
        small folder is listed faster whole than folder by folder
        (:func:`~asyncshard.walk.list_keys`)."""
        return False

    @property
    def url(self) -> str | None:
        """A URL ``open_store`` reopens this store from (with :attr:`open_options`), if any."""
        return None

    @property
    def open_options(self) -> dict[str, Any]:
        """The options that reopen this store from :attr:`url` (another process does so)."""
        return {}

    # -- backend primitives -------------------------------------------------------------

    @abstractmethod
    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        """Read one object or range; ``None`` if missing; ``ConflictError`` on a mismatch."""

    async def _get_data(self, key: str, byte_range: ByteRange | None) -> Data | None:
        """``_get`` without a condition, for callers that want the bytes only (no
        metadata): backends that read bytes alone more cheaply override it."""
        result = await self._get(key, byte_range, None)
        return None if result is None else result.data

    def _get_now(self, key: str, byte_range: ByteRange | None, if_match: str | None) -> NowResult:
        """``_get``'s answer when it needs no waiting at all (the bytes are in memory, or
        in the page cache of an open file), else :data:`WOULD_WAIT`. Never blocks,
        never starts I/O that it would have to wait for; the default always declines."""
        return WOULD_WAIT

    @abstractmethod
    async def _head(self, key: str) -> ObjectMeta | None:
        """Metadata of one object, ``None`` if missing."""

    def _head_now(self, key: str) -> ObjectMeta | WouldWait | None:
        """``_head``'s answer when it needs no waiting, else :data:`WOULD_WAIT`; the
        default always declines."""
        return WOULD_WAIT

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        """Write one object (atomically); return its new version if known."""
        raise ReadOnlyError(f"{self!r} is read-only")

    async def _erase(self, key: str) -> None:
        """Delete one object; a missing object is not an error."""
        raise ReadOnlyError(f"{self!r} is read-only")

    async def _erase_many(self, keys: Sequence[str]) -> None:
        """Delete distinct objects (missing ones are fine) and count the requests sent.

        The default sends one ``_erase`` per key under the concurrency bound. Backends
        with bulk deletes override it; each counts ``delete`` as the requests it sent.
        """
        self._count_request("delete", len(keys))
        await gather_settled(self._bounded(self._erase(key)) for key in keys)

    async def _copy(self, source: str, target: str) -> int | None:
        """Copy one object to another key (atomically replacing it); return its size, or
        ``None`` if ``source`` is missing. The default reads and writes it; backends
        that copy without moving the bytes (hard links, server-side copies) override it."""
        data = await self._bounded(self._get_data(source, None), None)
        if data is None:
            return None
        await self._bounded(self._set(target, data, None, False), len(data))
        return len(data)

    async def _copy_many(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        """Copy objects (distinct targets); the default copies each concurrently."""
        return await gather_settled(self._copy(a, b) for a, b in pairs)

    async def _get_many(self, keys: Sequence[str]) -> list[Data | None]:
        """Read distinct whole objects. The default reads each under the concurrency
        bound; backends that read a batch more cheaply (one worker thread) override it."""
        return await gather_settled(self._bounded(self._get_data(k, None), None) for k in keys)

    async def _set_many(self, items: Sequence[tuple[str, BytesLike]]) -> list[str | None]:
        """Write distinct objects unconditionally, each atomically; return their versions.
        The default writes each under the concurrency bound; backends override it."""
        return await gather_settled(
            self._bounded(self._set(k, v, None, False), len(v)) for k, v in items
        )

    async def _erase_if_match(self, key: str, version: str) -> None:
        """Delete one object only if it is at ``version``; ``ConflictError`` otherwise."""
        raise UnsupportedOperationError(f"{self!r} cannot delete conditionally")

    def _list(self, prefix: str) -> AsyncIterator[str]:
        """Yield every key starting with ``prefix``."""
        raise UnsupportedOperationError(f"{self!r} cannot list keys")

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        """Keys and child prefixes directly below the directory ``prefix``."""
        return split_dir(prefix, [key async for key in self._list(prefix)])

    async def _close(self) -> None:
        """Release backend resources."""

    # -- plumbing -----------------------------------------------------------------------

    def _count_request(self, kind: str, n: int = 1) -> None:
        """Count ``n`` more requests of ``kind`` sent to the backend.

        Each public verb counts the one request it expects its primitive to send. A
        backend whose primitive sends other or more requests (a ``HEAD`` before a
        ``GET``, a restarted read) reports them here, with ``n=-1`` taking back the
        verb's own count when it answers without that request, so that on backends
        ``stats.requests`` counts exactly the requests sent (retries inside the client
        library, invisible to asyncshard, excepted)."""
        self.stats.requests[kind] += n

    def _reach(self) -> int:  # what coalescing may over-fetch to save a request, or 0
        return 0 if self.window is None else self.window.reach()

    async def _bounded(self, awaitable: Awaitable[T], nbytes: int | None = 0) -> T:
        """``awaitable`` run under the store's bounds: ``max_concurrency`` (a plain
        per-loop bound) and the endpoint's :attr:`window`, reserving ``nbytes`` (``None``:
        a whole-object read of unknown size, whose real size is counted once known).
        Cancelled while waiting for a place, it is closed unstarted (no "coroutine was
        never awaited" warning)."""
        try:
            if self._limits is None:
                return await in_slot(self.window, awaitable, nbytes)
            async with self._limits.get():
                return await in_slot(self.window, awaitable, nbytes)
        except BaseException:
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # a no-op once it ran
            raise

    async def _fetch(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        """One counted, concurrency-bounded backend read."""
        self.stats.requests["get"] += 1
        result = await self._bounded(self._get(key, byte_range, if_match), span_of(byte_range))
        if result is not None:
            self.stats.bytes_fetched += len(result.data)
        return result

    async def _fetch_data(self, key: str, byte_range: ByteRange | None) -> Data | None:
        """:meth:`_fetch` of the bytes alone (``_get_data``)."""
        self.stats.requests["get"] += 1
        data = await self._bounded(self._get_data(key, byte_range), span_of(byte_range))
        if data is not None:
            self.stats.bytes_fetched += len(data)
        return data

    def _returned(self, data: Data | None) -> Data | None:
        if data is not None:
            self.stats.bytes_returned += len(data)
        return data

    # -- reads --------------------------------------------------------------------------

    async def get(self, key: str, byte_range: ByteRange | None = None) -> Data | None:
        """The object's bytes (or a range of them); ``None`` if it does not exist."""
        key = validate_key(key)
        if self.counts_calls:
            self.stats.requests["get"] += 1
        return self._returned(await self._fetch_data(key, byte_range))

    async def get_object(
        self, key: str, byte_range: ByteRange | None = None, *, if_match: str | None = None
    ) -> GetResult | None:
        """Like :meth:`get` but with metadata; ``if_match`` makes the read conditional."""
        key = validate_key(key)
        if self.counts_calls:
            self.stats.requests["get"] += 1
        result = await self._fetch(key, byte_range, if_match)
        if result is not None:
            self._returned(result.data)
        return result

    def get_now(
        self, key: str, byte_range: ByteRange | None = None, *, if_match: str | None = None
    ) -> NowResult:
        """:meth:`get_object`'s answer when the store can give it without waiting (a
        memory store, a local file whose bytes are in the page cache, a chunk whose
        shard index and bytes are at hand), counted like it; :data:`WOULD_WAIT` (nothing
        counted) when it cannot: then call :meth:`get_object`. For hot paths that pay
        more for a coroutine than for the read (a server answering small chunks)."""
        key = validate_key(key)
        try:
            result = self._get_now(key, byte_range, if_match)
        except BaseException:
            self.stats.requests["get"] += 1  # as get_object counts a read that raises
            raise
        if result is WOULD_WAIT:
            return result
        stats = self.stats
        stats.requests["get"] += 1
        if isinstance(result, GetResult):
            size = len(result.data)
            if not self.counts_calls:
                stats.bytes_fetched += size
            stats.bytes_returned += size
        return result

    def head_now(self, key: str) -> ObjectMeta | WouldWait | None:
        """:meth:`head`'s answer when the store can give it without waiting (a memory
        store, a local file), counted like it; :data:`WOULD_WAIT` (nothing counted) when
        it cannot. When it returns the very metadata object a read returned, the object
        is unchanged since that read, so a caller may use the bytes of that read again
        (a server answering small files); an equal but distinct object promises nothing
        about bytes."""
        key = validate_key(key)
        result = self._head_now(key)
        if result is not WOULD_WAIT:
            self.stats.requests["head"] += 1
        return result

    async def head(self, key: str) -> ObjectMeta | None:
        """Size, version and modification time of an object, ``None`` if missing."""
        validate_key(key)
        self.stats.requests["head"] += 1
        return await self._bounded(self._head(key))

    async def exists(self, key: str) -> bool:
        """Whether the object exists."""
        return await self.head(key) is not None

    async def get_partial_values(
        self,
        key_ranges: Iterable[tuple[str, ByteRange | None]],
        *,
        if_match: Mapping[str, str] | None = None,
    ) -> list[Data | None]:
        """Read many ``(key, range)`` pairs; results in input order, ``None`` if missing.

        Bounded ranges of one key are coalesced (``max_gap``, ``max_request``, ``max_overfetch``:
        a merged request fetches at most that fraction of its wanted bytes again, or 4 KiB,
        more on a long round trip; ``None``: by the gap alone); a whole object request serves
        every range of its key; requests run concurrently in the store's :attr:`window` and
        under ``max_concurrency``. ``if_match`` maps keys to the versions the reads require.
        """
        return await read_ranges(self, key_ranges, if_match)

    async def get_many(self, keys: Sequence[str]) -> list[Data | None]:
        """Whole objects in input order (``None`` if missing), read as one backend batch:
        what a converter reading a shard's worth of chunk objects wants. Counts one
        ``get`` per distinct key."""
        keys = [validate_key(k) for k in keys]
        unique = list(dict.fromkeys(keys))
        self.stats.requests["get"] += len(unique)
        found: dict[str, Data] = {}
        for key, data in zip(unique, await self._get_many(unique), strict=True):
            if data is not None:
                self.stats.bytes_fetched += len(data)
                found[key] = data
        return [self._returned(found.get(k)) for k in keys]

    # -- writes -------------------------------------------------------------------------

    async def set(
        self,
        key: str,
        value: BytesLike,
        *,
        if_match: str | None = None,
        if_absent: bool = False,
    ) -> str | None:
        """Write ``value`` atomically; return the new version if the backend reports one."""
        validate_key(key)
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")
        self.stats.requests["put"] += 1
        self.stats.bytes_written += len(value)
        return await self._bounded(self._set(key, value, if_match, if_absent), len(value))

    async def set_many(self, items: Sequence[tuple[str, BytesLike]]) -> list[str | None]:
        """Write many objects unconditionally as one backend batch; return their versions.

        Each object is written atomically (a failure leaves it as it was), but a failed
        batch may have written some of the others. Keys must be distinct.
        """
        keys = [validate_key(k) for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError("set_many: duplicate keys")
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")
        self.stats.requests["put"] += len(keys)
        self.stats.bytes_written += sum(len(v) for _, v in items)
        return await self._set_many(items)

    async def copy(self, source: str, target: str) -> int | None:
        """Copy object ``source`` to ``target`` (replacing it atomically); return the size
        copied, or ``None`` if ``source`` does not exist. Counted as one ``copy``."""
        return (await self.copy_many([(source, target)]))[0]

    async def copy_many(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        """:meth:`copy` for many ``(source, target)`` pairs as one backend batch (one
        ``copy`` counted each); targets must be distinct. Sizes in input order."""
        for source, target in pairs:
            validate_key(source)
            validate_key(target)
        if len({t for _, t in pairs}) != len(pairs):
            raise ValueError("copy_many: duplicate targets")
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")
        self.stats.requests["copy"] += len(pairs)
        return await self._copy_many(pairs)

    async def set_partial_values(
        self, key_start_values: Iterable[tuple[str, int, BytesLike]]
    ) -> None:
        """Write byte runs into objects; runs are applied per key in input order.

        Each touched object is read, patched (a gap past its end is zero-filled, a missing
        object counts as empty) and written back with a conditional write, retried on
        conflict, so concurrent partial writers do not lose each other's runs.
        """
        grouped: dict[str, list[tuple[int, BytesLike]]] = {}
        for key, start, value in key_start_values:
            if start < 0:
                raise ValueError(f"negative start {start} for key {key!r}")
            grouped.setdefault(validate_key(key), []).append((start, value))
        await gather_settled(patch(self, k, runs) for k, runs in grouped.items())

    async def erase_values(self, keys: Iterable[str]) -> None:
        """Delete the objects; missing ones are ignored.

        Duplicate keys are deleted once. ``stats.requests["delete"]`` grows by the
        requests the backend was sent: one per key, or one per batch on backends with
        bulk deletes (S3: up to 1,000 keys). Nothing is left running when this returns
        or raises.
        """
        unique = list(dict.fromkeys(validate_key(k) for k in keys))
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")
        if unique:
            await self._erase_many(unique)

    async def erase_if_match(self, key: str, version: str) -> None:
        """Delete ``key`` only if it is still at ``version``; ``ConflictError`` otherwise.

        A missing object is a conflict too. Only on stores that
        :attr:`supports_conditional_deletes`.
        """
        validate_key(key)
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")
        self.stats.requests["delete"] += 1
        await self._bounded(self._erase_if_match(key, version))

    async def erase_prefix(self, prefix: str) -> None:
        """Delete every object whose key starts with ``prefix`` (``""`` erases all)."""
        await self.erase_values([k async for k in self.list_prefix(prefix)])

    async def prune(self, prefix: str = "") -> None:
        """Remove the folders below the folder ``prefix`` that hold no object: what a
        delete interrupted between removing an object and its emptied folder (a killed
        process) leaves behind, so that listings again show no prefix without keys.
        Objects are never touched. Stores without folders (object stores) have nothing
        to do; a read-only store raises :class:`ReadOnlyError`."""
        prefix = dir_prefix(prefix)
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")
        await self._prune(prefix)

    async def _prune(self, prefix: str) -> None:
        """:meth:`prune` of the folder ``prefix`` (``""`` or ending in ``/``)."""
        return  # no folders: nothing to do

    # -- listing ------------------------------------------------------------------------

    def list(self) -> AsyncIterator[str]:
        """Every key in the store."""
        return self.list_prefix("")

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key that starts with ``prefix``, as it is listed.

        An async generator: iterate it (``async for key in store.list_prefix("a/")``,
        or ``[k async for k in ...]``), do not ``await`` it; :meth:`list_dir` is the
        listing that is awaited.
        """
        prefix = validate_prefix(prefix)
        self.stats.requests["list"] += 1
        async for key in self._list(prefix):
            yield key

    async def list_dir(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[str]]:
        """``(keys, prefixes)`` directly below the directory ``prefix``.

        A coroutine: ``keys, prefixes = await store.list_dir("a")`` (unlike
        :meth:`list_prefix`, an async generator that is iterated).
        """
        prefix = dir_prefix(prefix)
        self.stats.requests["list"] += 1
        return await self._list_dir(prefix)

    async def has_folder(self, prefix: str) -> bool:
        """Whether the folder ``prefix`` exists even though :meth:`list_dir` shows nothing
        in it (views with folders declared by metadata); ``False`` on plain stores, where a
        folder exists exactly when something is stored below it."""
        return False

    # -- lifecycle ----------------------------------------------------------------------

    async def close(self) -> None:
        """Release resources; the store should not be used afterwards."""
        await self._close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
