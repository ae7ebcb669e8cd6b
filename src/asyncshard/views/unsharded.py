"""UnshardedView: the sharded datasets of any Store presented as if they were unsharded.

A read-only Store wrapping another. For every key it finds the dataset the key belongs
to by looking, from the root down, for the first folder holding a sharded Zarr v3 array
or a precomputed volume with sharded scales (:mod:`~asyncshard.views.datasets`):

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

All sharded stores share one :class:`~asyncshard.cache.IndexCache`. What a folder holds
is remembered for ``metadata_ttl`` seconds (single-flight), so metadata changes show up
after at most that long. Shard changes are seen at once by chunk reads (data reads are
conditioned on the cached index's version); "no such chunk" answers come from an index
at most ``recheck_after`` seconds old.

Versions of rewritten metadata and virtual chunks are the underlying versions with the
prefix ``unshard:``, so they never collide with the versions of the raw objects at the
same keys (an HTTP cache revalidating one against the other must not match).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from asyncshard.cache import IndexCache
from asyncshard.errors import AsyncShardError, ConflictError, InvalidKeyError, ReadOnlyError
from asyncshard.ranges import ByteRange, resolve
from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER, Location
from asyncshard.store import BytesLike, GetResult, ObjectMeta, Store
from asyncshard.views.datasets import OPENERS, Dataset, Options, Scope, is_dataset_document
from asyncshard.wrapper import WrapperStore, with_key

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_METADATA_TTL",
    "VERSION_PREFIX",
    "UnshardedView",
    "virtual_version",
]

VERSION_PREFIX = "unshard:"
DEFAULT_METADATA_TTL = 60.0
DEFAULT_MAX_FOLDERS = 16384
#: Folders above a key searched for its dataset: 32 dimensions + 2 (see the module doc).
DEFAULT_MAX_DEPTH = 34

log = logging.getLogger("asyncshard.views")


def virtual_version(version: str | None) -> str | None:
    """The version the view reports for an object derived from one at ``version``."""
    return None if version is None else VERSION_PREFIX + version


def _inner_version(key: str, if_match: str | None) -> str | None:
    if if_match is None:
        return None
    if not if_match.startswith(VERSION_PREFIX):
        raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
    return if_match[len(VERSION_PREFIX) :]


def _virtual(meta: ObjectMeta) -> ObjectMeta:
    return ObjectMeta(meta.key, meta.size, virtual_version(meta.version), meta.last_modified)


@contextlib.contextmanager
def _parsing(key: str) -> Iterator[None]:
    """Turn a ``ValueError``/``OverflowError`` out of a dataset's key parsing into
    :class:`InvalidKeyError` (``400``): a key no parser can read is the client's error."""
    try:
        yield
    except AsyncShardError:
        raise  # already typed (some are ValueErrors too)
    except (ValueError, OverflowError) as exc:
        log.warning("unparsable key %.200r: %s: %.200s", key, type(exc).__name__, exc)
        raise InvalidKeyError(f"cannot parse the key {key[:200]!r}") from None


@dataclass
class _Node:
    """What one folder holds: a sharded dataset or nothing; ``source`` is the raw metadata
    it was opened from. ``terminal``: the folder holds a dataset of some kind, so no
    folder below it can hold another one."""

    dataset: Dataset | None = None
    version: str | None = None
    source: bytes = b""
    loaded_at: float = 0.0
    terminal: bool = False


_HIDDEN = object()  # a key the view hides (a precomputed shard file)


class UnshardedView(WrapperStore):
    """A read-only Store showing the sharded datasets of ``inner`` unsharded.

    Args:
        inner: any Store.
        cache: the index cache of every dataset's sharded store (default: a private one).
        list_chunks: list chunk keys by reading shard indexes (see the module docstring).
        recheck_after, data_cache: see :class:`~asyncshard.sharding.engine.ShardedAdapter`.
        metadata_ttl: seconds a folder's metadata is trusted.
        max_folders: folders whose metadata is remembered.
        max_depth: folders above a key searched for its dataset.
    """

    def __init__(
        self,
        inner: Store,
        *,
        cache: IndexCache | None = None,
        list_chunks: bool = False,
        recheck_after: float = DEFAULT_RECHECK_AFTER,
        data_cache: IndexCache | None = None,
        metadata_ttl: float = DEFAULT_METADATA_TTL,
        max_folders: int = DEFAULT_MAX_FOLDERS,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        super().__init__(inner)
        index_cache = cache if cache is not None else IndexCache()
        self.options = Options(index_cache, recheck_after, data_cache)
        self.list_chunks = list_chunks
        self.metadata_ttl = metadata_ttl
        self.max_depth = max_depth
        self._nodes: LRUCache[str, _Node] = LRUCache(max_folders)
        self._loading: dict[str, asyncio.Task[_Node]] = {}

    def __repr__(self) -> str:
        return f"UnshardedView({self.inner!r})"

    @property
    def cache(self) -> IndexCache:
        """The index cache shared by the datasets' sharded stores."""
        return self.options.cache

    @property
    def supports_writes(self) -> bool:
        return False

    @property
    def supports_conditional_deletes(self) -> bool:
        return False

    # -- finding datasets -----------------------------------------------------------------

    async def _node(self, folder: str) -> _Node:
        node = self._nodes.get(folder)
        if node is not None and time.monotonic() - node.loaded_at < self.metadata_ttl:
            return node
        task = self._loading.get(folder)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.get_running_loop().create_task(self._load(folder))
            self._loading[folder] = task
        return await asyncio.shield(task)

    async def _load(self, folder: str) -> _Node:
        try:
            names = list(OPENERS)
            raws = await asyncio.gather(*(self.inner.get_object(folder + n) for n in names))
            old = self._nodes.get(folder)
            node = _Node()
            for name, raw in zip(names, raws, strict=True):
                if raw is None:
                    continue
                data = bytes(raw.data)
                if old is not None and old.dataset is not None and old.source == data:
                    # unchanged: keep the stores and their cached indexes
                    node = _Node(old.dataset, raw.meta.version, data, terminal=True)
                    break
                dataset = OPENERS[name](self.inner, folder, data, self.options)
                if dataset is not None:
                    node = _Node(dataset, raw.meta.version, data, terminal=True)
                    break
                node.terminal = node.terminal or is_dataset_document(data)
            node.loaded_at = time.monotonic()
            self._nodes[folder] = node
            return node
        finally:
            if self._loading.get(folder) is asyncio.current_task():
                del self._loading[folder]

    async def _find(self, path: str) -> _Node | None:
        """The node of the outermost folder holding a sharded dataset among the nearest
        ``max_depth`` folders above the key ``path`` (or, for a folder ``path`` ending in
        ``/``, up to itself)."""
        parts = path.split("/")
        for depth in range(max(0, len(parts) - self.max_depth), len(parts)):
            folder = "/".join(parts[:depth]) + "/" if depth else ""
            node = await self._node(folder)
            if node.dataset is not None:
                return node
            if node.terminal:
                return None  # inside an unsharded array or volume: nothing to rewrite
        return None

    def _scope_of(
        self, dataset: Dataset, key: str
    ) -> tuple[Scope, str, Location] | object | None:
        """``(scope, store key, location)`` of a chunk key, ``_HIDDEN`` for a shard file,
        else ``None``."""
        with _parsing(key):
            for scope in dataset.scopes:
                rel = scope.key(key)
                if rel is None:
                    continue
                fmt = scope.store.format
                loc = fmt.locate(rel)
                if loc is not None:
                    return scope, rel, loc
                if fmt.is_shard(fmt.inner_key(rel)):
                    return _HIDDEN
        return None

    async def _route(self, key: str) -> Any:
        """What serves ``key``: the node (its metadata), ``(scope, store key, location)``,
        ``_HIDDEN``, or ``None`` to pass through."""
        node = await self._find(key)
        if node is None or node.dataset is None:
            return None
        if key == node.dataset.metadata_key:
            return node
        return self._scope_of(node.dataset, key)

    # -- reads ----------------------------------------------------------------------------

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        target = await self._route(key)
        if target is None:
            return await super()._get(key, byte_range, if_match)
        if target is _HIDDEN:
            return None
        version = _inner_version(key, if_match)
        if isinstance(target, _Node):
            assert target.dataset is not None
            if version is not None and version != target.version:
                raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
            document = target.dataset.document
            start, end = resolve(byte_range, len(document))
            meta = ObjectMeta(key, len(document), virtual_version(target.version))
            return GetResult(memoryview(document)[start:end], meta)
        scope, rel, loc = target
        result = await scope.store.get_located(rel, loc, byte_range, if_match=version)
        if result is None:
            return None
        return with_key(GetResult(result.data, _virtual(result.meta)), key)

    async def _head(self, key: str) -> ObjectMeta | None:
        target = await self._route(key)
        if target is None:
            return await super()._head(key)
        if target is _HIDDEN:
            return None
        if isinstance(target, _Node):
            assert target.dataset is not None
            size = len(target.dataset.document)
            return ObjectMeta(key, size, virtual_version(target.version))
        scope, rel, _ = target
        meta = await scope.store.head(rel)
        return None if meta is None else _virtual(ObjectMeta(key, meta.size, meta.version))

    # -- listing --------------------------------------------------------------------------

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        node = await self._find(prefix)
        dataset = None if node is None else node.dataset
        if dataset is None:
            return await self.inner.list_dir(prefix)
        if self.list_chunks:
            for scope in dataset.scopes:
                rel = scope.key(prefix)
                if rel is not None:
                    with _parsing(prefix):
                        keys, prefixes = await scope.store.list_dir(rel)
                    base = scope.base
                    return [base + k for k in keys], [base + p for p in prefixes]
        keys, prefixes = await self.inner.list_dir(prefix)
        shown = [k for k in keys if self._scope_of(dataset, k) is None]
        return shown, prefixes

    async def has_folder(self, prefix: str) -> bool:
        """Whether the folder ``prefix`` (ending in ``/``) exists even if it lists nothing:
        a folder of chunk keys of a dataset (a sharded scale, a Zarr ``c/`` folder)."""
        node = await self._find(prefix)
        if node is None or node.dataset is None:
            return False
        with _parsing(prefix):
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

    async def _put(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        raise ReadOnlyError(f"{self!r} is read-only")

    async def _delete(self, key: str) -> None:
        raise ReadOnlyError(f"{self!r} is read-only")
