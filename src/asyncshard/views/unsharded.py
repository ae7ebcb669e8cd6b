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
goes to its dataset's sharded store (a conditional read-merge-write of its shard; writes
of one shard arriving together are merged); a dataset's ``zarr.json`` is mapped back
onto the stored sharded document (:func:`~asyncshard.formats.zarr3.metadata.
map_back_metadata`), conditionally on the version read; every other key passes through.
Refused with a typed error, writing nothing: metadata that cannot be mapped back, a
precomputed ``info`` or shard file, and metadata that would create a sharded dataset
(its writer would write whole shards at keys the view reads as chunks: create sharded
datasets through the wrapped store). ``erase_prefix`` of a dataset's folder (or above)
deletes its objects, shards included; inside a dataset it erases the chunks listed
there (``list_chunks=True``), never a whole shard holding other chunks.

All sharded stores share one :class:`~asyncshard.cache.LoadingCache`. What a folder holds
is remembered for ``metadata_ttl`` seconds, and forgotten at once when metadata is
written or erased through the view. With ``recheck_metadata`` (for writers and library
callers), a read of a metadata document reloads its folder first, and a chunk key lying
outside its dataset reloads the dataset once (another process may have grown it).
Shard changes are seen at once by chunk reads (data reads are conditioned on the cached
index's version); "no such chunk" answers come from an index at most ``recheck_after``
seconds old.

Versions of rewritten metadata and virtual chunks carry the prefix ``unshard:``
(:mod:`~asyncshard.views.targets`).
"""

from __future__ import annotations

import builtins
import dataclasses
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from asyncshard.cache import LoadingCache
from asyncshard.errors import (
    ConflictError,
    InvalidKeyError,
    ReadOnlyError,
    UnsupportedOperationError,
)
from asyncshard.fanout import run_writes
from asyncshard.ranges import ByteRange, Range, resolve
from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER, ChunkRead, ShardedAdapter
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
    retry_on_conflict,
    validate_key,
    validate_prefix,
)
from asyncshard.views.datasets import (
    OPENERS,
    Dataset,
    DatasetOptions,
    Scope,
    group_arrays,
    map_back_group,
    present_group,
)
from asyncshard.views.folders import Folders, Node, folder_of_metadata
from asyncshard.views.gate import WriteGate
from asyncshard.views.targets import (
    GROUP_DOCUMENT,
    VERSION_PREFIX,
    Chunk,
    Hidden,
    Target,
    inner_version,
    is_group_document,
    parsing,
    target_in,
    virtual_meta,
    virtual_version,
)
from asyncshard.wrapper import WrapperStore, with_key

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_METADATA_TTL",
    "VERSION_PREFIX",
    "UnshardedView",
    "virtual_version",
]

#: Keys whose routes (and chunk answers) :meth:`UnshardedView._get_now` remembers.
MAX_ROUTES = 16384
#: Group documents larger than this are served as they are (never read whole to rewrite).
MAX_GROUP_DOCUMENT = 16 * 1024 * 1024
DEFAULT_METADATA_TTL = 60.0
DEFAULT_MAX_FOLDERS = 16384
#: Folders above a key searched for its dataset: 32 dimensions + 2 (see the module doc).
DEFAULT_MAX_DEPTH = 34

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Answer:
    """A lean read's answer, remembered until ``until`` (``time.monotonic``)."""

    byte_range: ByteRange | None
    until: float
    result: GetResult
    route_until: float
    reads: ShardReads[Any]
    shard_key: str


class _CallerConflict(Exception):
    """The caller's own condition failed during a retried update (not to be retried)."""

    def __init__(self, error: ConflictError) -> None:
        super().__init__(str(error))
        self.error = error


class UnshardedView(WrapperStore):
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
        super().__init__(inner)
        self._write_flush_at, self._write_cut_short = write_flush_at, write_cut_short
        index_cache = cache if cache is not None else LoadingCache()
        self.options = DatasetOptions(index_cache, recheck_after, data_cache, lean_reads)
        self.list_chunks = list_chunks
        self.writable = writable
        self.recheck_metadata = recheck_metadata
        self.folders = Folders(
            inner, self.options, ttl=metadata_ttl, max_folders=max_folders, max_depth=max_depth
        )
        self._routes: dict[str, tuple[Target, float, int]] = {}
        self._answers: dict[str, _Answer] = {}
        self._answers_stamp = self._stamp()
        self._gate = (
            WriteGate(
                window=write_window,
                max_wait=10 * write_window,
                flush_at=write_flush_at,
                on_cut=self._cut_short,
            )
            if write_window > 0
            else None
        )

    def __repr__(self) -> str:
        return f"UnshardedView({self.inner!r})"

    @property
    def cache(self) -> LoadingCache:
        """The index cache shared by the datasets' sharded stores."""
        return self.options.cache

    @property
    def metadata_ttl(self) -> float:
        """Seconds a folder's metadata is trusted."""
        return self.folders.ttl

    @property
    def max_depth(self) -> int:
        """Folders above a key searched for its dataset."""
        return self.folders.max_depth

    @property
    def supports_writes(self) -> bool:
        return self.writable and self.inner.supports_writes

    @property
    def supports_conditional_deletes(self) -> bool:
        return False

    # -- routing --------------------------------------------------------------------------

    async def _route(self, key: str) -> Target:
        """What serves ``key`` (see :data:`Target`)."""
        node = await self.folders.find(key)
        return None if node is None else self._target_in(node, key)

    @staticmethod
    def _target_in(node: Node, key: str) -> Target:
        """What serves ``key`` in the folder ``node`` found for it."""
        if node.dataset is None:
            return None
        if key == node.dataset.metadata_key:
            return node
        return target_in(node, key)

    async def _target(self, key: str) -> Target:
        """:meth:`_route`, rechecking metadata first where ``recheck_metadata`` asks: a
        metadata document's folder is reloaded; a chunk outside its dataset reloads the
        dataset once (it may have grown)."""
        if not self.recheck_metadata:
            return await self._route(key)
        folder = folder_of_metadata(key)
        if folder is not None:
            await self.folders.node(folder, fresh=True)
        target = await self._route(key)
        if isinstance(target, Chunk) and not target.loc.inside:
            assert target.node.dataset is not None
            await self.folders.node(target.node.dataset.folder, fresh=True)
            target = await self._route(key)
        return target

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

    def _route_now(self, key: str) -> tuple[Target, float] | WouldWait:
        """:meth:`_route` from remembered folders alone (:data:`WOULD_WAIT` if one must
        be loaded), and until when (``time.monotonic``) it holds. Answers are remembered
        per key (up to :data:`MAX_ROUTES` keys) until a folder they came from expires or
        any metadata is invalidated: a viewer asks for the same chunks again and again,
        and routing is most of a cached read."""
        folders = self.folders
        known = self._routes.get(key)
        if known is not None:
            target, until, generation = known
            if generation == folders.generation and time.monotonic() < until:
                return target, until
        generation = folders.generation  # before the lookup: a change during it counts
        found = folders.find_now(key)
        if isinstance(found, WouldWait):
            return found
        node, until = found
        target = None if node is None else self._target_in(node, key)
        if len(self._routes) >= MAX_ROUTES:
            self._routes.clear()
        self._routes[key] = (target, until, generation)
        return target, until

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

    # -- writes ---------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        self._check_writable()
        folder = folder_of_metadata(key)
        if folder is not None:
            try:
                return await self._put_metadata(key, folder, data, if_match, if_absent)
            finally:
                self.folders.invalidate(folder)
        target = await self._target(key)
        if isinstance(target, Chunk):
            version = inner_version(key, if_match)
            store, rel = target.scope.store, target.rel
            conditional = version is not None or if_absent
            return virtual_version(
                await self._gated(
                    target,
                    lambda: store.set(rel, data, if_match=version, if_absent=if_absent),
                    whole=not conditional,
                )
            )
        self._refuse(key, target)
        return await super()._set(key, data, if_match, if_absent)

    async def _gated(
        self, target: Chunk, op: Callable[[], Awaitable[T]], *, whole: bool = False
    ) -> T:
        """``op()`` (a write of the chunk ``target``) through the write gate, grouped by
        shard; ``whole``: the write may count towards writing the whole shard."""
        loc = target.loc
        if self._gate is None or not loc.inside:
            return await op()
        fmt, shard_key = target.scope.store.format, loc.shard_key
        size: int | None = -1  # not known yet

        def complete(tags: Sequence[Hashable]) -> bool:
            # asked on every arriving write of the shard: counts first, the chunks at most
            # once per shard
            nonlocal size
            if size == -1:
                size = fmt.whole_count(shard_key)
            if size is None or len(tags) < size:
                return False
            return None not in tags and fmt.is_whole(shard_key, tags)

        group = (target.scope.store, shard_key)
        tag = loc.chunk if whole else None
        return await self._gate.run(group, op, tag=tag, complete=complete)

    def _cut_short(self, group: Hashable) -> None:
        """The gate wrote a shard in parts, every writer at its bound:
        ``write_cut_short(chunks)`` if that bound is below the shard's ``chunks``."""
        if self._write_cut_short is None or self._write_flush_at is None:
            return
        store, shard_key = cast(tuple[ShardedAdapter[Any], str], group)
        size = store.format.whole_count(shard_key)
        if size is not None and self._write_flush_at() < size:
            self._write_cut_short(size)

    def _refuse(self, key: str, target: Target) -> None:
        """Raise for the targets no write may reach: shard files, precomputed metadata."""
        if isinstance(target, Hidden):
            raise UnsupportedOperationError(
                f"{key}: a shard file of a sharded precomputed scale cannot be written "
                "through the unsharded view; write its chunks by name"
            )
        if isinstance(target, Node):
            raise UnsupportedOperationError(
                f"{key}: the metadata of a sharded precomputed volume cannot be written "
                "through the unsharded view"
            )

    async def _put_metadata(
        self, key: str, folder: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        await self.folders.node(folder, fresh=True)
        target = await self._route(key)
        dataset = target.dataset if isinstance(target, Node) else None
        if dataset is not None and dataset.map_back is not None:
            return await self._map_back(key, dataset, bytes(data), if_match, if_absent)
        if isinstance(target, Chunk):  # a chunk named like a metadata document
            version = await target.scope.store.set(
                target.rel, data, if_match=inner_version(key, if_match), if_absent=if_absent
            )
            return virtual_version(version)
        self._refuse(key, target)
        if target is None:
            self._refuse_sharded_creation(key, folder, bytes(data))
            if is_group_document(key):
                data = await self._map_back_group(key, folder, bytes(data))
                if if_match is not None and if_match.startswith(VERSION_PREFIX):
                    if_match = inner_version(key, if_match)  # as read: presented rewritten
        return await super()._set(key, data, if_match, if_absent)

    async def _map_back_group(self, key: str, folder: str, data: bytes) -> bytes:
        """A group document written through the view, with the consolidated metadata of
        its sharded arrays mapped back onto their stored documents."""
        real: dict[str, bytes] = {}
        for path in group_arrays(data):
            try:
                validate_key(f"{folder}{path}/{GROUP_DOCUMENT}")
            except InvalidKeyError:
                continue  # names nothing the store can hold
            node = await self.folders.node(f"{folder}{path}/", fresh=True)
            if node.dataset is not None and node.dataset.map_back is not None:
                real[path] = node.source
        return map_back_group(data, real, key) if real else data

    def _refuse_sharded_creation(self, key: str, folder: str, data: bytes) -> None:
        """Refuse metadata that would make ``folder`` a sharded dataset: its writer would
        write whole shards at keys this view reads as chunks."""
        name = key[len(folder) :]
        if OPENERS[name](self.inner, folder, data, self.options) is not None:
            raise UnsupportedOperationError(
                f"{key}: creating a sharded dataset through the unsharded view is refused "
                "(its writer would write whole shards at keys the view reads as inner "
                "chunks). Create it through the wrapped store (zarr-python: "
                "ZarrStore.create_sharded_array, or a pass-through ZarrStore); it then "
                "appears unsharded here."
            )

    async def _map_back(
        self, key: str, dataset: Dataset, written: bytes, if_match: str | None, if_absent: bool
    ) -> str | None:
        """Write metadata written through the view onto the stored sharded document,
        conditionally on the version read (retried on conflict)."""
        assert dataset.map_back is not None
        if if_absent:
            raise ConflictError(f"{key}: object already exists", key=key)
        expected = inner_version(key, if_match)
        conditional = self.inner.supports_conditional_writes
        map_back = dataset.map_back

        async def attempt() -> str | None:
            current = await self.inner.get_object(key)
            if current is None or (expected is not None and current.meta.version != expected):
                error = ConflictError(f"{key}: object is not at version {if_match}", key=key)
                if current is None and expected is None:
                    error = ConflictError(f"{key}: the array was deleted meanwhile", key=key)
                raise _CallerConflict(error)
            new = map_back(bytes(current.data), written)
            version = current.meta.version if conditional else None
            return await self.inner.set(key, new, if_match=version)

        try:
            return virtual_version(await retry_on_conflict(attempt, key))
        except _CallerConflict as exc:
            raise exc.error from None

    async def set_partial_values(
        self, key_start_values: Iterable[tuple[str, int, BytesLike]]
    ) -> None:
        """Patch byte runs into chunks (through their sharded stores) or plain objects;
        metadata documents of datasets cannot be patched."""
        self._check_writable()
        triples = [(validate_key(k), s, v) for k, s, v in key_start_values]
        for key, start, _ in triples:
            if start < 0:
                raise ValueError(f"negative start {start} for key {key!r}")
        self.stats.requests["put"] += len({k for k, _, _ in triples})
        self.stats.bytes_written += sum(len(v) for _, _, v in triples)
        plain: list[tuple[str, int, BytesLike]] = []
        by_scope: dict[int, tuple[Scope, list[tuple[str, int, BytesLike]], list[str]]] = {}
        for key, start, value in triples:
            target = await self._target(key)
            if isinstance(target, Chunk):
                _, runs, keys = by_scope.setdefault(id(target.scope), (target.scope, [], []))
                runs.append((target.rel, start, value))
                keys.append(key)
                continue
            if isinstance(target, Node):
                raise UnsupportedOperationError(
                    f"{key}: metadata of a sharded dataset cannot be patched through the view"
                )
            self._refuse(key, target)
            plain.append((key, start, value))
        jobs: list[tuple[Sequence[str], Awaitable[object]]] = [
            (keys, scope.store.set_partial_values(runs)) for scope, runs, keys in by_scope.values()
        ]
        if plain:
            jobs.append(([k for k, _, _ in plain], self.inner.set_partial_values(plain)))
        folders = {f for f in (folder_of_metadata(k) for k, _, _ in plain) if f is not None}
        try:
            await run_writes(jobs)
        finally:
            for folder in folders:
                self.folders.invalidate(folder)

    async def erase_values(self, keys: Iterable[str]) -> None:
        """Erase chunks (through their sharded stores: one update per shard) and plain
        objects; erasing a metadata document forgets its folder."""
        keys = [validate_key(k) for k in keys]
        self._check_writable()
        self.stats.requests["delete"] += len(keys)
        targets = [await self._target(key) for key in keys]
        for key, target in zip(keys, targets, strict=True):
            if isinstance(target, Hidden):
                self._refuse(key, target)
        if len(targets) == 1 and isinstance(target := targets[0], Chunk):
            # one chunk (zarr-python deletes chunk by chunk): joins its shard's writes
            store, rel = target.scope.store, target.rel
            await self._gated(target, lambda: store.erase_values([rel]))
            return
        plain: list[str] = []
        by_scope: dict[int, tuple[Scope, list[str], list[str]]] = {}
        for key, target in zip(keys, targets, strict=True):
            if isinstance(target, Chunk):
                _, rels, names = by_scope.setdefault(id(target.scope), (target.scope, [], []))
                rels.append(target.rel)
                names.append(key)
            else:
                plain.append(key)
        jobs: list[tuple[Sequence[str], Awaitable[object]]] = [
            (names, scope.store.erase_values(rels)) for scope, rels, names in by_scope.values()
        ]
        if plain:
            jobs.append((plain, self.inner.erase_values(plain)))
        folders = {f for f in map(folder_of_metadata, plain) if f is not None}
        try:
            await run_writes(jobs)
        finally:
            for folder in folders:
                self.folders.invalidate(folder)

    async def _erase(self, key: str) -> None:
        await self.erase_values([key])

    async def _erase_if_match(self, key: str, version: str) -> None:
        raise UnsupportedOperationError(f"{self!r} cannot delete conditionally")

    async def erase_prefix(self, prefix: str) -> None:
        """Erase every key starting with ``prefix`` as the view shows it.

        A prefix at or above a dataset's folder erases the wrapped store's objects there
        (shards included) in one pass; a prefix inside a dataset erases the keys the view
        lists there (its chunks through the sharded store, so a shard also holding other
        chunks keeps them).
        """
        prefix = validate_prefix(prefix)
        self._check_writable()
        node = await self.folders.find(prefix)
        dataset = None if node is None else node.dataset
        if dataset is not None and prefix.startswith(dataset.folder) and prefix != dataset.folder:
            await self.erase_values([k async for k in self.list_prefix(prefix)])
            return
        try:
            await self.inner.erase_prefix(prefix)
        finally:
            self.folders.invalidate_around(prefix)

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
