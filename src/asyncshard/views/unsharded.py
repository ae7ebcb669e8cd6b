"""UnshardedView: sharded datasets of any Store presented as if they were unsharded.

A read-only Store wrapping another. For every key it finds the dataset the key belongs
to by looking, from the root down, for the first folder holding a sharded Zarr v3
array (``zarr.json`` with ``sharding_indexed``) or a precomputed volume with sharded
scales (``info``):

* **Zarr v3**: the array's ``zarr.json`` is served rewritten by
  :func:`~asyncshard.formats.zarr3.metadata.unsharded_metadata` (inner chunks become the chunks,
  the sharding codec's inner codecs become the codecs), and a chunk key is answered with
  the inner chunk of that name, read out of its shard by a
  :class:`~asyncshard.sharding.zarr.ShardedStore`. Shard and chunk keys share one syntax, so
  the raw shards are hidden by the virtual chunks.
* **Precomputed**: the volume's ``info`` is served without ``sharding`` and each sharded
  scale answers the unsharded chunk names ``x0-x1_y0-y1_z0-z1``.
* Every other key passes through unchanged.

Only the nearest ``max_depth`` (:data:`DEFAULT_MAX_DEPTH`, 34) folders above a key are
searched, two metadata reads each, so a request costs a bounded number of backend reads
however deep its path. 34 covers every layout a viewer reads: a Zarr chunk key (default
encoding) is ``ndim + 1`` segments below its array's folder (``c/i/j/k``), a precomputed
chunk two below its volume's (``scale/chunk name``), and 34 = 32 dimensions (numpy's
classic limit) + 2. A dataset further up than that is not seen from the deep key: it
passes through unchanged (as do keys below an unsharded dataset outside the window).

A key that a dataset cannot even parse (a number no ``int()`` converts, say) answers
:class:`~asyncshard.errors.InvalidKeyError` (the server's ``400``), never a bare
``ValueError``/``OverflowError``.

Listings of a precomputed sharded scale's folder do not enumerate chunk names (that
would read every shard and minishard index of the scale); see
:mod:`~asyncshard.views.precomputed`.

All sharded readers share one :class:`~asyncshard.cache.IndexCache` (the server's
``--cache-bytes``). What a folder holds is remembered for ``metadata_ttl`` seconds
(single-flight), so metadata changes show up after at most that long; shard changes are
seen at once (data reads are conditioned on the cached index's version).

Versions of rewritten metadata and virtual chunks are the underlying versions with the
prefix ``unshard:``, so they never collide with the versions of the raw objects at the
same keys (an HTTP cache revalidating one against the other must not match).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from cachetools import LRUCache

from asyncshard.cache import IndexCache
from asyncshard.errors import AsyncShardError, ConflictError, InvalidKeyError, ReadOnlyError
from asyncshard.formats.zarr3.metadata import is_sharded, parse_zarr3_array, unsharded_metadata
from asyncshard.ranges import ByteRange, resolve
from asyncshard.sharding.zarr import ShardedStore
from asyncshard.store import GetResult, ObjectMeta, Store

VERSION_PREFIX = "unshard:"
DEFAULT_METADATA_TTL = 60.0
DEFAULT_MAX_FOLDERS = 16384
#: Folders above a key searched for its dataset: 32 dimensions + 2 (see the module doc).
DEFAULT_MAX_DEPTH = 34

log = logging.getLogger("asyncshard.server")


def virtual_version(version: str | None) -> str | None:
    """The version the view reports for an object derived from one at ``version``."""
    return None if version is None else VERSION_PREFIX + version


def _inner_version(key: str, if_match: str | None) -> str | None:
    if if_match is None:
        return None
    if not if_match.startswith(VERSION_PREFIX):
        raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
    return if_match[len(VERSION_PREFIX) :]


def _wrap(result: GetResult | None) -> GetResult | None:
    if result is None:
        return None
    meta = result.meta
    return GetResult(
        result.data,
        ObjectMeta(meta.key, meta.size, virtual_version(meta.version), meta.last_modified),
    )


def _wrap_meta(meta: ObjectMeta | None) -> ObjectMeta | None:
    if meta is None:
        return None
    return ObjectMeta(meta.key, meta.size, virtual_version(meta.version), meta.last_modified)


class Dataset(Protocol):
    """A sharded dataset rooted at a folder, as the view sees it."""

    folder: str

    def claims(self, key: str) -> bool:
        """Whether ``key`` is a virtual object of this dataset (besides its metadata)."""

    async def get_object(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        """Read a virtual object (``if_match`` is an inner version)."""

    async def head(self, key: str) -> ObjectMeta | None:
        """Metadata of a virtual object."""

    async def list_dir(self, prefix: str) -> tuple[list[str], list[str]] | None:
        """The listing of a folder inside the dataset, ``None`` to list the raw store."""

    def has_folder(self, prefix: str) -> bool:
        """Whether the folder ``prefix`` exists in the dataset even when it lists empty."""


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
class _Metadata:
    """A rewritten metadata document and the version of the original."""

    key: str
    data: bytes
    version: str | None

    def meta(self) -> ObjectMeta:
        return ObjectMeta(self.key, len(self.data), virtual_version(self.version))


@dataclass
class _Node:
    """What one folder holds: a sharded dataset (with its rewritten metadata) or nothing.

    ``terminal``: the folder holds a dataset of some kind (an array, a volume), so no
    folder below it can hold another one: the search for datasets stops there.
    """

    dataset: Dataset | None = None
    metadata: _Metadata | None = None
    source: bytes = b""
    loaded_at: float = 0.0
    terminal: bool = False


def _is_dataset(data: bytes) -> bool:
    """Whether metadata names a dataset (not a group): nothing nests below it."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    if not isinstance(doc, dict):
        return False
    return doc.get("node_type") == "array" or "scales" in doc or "@type" in doc


class ZarrDataset:
    """A sharded Zarr v3 array: inner chunks at their own keys."""

    def __init__(self, folder: str, store: ShardedStore) -> None:
        self.folder = folder
        self.store = store

    def claims(self, key: str) -> bool:
        return self.store.layout.locate(key) is not None

    async def get_object(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        return await self.store.get_object(key, byte_range, if_match=if_match)

    async def head(self, key: str) -> ObjectMeta | None:
        return await self.store.head(key)

    async def list_dir(self, prefix: str) -> tuple[list[str], list[str]] | None:
        return await self.store.list_dir(prefix)

    def has_folder(self, prefix: str) -> bool:
        return False


#: Openers of the dataset kinds: ``(inner, folder, raw metadata, cache)`` -> dataset and
#: rewritten metadata document, or ``None`` when the metadata is not of a sharded dataset.
Opener = Callable[[Store, str, bytes, IndexCache], tuple[Dataset, bytes] | None]


def open_zarr(
    inner: Store, folder: str, raw: bytes, cache: IndexCache
) -> tuple[Dataset, bytes] | None:
    """A :class:`ZarrDataset` if ``raw`` is the ``zarr.json`` of a sharded v3 array."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("node_type") != "array" or not is_sharded(doc):
        return None
    try:
        layout = parse_zarr3_array(doc, key_prefix=folder)
        flat = unsharded_metadata(doc)
    except AsyncShardError:
        return None  # not a layout we can unshard: served as it is
    document = json.dumps(flat, indent=2).encode()
    return ZarrDataset(folder, ShardedStore(inner, layout, cache=cache)), document


def _open_precomputed(
    inner: Store, folder: str, raw: bytes, cache: IndexCache
) -> tuple[Dataset, bytes] | None:
    from asyncshard.views.precomputed import open_precomputed

    return open_precomputed(inner, folder, raw, cache)


#: Metadata file name -> opener, tried in this order in each folder.
OPENERS: dict[str, Opener] = {"zarr.json": open_zarr, "info": _open_precomputed}


class UnshardedView(Store):
    """A read-only Store showing the sharded datasets of ``inner`` unsharded."""

    def __init__(
        self,
        inner: Store,
        *,
        cache: IndexCache | None = None,
        metadata_ttl: float = DEFAULT_METADATA_TTL,
        max_folders: int = DEFAULT_MAX_FOLDERS,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        super().__init__(
            max_gap=inner.max_gap,
            max_request=inner.max_request,
            max_concurrency=inner.max_concurrency,
        )
        self.inner = inner
        self.cache = cache if cache is not None else IndexCache()
        self.metadata_ttl = metadata_ttl
        self.max_depth = max_depth
        self._nodes: LRUCache[str, _Node] = LRUCache(max_folders)
        self._loading: dict[str, asyncio.Task[_Node]] = {}

    def __repr__(self) -> str:
        return f"UnshardedView({self.inner!r})"

    @property
    def supports_writes(self) -> bool:
        return False

    @property
    def supports_listing(self) -> bool:
        return self.inner.supports_listing

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
                if old is not None and old.metadata is not None and old.source == data:
                    # unchanged: keep the reader and its cached indexes
                    meta = _Metadata(old.metadata.key, old.metadata.data, raw.meta.version)
                    node = _Node(old.dataset, meta, data, terminal=True)
                    break
                opened = OPENERS[name](self.inner, folder, data, self.cache)
                if opened is not None:
                    dataset, document = opened
                    meta = _Metadata(folder + name, document, raw.meta.version)
                    node = _Node(dataset, meta, data, terminal=True)
                    break
                node.terminal = node.terminal or _is_dataset(data)
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

    async def _route(self, key: str) -> _Metadata | Dataset | None:
        """The rewritten metadata or the dataset serving ``key``; ``None`` to pass through."""
        node = await self._find(key)
        if node is None or node.dataset is None or node.metadata is None:
            return None
        if key == node.metadata.key:
            return node.metadata
        with _parsing(key):
            claimed = node.dataset.claims(key)
        return node.dataset if claimed else None

    # -- reads ----------------------------------------------------------------------------

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        target = await self._route(key)
        if target is None:
            return await self.inner.get_object(key, byte_range, if_match=if_match)
        version = _inner_version(key, if_match)
        if isinstance(target, _Metadata):
            if version is not None and version != target.version:
                raise ConflictError(f"{key}: object is not at version {if_match}", key=key)
            start, end = resolve(byte_range, len(target.data))
            return GetResult(memoryview(target.data)[start:end], target.meta())
        return _wrap(await target.get_object(key, byte_range, version))

    async def _head(self, key: str) -> ObjectMeta | None:
        target = await self._route(key)
        if target is None:
            return await self.inner.head(key)
        if isinstance(target, _Metadata):
            return target.meta()
        return _wrap_meta(await target.head(key))

    # -- listing --------------------------------------------------------------------------

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        node = await self._find(prefix)
        if node is not None and node.dataset is not None:
            with _parsing(prefix):
                listed = await node.dataset.list_dir(prefix)
            if listed is not None:
                return listed
        return await self.inner.list_dir(prefix)

    async def is_dataset_folder(self, prefix: str) -> bool:
        """Whether the folder ``prefix`` (ending in ``/``) exists as a folder of a sharded
        dataset even if it lists empty (a sharded scale holding only hidden shards)."""
        node = await self._find(prefix)
        return node is not None and node.dataset is not None and node.dataset.has_folder(prefix)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        folder, sep, _ = prefix.rpartition("/")
        pending = [folder + sep]
        while pending:
            keys, prefixes = await self._list_dir(pending.pop())
            for key in keys:
                if key.startswith(prefix):
                    yield key
            pending.extend(p for p in prefixes if p.startswith(prefix) or prefix.startswith(p))

    # -- writes and lifecycle -------------------------------------------------------------

    async def _put(self, key: str, data: Any, if_match: str | None, if_absent: bool) -> str | None:
        raise ReadOnlyError(f"{self!r} is read-only")

    async def _close(self) -> None:
        await self.inner.close()
