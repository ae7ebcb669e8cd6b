"""Sharded scales of precomputed volumes, read and written by unsharded chunk name.

* :class:`PrecomputedVolume` opens a volume from its ``info`` file;
  :meth:`PrecomputedVolume.scale` gives a :class:`ShardedScale`, which reads and writes
  chunks by their unsharded name ``x0-x1_y0-y1_z0-z1`` (clipped at the volume edge,
  offset by ``voxel_offset``), translated to compressed Morton chunk ids of a
  :class:`~asyncshard.sharding.precomputed.Uint64ShardedStore`.
* :class:`UnshardedScaleView` is a read-only Store over a whole volume that presents its
  sharded scales as unsharded: ``info`` without ``sharding`` (:func:`unsharded_info`,
  rendered by :func:`unsharded_info_bytes`, as the server's ``--unshard`` also does),
  ``<scale key>/<chunk name>`` for every chunk of a sharded scale, and every other key
  (unsharded scales, other files) passed through. This is what a viewer-facing server
  serves to a client that only reads unsharded precomputed data.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from asyncshard.cache import IndexCache
from asyncshard.errors import InvalidKeyError, InvalidMetadataError
from asyncshard.formats.precomputed.spec import as_uint64_array
from asyncshard.formats.precomputed.volume import Scale, VolumeInfo
from asyncshard.ranges import ByteRange, resolve
from asyncshard.sharding.common import read_json
from asyncshard.sharding.precomputed import Uint64ShardedStore, with_key
from asyncshard.store import (
    BytesLike,
    Data,
    GetResult,
    ObjectMeta,
    Store,
    check_condition,
    validate_key,
)

__all__ = [
    "PrecomputedVolume",
    "ShardedScale",
    "UnshardedScaleView",
    "unsharded_info",
    "unsharded_info_bytes",
]


def unsharded_info(info_doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a volume ``info`` JSON object with ``sharding`` removed from every scale.

    Unknown members are kept as they are; ``info_doc`` is not modified.
    """
    doc = copy.deepcopy(dict(info_doc))
    scales = doc.get("scales")
    if isinstance(scales, list):
        for scale in scales:
            if isinstance(scale, dict):
                scale.pop("sharding", None)
    return doc


def unsharded_info_bytes(info_doc: Mapping[str, Any]) -> bytes:
    """The served bytes of :func:`unsharded_info` (``info_doc`` rewritten): the one
    rendering of an unsharded ``info``, so that every entry point serves the same bytes."""
    return json.dumps(unsharded_info(info_doc), indent=2).encode()


def _join(path: str, key: str) -> str:
    return f"{path}/{key}" if path else key


class ShardedScale:
    """One sharded scale of a volume: chunks by unsharded name, grid position or chunk id.

    ``store`` is the underlying :class:`Uint64ShardedStore` (keys: decimal chunk ids).
    """

    def __init__(
        self,
        inner: Store,
        info: VolumeInfo,
        scale: Scale,
        *,
        path: str = "",
        cache: IndexCache | None = None,
    ) -> None:
        if scale.sharding is None:
            raise InvalidMetadataError(f"scale {scale.key!r} is not sharded")
        self.info = info
        self.scale = scale
        self.path = path.strip("/")
        try:
            prefix = validate_key(_join(self.path, scale.key))
        except InvalidKeyError as exc:
            raise InvalidMetadataError(
                f"scale key {scale.key!r} is not a usable path: {exc}"
            ) from None
        self.store = Uint64ShardedStore(inner, scale.sharding, prefix=prefix, cache=cache)

    def __repr__(self) -> str:
        return f"ShardedScale({self.store.inner!r}, {self.store.prefix!r})"

    @classmethod
    async def open(
        cls, inner: Store, scale_key: str, *, path: str = "", cache: IndexCache | None = None
    ) -> ShardedScale:
        """Open the scale ``scale_key`` of the volume at ``path`` of ``inner``."""
        volume = await PrecomputedVolume.open(inner, path, cache=cache)
        return volume.scale(scale_key)

    # -- names and ids ----------------------------------------------------------------------

    def chunk_id(self, name: str) -> int:
        """The chunk id of an unsharded chunk name; ``KeyError`` unless it names a chunk."""
        pos = self.scale.parse_chunk_name(name)
        if pos is None:
            raise KeyError(f"{name!r} is not a chunk name of scale {self.scale.key!r}")
        return self.scale.chunk_id(pos)

    def chunk_name(self, chunk_id: int) -> str:
        """The unsharded chunk name of a chunk id; ``ValueError`` if it is not one of this scale."""
        return self.scale.chunk_name(self.scale.grid_pos_of(chunk_id))

    def chunk_names(self, chunk_ids: Iterable[int]) -> builtins.list[str | None]:
        """Vectorised :meth:`chunk_name`; ``None`` for ids that are not chunks of this scale."""
        ids = as_uint64_array(list(chunk_ids))
        out: list[str | None] = []
        for chunk_id in ids.tolist():
            try:
                out.append(self.chunk_name(chunk_id))
            except ValueError:
                out.append(None)
        return out

    # -- chunks -------------------------------------------------------------------------------

    async def get_chunk(self, name: str) -> bytes | None:
        """The raw (decoded) bytes of a chunk, ``None`` if it was never written."""
        return await self.store.get_chunk(self.chunk_id(name))

    async def get_chunks(self, names: Iterable[str]) -> dict[str, bytes]:
        """``{name: bytes}`` of the chunks that exist among ``names`` (one batched read)."""
        ids = {name: self.chunk_id(name) for name in names}
        found = await self.store.get_chunks(ids.values())
        return {name: found[i] for name, i in ids.items() if i in found}

    async def set_chunks(
        self, chunks: Mapping[str, BytesLike], *, replace_shards: bool = False
    ) -> None:
        """Write chunks by name (see :meth:`Uint64ShardedStore.set_chunks`)."""
        by_id = {self.chunk_id(name): value for name, value in chunks.items()}
        await self.store.set_chunks(by_id, replace_shards=replace_shards)

    async def erase_chunks(self, names: Iterable[str]) -> None:
        """Erase chunks by name."""
        await self.store.erase_chunks([self.chunk_id(name) for name in names])

    async def list_chunk_names(self) -> builtins.list[str]:
        """The names of every stored chunk (ids that are no chunk of this scale are skipped)."""
        names = self.chunk_names(await self.store.chunk_ids())
        return sorted(n for n in names if n is not None)


class PrecomputedVolume:
    """A precomputed volume opened from its ``info`` file."""

    def __init__(
        self,
        inner: Store,
        info_doc: Mapping[str, Any],
        *,
        path: str = "",
        cache: IndexCache | None = None,
    ) -> None:
        self.inner = inner
        self.path = path.strip("/")
        self.info_doc = dict(info_doc)
        self.info = VolumeInfo.from_json(info_doc)
        self.cache = cache
        self._scales: dict[str, ShardedScale] = {}

    def __repr__(self) -> str:
        return f"PrecomputedVolume({self.inner!r}, {self.path!r})"

    @classmethod
    async def open(
        cls, inner: Store, path: str = "", *, cache: IndexCache | None = None
    ) -> PrecomputedVolume:
        """Read and validate ``<path>/info``."""
        path = path.strip("/")
        info_key = _join(path, "info")
        doc = await read_json(inner, info_key)
        if doc is None:
            raise InvalidMetadataError(f"{info_key}: no info file")
        try:
            return cls(inner, doc, path=path, cache=cache)
        except InvalidMetadataError as exc:
            raise InvalidMetadataError(f"{info_key}: {exc}") from None

    @property
    def sharded_scale_keys(self) -> builtins.list[str]:
        """Keys of the sharded scales, in ``info`` order."""
        return [s.key for s in self.info.scales if s.sharding is not None]

    def scale(self, key: str) -> ShardedScale:
        """The sharded scale ``key``; ``KeyError`` if unknown, ``InvalidMetadataError`` if
        that scale is unsharded (read its chunk files directly)."""
        found = self._scales.get(key)
        if found is None:
            found = ShardedScale(
                self.inner, self.info, self.info.scale(key), path=self.path, cache=self.cache
            )
            self._scales[key] = found
        return found

    def unsharded_view(self) -> UnshardedScaleView:
        """The volume as a read-only Store with every sharded scale presented unsharded."""
        return UnshardedScaleView(self)


class UnshardedScaleView(Store):
    """A read-only Store presenting the sharded scales of a volume as unsharded.

    Keys are relative to the volume directory:

    * ``info``: the volume's ``info`` as read when the volume was opened, rewritten by
      :func:`unsharded_info` (its version is that of the stored ``info``);
    * ``<scale key>/<chunk name>`` of a sharded scale: the chunk's raw bytes (a name that
      is not exactly a chunk name of the scale reads as missing, like a missing file);
    * anything else: the object of the wrapped store (unsharded scales, other files).

    Listing shows chunk names in place of the shard files of sharded scales: listing a
    sharded scale (``list_prefix``, or ``list_dir`` of its folder) reads the indexes of all
    its shards; ``list_dir`` of any other folder is one listing of the wrapped store.
    Closing the view closes the wrapped store.
    """

    def __init__(self, volume: PrecomputedVolume) -> None:
        inner = volume.inner
        super().__init__(
            max_gap=inner.max_gap,
            max_request=inner.max_request,
            max_concurrency=inner.max_concurrency,
        )
        self.volume = volume
        self.inner = inner
        self._base = f"{volume.path}/" if volume.path else ""
        self._info = unsharded_info_bytes(volume.info_doc)
        self._info_version = "unsharded-" + hashlib.sha256(self._info).hexdigest()[:32]
        self._scales = {key: volume.scale(key) for key in volume.sharded_scale_keys}

    def __repr__(self) -> str:
        return f"UnshardedScaleView({self.volume!r})"

    @classmethod
    async def open(
        cls, inner: Store, path: str = "", *, cache: IndexCache | None = None
    ) -> UnshardedScaleView:
        """Open the volume at ``path`` of ``inner`` and return its unsharded view."""
        return cls(await PrecomputedVolume.open(inner, path, cache=cache))

    @property
    def supports_writes(self) -> bool:
        return False

    @property
    def supports_listing(self) -> bool:
        return self.inner.supports_listing

    # -- routing --------------------------------------------------------------------------

    def _route(self, key: str) -> tuple[ShardedScale, str] | None:
        """``(scale, chunk key)`` for a chunk name or shard file (chunk key ``""``: hidden)
        directly inside a sharded scale's directory; ``None`` for pass-through keys."""
        head, sep, name = key.rpartition("/")
        scale = self._scales.get(head) if sep else None
        if scale is None:
            return None
        pos = scale.scale.parse_chunk_name(name)
        if pos is not None:
            return scale, str(scale.scale.chunk_id(pos))
        if scale.store.spec.parse_shard_filename(name) is not None:
            return scale, ""
        return None

    def _info_result(self, byte_range: ByteRange | None, if_match: str | None) -> GetResult:
        meta = ObjectMeta("info", len(self._info), self._info_version)
        check_condition("info", meta, if_match, False)
        start, end = resolve(byte_range, len(self._info))
        return GetResult(self._info[start:end], meta)

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        if key == "info":
            return self._info_result(byte_range, if_match)
        routed = self._route(key)
        if routed is None:
            result = await self.inner.get_object(self._base + key, byte_range, if_match=if_match)
            return None if result is None else with_key(result, key)
        scale, chunk_key = routed
        if not chunk_key:
            return None
        result = await scale.store.get_object(chunk_key, byte_range, if_match=if_match)
        return None if result is None else with_key(result, key)

    async def _head(self, key: str) -> ObjectMeta | None:
        if key == "info":
            return self._info_result(None, None).meta
        routed = self._route(key)
        if routed is None:
            meta = await self.inner.head(self._base + key)
        elif not routed[1]:
            return None
        else:
            meta = await routed[0].store.head(routed[1])
        return None if meta is None else dataclasses.replace(meta, key=key)

    async def get_partial_values(
        self,
        key_ranges: Iterable[tuple[str, ByteRange | None]],
        *,
        if_match: Mapping[str, str] | None = None,
    ) -> builtins.list[Data | None]:
        """Read many keys; the chunks of each sharded scale in one batched read."""
        items = [(validate_key(k), r) for k, r in key_ranges]
        out: list[Data | None] = [None] * len(items)
        groups: dict[Store, list[tuple[int, str]]] = {}
        info_items: list[int] = []
        for i, (key, _) in enumerate(items):
            if key == "info":
                info_items.append(i)
                continue
            routed = self._route(key)
            if routed is None:
                groups.setdefault(self.inner, []).append((i, self._base + key))
            elif routed[1]:
                groups.setdefault(routed[0].store, []).append((i, routed[1]))
        self.stats.requests["get"] += len(items)

        async def read(store: Store, members: list[tuple[int, str]]) -> None:
            versions: dict[str, str] = {}
            if if_match:
                versions = {k: if_match[items[i][0]] for i, k in members if items[i][0] in if_match}
            values = await store.get_partial_values(
                [(k, items[i][1]) for i, k in members], if_match=versions
            )
            for (i, _), value in zip(members, values, strict=True):
                out[i] = value

        await asyncio.gather(*(read(s, m) for s, m in groups.items()))
        for i in info_items:
            out[i] = self._info_result(items[i][1], (if_match or {}).get("info")).data
        for v in out:
            if v is not None:
                self.stats.bytes_returned += len(v)
        return out

    # -- listing --------------------------------------------------------------------------

    def _hidden(self, scale: ShardedScale | None, name: str) -> bool:
        """Whether a stored file ``name`` of a scale folder is not shown: a shard file
        (shown as chunk names), or a stray file named like a chunk (shadowed by it)."""
        return scale is not None and (
            scale.store.spec.parse_shard_filename(name) is not None
            or scale.scale.parse_chunk_name(name) is not None
        )

    async def _list_dir(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        n = len(self._base)
        keys, prefixes = await self.inner.list_dir(self._base + prefix)
        scale = self._scales.get(prefix[:-1]) if prefix else None
        kept = [k[n:] for k in keys if not self._hidden(scale, k[len(self._base + prefix) :])]
        if scale is not None:
            kept += [prefix + name for name in await scale.list_chunk_names()]
        return sorted(kept), [p[n:] for p in prefixes]

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        n = len(self._base)
        async for key in self.inner.list_prefix(self._base + prefix):
            rel = key[n:]
            head, sep, name = rel.rpartition("/")
            if not self._hidden(self._scales.get(head) if sep else None, name):
                yield rel
        for key, scale in self._scales.items():
            directory = key + "/"
            if not (directory.startswith(prefix) or prefix.startswith(directory)):
                continue
            for name in await scale.list_chunk_names():
                if (directory + name).startswith(prefix):
                    yield directory + name

    # -- lifecycle ------------------------------------------------------------------------

    async def _close(self) -> None:
        await self.inner.close()
