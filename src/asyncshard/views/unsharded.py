"""UnshardedView: the sharded datasets of any Store presented as if they were unsharded.

A Store wrapping another. For every key it finds the dataset the key belongs to by
looking, from the root down, for the first folder holding a sharded Zarr v3 array or a
precomputed volume with sharded scales (:mod:`~asyncshard.views.folders`,
:mod:`~asyncshard.views.datasets`):

* the dataset's metadata key answers the rewritten metadata (inner chunks as chunks,
  ``info`` without ``sharding``);
* a chunk key of the dataset is read out of its shard by the dataset's sharded store
  (shard files of precomputed scales are hidden; Zarr shard keys are inner-chunk keys);
* every other key passes through unchanged.

Only the nearest ``max_depth`` (:data:`DEFAULT_MAX_DEPTH`, 34) folders above a key are
searched, two metadata reads each, so a request costs a bounded number of backend reads
however deep its path. 34 covers every layout a viewer reads: a Zarr chunk key (default
encoding) is ``ndim + 1`` segments below its array's folder, a precomputed chunk two
below its volume's, and 34 = 32 dimensions + 2. A dataset further up is not seen from the
deep key: it passes through unchanged.

**Listing** has one policy with one switch. ``list_chunks=False`` (the server's): a
folder is one listing of the wrapped store with shard files and chunk-named objects
hidden, and chunk keys are not enumerated (that would read one index per shard:
thousands of requests; viewers compute chunk keys from the metadata instead). A
precomputed scale's folder exists even when it lists nothing (:meth:`has_folder`).
``list_chunks=True`` (library callers that list chunks): a folder holding chunks is
listed by the dataset's sharded store, which reads the shard indexes (cached).

**Writes** (``writable=True``; read-only otherwise) are routed like reads: a chunk key
goes to its dataset's sharded store, a dataset's ``zarr.json`` is mapped back onto the
stored sharded document, every other key passes through; what is refused and how
``erase_prefix`` works is told in :mod:`~asyncshard.views.writes`.

All sharded stores share one :class:`~asyncshard.cache.LoadingCache`. What a folder holds
is remembered for ``metadata_ttl`` seconds, and forgotten at once when metadata is
written or erased through the view. With ``recheck_metadata`` (for writers and library
callers), a read of a metadata document reloads its folder first, and a chunk key lying
outside its dataset reloads the dataset once (another process may have grown it).
Shard changes are seen at once by chunk reads (data reads are conditioned on the cached
index's version); "no such chunk" answers come from an index at most ``recheck_after``
seconds old.

Versions of rewritten metadata and virtual chunks carry the prefix ``unshard:``
(:mod:`~asyncshard.views.targets`). The view is built in layers, one job each: routing
(:mod:`~asyncshard.views.routed`), writes (:mod:`~asyncshard.views.writes`), and here
the reads (with the no-wait path's remembered answers) and listing.
"""

from __future__ import annotations

import builtins
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from asyncshard.cache import LoadingCache
from asyncshard.errors import ConflictError
from asyncshard.ranges import ByteRange, Range, resolve
from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER, ChunkRead
from asyncshard.sharding.engine.reads import ShardReads, raised
from asyncshard.store import (
    WOULD_WAIT,
    BytesLike,
    Data,
    GetResult,
    NowResult,
    ObjectMeta,
    Store,
    WouldWait,
)
from asyncshard.views.datasets import DatasetOptions, present_group
from asyncshard.views.folders import Folders, Node
from asyncshard.views.routed import MAX_ROUTES
from asyncshard.views.targets import (
    VERSION_PREFIX,
    Hidden,
    Target,
    inner_version,
    is_group_document,
    parsing,
    target_in,
    virtual_meta,
    virtual_version,
)
from asyncshard.views.writes import WritableView
from asyncshard.wrapper import with_key

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_METADATA_TTL",
    "VERSION_PREFIX",
    "UnshardedView",
    "virtual_version",
]

#: Group documents larger than this are served as they are (never read whole to rewrite).
MAX_GROUP_DOCUMENT = 16 * 1024 * 1024
DEFAULT_METADATA_TTL = 60.0
DEFAULT_MAX_FOLDERS = 16384
#: Folders above a key searched for its dataset: 32 dimensions + 2 (see the module doc).
DEFAULT_MAX_DEPTH = 34


@dataclass(frozen=True, slots=True)
class _Answer:
    """A lean read's answer, remembered until ``until`` (``time.monotonic``)."""

    byte_range: ByteRange | None
    until: float
    result: GetResult
    route_until: float
    reads: ShardReads[Any]
    shard_key: str


class UnshardedView(WritableView):
    """A Store showing the sharded datasets of ``inner`` unsharded.

    Args:
        inner: any Store.
        cache: the index cache of every dataset's sharded store (default: a private one).
        list_chunks: list chunk keys by reading shard indexes (see the module docstring).
        writable: accept writes (see the module docstring); read-only by default.
        recheck_metadata: reload a folder when its metadata document is read, and a
            dataset when a chunk key lies outside it.
        write_window: seconds a chunk write waits for more writes of its shard, so that
            writes arriving a few ticks apart make one shard write (``0``: only writes of
            one tick are merged); see :mod:`~asyncshard.views.gate`.
        write_flush_at: how many chunk writes one writer keeps in flight at most (zarr's
            ``async.concurrency``): when every writer seen has that many waiting, they
            leave at once; see :class:`~asyncshard.views.gate.WriteGate`.
        write_cut_short: called with the shard's chunk count when a shard is written in
            parts because every writer was at that bound and it is below the shard's
            chunks (see :class:`~asyncshard.views.gate.WriteGate`).
        recheck_after: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
        data_cache: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
        lean_reads: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
        metadata_ttl: seconds a folder's metadata is trusted.
        max_folders: folders whose metadata is remembered.
        max_depth: folders above a key searched for its dataset.
    """

    def __init__(
        self,
        inner: Store,
        *,
        cache: LoadingCache | None = None,
        list_chunks: bool = False,
        writable: bool = False,
        recheck_metadata: bool = False,
        recheck_after: float = DEFAULT_RECHECK_AFTER,
        data_cache: LoadingCache | None = None,
        lean_reads: bool = True,
        metadata_ttl: float = DEFAULT_METADATA_TTL,
        max_folders: int = DEFAULT_MAX_FOLDERS,
        max_depth: int = DEFAULT_MAX_DEPTH,
        write_window: float = 0.0,
        write_flush_at: Callable[[], int] | None = None,
        write_cut_short: Callable[[int], None] | None = None,
    ) -> None:
        index_cache = cache if cache is not None else LoadingCache()
        options = DatasetOptions(index_cache, recheck_after, data_cache, lean_reads)
        folders = Folders(
            inner, options, ttl=metadata_ttl, max_folders=max_folders, max_depth=max_depth
        )
        super().__init__(
            inner,
            options,
            folders,
            recheck_metadata=recheck_metadata,
            writable=writable,
            write_window=write_window,
            write_flush_at=write_flush_at,
            write_cut_short=write_cut_short,
        )
        self.list_chunks = list_chunks
        self._answers: dict[str, _Answer] = {}
        self._answers_stamp = self._stamp()

    def __repr__(self) -> str:
        return f"UnshardedView({self.inner!r})"

    # -- reads ----------------------------------------------------------------------------

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        return await self._get_routed(key, await self._target(key), byte_range, if_match)

    async def _get_data(self, key: str, byte_range: ByteRange | None) -> Data | None:
        """The bytes alone: a passed-through key is the wrapped store's ``get`` (one
        completion on cloud stores, where ``get_object`` takes two)."""
        target = await self._target(key)
        if target is None and not is_group_document(key):
            return await self.inner.get(self._inner_key(key), byte_range)
        result = await self._get_routed(key, target, byte_range, None)
        return None if result is None else result.data

    async def _get_routed(
        self, key: str, target: Target, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        """:meth:`_get` of ``key`` once routed to ``target``."""
        if target is None and is_group_document(key):
            return await self._get_group(key, byte_range, if_match)
        if target is None:
            return await super()._get(key, byte_range, if_match)
        if isinstance(target, Hidden):
            return None
        version = inner_version(key, if_match)
        if isinstance(target, Node):
            if version is not None and version != target.version:
                raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
            return _document(target, key, byte_range)
        loc = target.loc
        if not loc.inside:
            return None
        read = ChunkRead(target.rel, loc.shard_key, loc.chunk, byte_range, version)
        result = await target.scope.store.reads.read_one(read)
        if result is None:
            return None
        return with_key(GetResult(result.data, virtual_meta(result.meta)), key)

    def _get_now(self, key: str, byte_range: ByteRange | None, if_match: str | None) -> NowResult:
        """:meth:`_get` from what is at hand: the key's folders remembered, a chunk's
        shard index cached and its bytes readable without waiting (see
        :meth:`~asyncshard.sharding.engine.reads.ShardReads.read_now`)."""
        if if_match is not None or self.recheck_metadata:
            return WOULD_WAIT
        known = self._answer_now(key, byte_range)
        if known is not None:
            return known
        route = self._route_now(key)
        if isinstance(route, WouldWait):
            return route
        target, route_until = route
        if target is None:
            if is_group_document(key):
                return WOULD_WAIT
            result = self.inner.get_now(key, byte_range)
            return with_key(result, key) if isinstance(result, GetResult) else result
        if isinstance(target, Hidden):
            return None
        if isinstance(target, Node):
            return _document(target, key, byte_range)
        loc = target.loc
        if not loc.inside:
            return None
        read = ChunkRead(target.rel, loc.shard_key, loc.chunk, byte_range, None)
        reads = target.scope.store.reads
        outcome = reads.read_now(read)
        if not isinstance(outcome, GetResult):
            return raised(outcome) if not isinstance(outcome, WouldWait) else outcome
        meta = outcome.meta
        result = GetResult(outcome.data, ObjectMeta(key, meta.size, virtual_version(meta.version)))
        until = reads.cached_until(read)
        if until is not None:
            answer = _Answer(
                byte_range, min(until, route_until), result, route_until, reads, loc.shard_key
            )
            self._remember(key, answer)
        return result

    def _stamp(self) -> tuple[int, int, int]:
        """What the remembered answers depend on: the folders, the index cache and the
        data cache, each unchanged while its generation is (``-1``: no data cache)."""
        data = self.options.data_cache
        return (
            self.folders.generation,
            self.options.cache.generation,
            -1 if data is None else data.generation,
        )

    def _head_now(self, key: str) -> ObjectMeta | WouldWait:
        """The metadata of a remembered answer that still holds (a viewer revalidating
        a chunk it read: no route, index or data-cache lookup)."""
        if self.recheck_metadata:
            return WOULD_WAIT
        known = self._held(key)
        return WOULD_WAIT if known is None else known.result.meta

    @property
    def supports_head_now(self) -> bool:
        return True

    def _answer_now(self, key: str, byte_range: ByteRange | None) -> GetResult | None:
        """The remembered answer to a repeated lean read, if it still holds.

        Answers are remembered only when the data cache held their bytes and are all
        forgotten once a folder, the index cache or the data cache changes: a repeated
        chunk read is then a dictionary lookup, and the answers never keep bytes that the
        data cache dropped for longer than until the next read."""
        known = self._held(key)
        if known is None or (known.byte_range is not byte_range and known.byte_range != byte_range):
            return None
        return known.result

    def _held(self, key: str) -> _Answer | None:
        """The remembered answer of ``key``, if it still holds (see :meth:`_answer_now`)."""
        if not self._answers_hold():
            return None
        known = self._answers.get(key)
        if known is None:
            return None
        now = time.monotonic()
        if now < known.until:
            return known
        # the shard's index aged (or the route): a read of another chunk may have
        # confirmed the index since; nothing else changed (the stamp did not)
        recent = known.reads.recent_until(known.shard_key)
        if recent is None or now >= recent or now >= known.route_until:
            return None
        renewed = dataclasses.replace(known, until=min(recent, known.route_until))
        self._answers[key] = renewed
        return renewed

    def _answers_hold(self) -> bool:
        """Whether the remembered answers still hold; if not, they are forgotten (and
        what is remembered from now on holds for the current stamp)."""
        stamp = self._stamp()
        if stamp == self._answers_stamp:
            return True
        self._answers.clear()
        self._answers_stamp = stamp
        return False

    def _remember(self, key: str, answer: _Answer) -> None:
        self._answers_hold()  # the read itself may have changed a cache: start over then
        if len(self._answers) >= MAX_ROUTES:
            self._answers.clear()
        self._answers[key] = answer

    async def _get_group(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        """A ``zarr.json`` that is no dataset's: a group whose consolidated metadata names
        sharded arrays is presented with them unsharded (and a virtual version)."""
        virtual = if_match is not None and if_match.startswith(VERSION_PREFIX)
        version = inner_version(key, if_match) if virtual else if_match
        head = Range(0, MAX_GROUP_DOCUMENT + 1)
        result = await self.inner.get_object(key, head, if_match=version)
        if result is None:
            return None
        if len(result.data) > MAX_GROUP_DOCUMENT:  # too large to rewrite: served as it is
            if virtual:
                raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
            return await super()._get(key, byte_range, if_match)
        document = present_group(bytes(result.data))
        meta = result.meta
        if document is None:
            data: BytesLike = result.data
        else:
            data, meta = document, virtual_meta(meta)
        if virtual != (document is not None) and if_match is not None:
            raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
        start, end = resolve(byte_range, len(data))
        meta = ObjectMeta(key, len(data), meta.version, meta.last_modified)
        return GetResult(memoryview(data)[start:end], meta)

    async def _head(self, key: str) -> ObjectMeta | None:
        target = await self._target(key)
        if target is None and is_group_document(key):
            result = await self._get_group(key, None, None)
            return None if result is None else result.meta
        if target is None:
            return await super()._head(key)
        if isinstance(target, Hidden):
            return None
        if isinstance(target, Node):
            assert target.dataset is not None
            size = len(target.dataset.document)
            return ObjectMeta(key, size, virtual_version(target.version))
        meta = await target.scope.store.head(target.rel)
        return None if meta is None else virtual_meta(ObjectMeta(key, meta.size, meta.version))

    # -- listing --------------------------------------------------------------------------

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        node = await self.folders.find(prefix)
        dataset = None if node is None else node.dataset
        if node is None or dataset is None:
            return await self.inner.list_dir(prefix)
        if self.list_chunks:
            for scope in dataset.scopes:
                rel = scope.key(prefix)
                if rel is not None:
                    with parsing(prefix):
                        keys, prefixes = await scope.store.list_dir(rel)
                    base = scope.base
                    return [base + k for k in keys], [base + p for p in prefixes]
        keys, prefixes = await self.inner.list_dir(prefix)
        shown = [k for k in keys if target_in(node, k) is None]
        return shown, prefixes

    async def has_folder(self, prefix: str) -> bool:
        """Whether the folder ``prefix`` (ending in ``/``) exists even if it lists nothing:
        a folder of chunk keys of a dataset (a sharded scale, a Zarr ``c/`` folder)."""
        node = await self.folders.find(prefix)
        if node is None or node.dataset is None:
            return False
        with parsing(prefix):
            for scope in node.dataset.scopes:
                rel = scope.key(prefix)
                if rel is not None and scope.store.format.is_chunk_folder(rel):
                    return True
        return False

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        folder, sep, _ = prefix.rpartition("/")
        pending = [folder + sep]
        while pending:
            keys, prefixes = await self._list_dir(pending.pop())
            for key in keys:
                if key.startswith(prefix):
                    yield key
            pending.extend(p for p in prefixes if p.startswith(prefix) or prefix.startswith(p))

    async def _close(self) -> None:
        self.folders.forget_cached()  # the datasets' indexes and kept shards
        await super()._close()


def _document(node: Node, key: str, byte_range: ByteRange | None) -> GetResult:
    """The rewritten metadata document of the node's dataset (or a range of it)."""
    assert node.dataset is not None
    document = node.dataset.document
    start, end = resolve(byte_range, len(document))
    meta = ObjectMeta(key, len(document), virtual_version(node.version))
    return GetResult(memoryview(document)[start:end], meta)
