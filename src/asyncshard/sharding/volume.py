"""Sharded scales of precomputed volumes, read and written by unsharded chunk name.

:class:`PrecomputedVolume` opens a volume from its ``info`` file;
:meth:`PrecomputedVolume.scale` gives a :class:`ShardedScale`, which reads and writes
chunks by their unsharded name ``x0-x1_y0-y1_z0-z1`` (clipped at the volume edge, offset
by ``voxel_offset``), translated to the compressed Morton chunk ids of a
:class:`~asyncshard.sharding.precomputed.Uint64ShardedStore`. Decoded chunks are bounded
by the scale's chunk size (:meth:`VolumeInfo.max_chunk_nbytes`). To serve a volume with
its scales unsharded, use :class:`~asyncshard.views.UnshardedView`.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any

from asyncshard.backends.registry import StoreLocation
from asyncshard.cache import LoadingCache
from asyncshard.errors import InvalidKeyError, InvalidMetadataError
from asyncshard.formats.precomputed.spec import as_uint64_array
from asyncshard.formats.precomputed.volume import Scale, VolumeInfo
from asyncshard.sharding.common import folder_key, open_document
from asyncshard.sharding.precomputed import Uint64ShardedStore
from asyncshard.store import BytesLike, Store, validate_key

__all__ = ["PrecomputedVolume", "ShardedScale", "scale_store"]


def scale_store(
    inner: Store,
    info: VolumeInfo,
    scale: Scale,
    *,
    path: str = "",
    named: bool = False,
    **options: Any,
) -> Uint64ShardedStore:
    """The sharded store of one scale of the volume at ``path``: keys are chunk ids, or
    chunk names with ``named``; chunks are bounded by the scale's chunk size."""
    if scale.sharding is None:
        raise InvalidMetadataError(f"scale {scale.key!r} is not sharded")
    try:
        prefix = validate_key(folder_key(path.strip("/"), scale.key))
    except InvalidKeyError as exc:
        raise InvalidMetadataError(f"scale key {scale.key!r} is not a usable path: {exc}") from None
    return Uint64ShardedStore(
        inner,
        scale.sharding,
        prefix=prefix,
        names=scale if named else None,
        max_chunk_nbytes=info.max_chunk_nbytes(scale),
        **options,
    )


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
        cache: LoadingCache | None = None,
    ) -> None:
        self.info = info
        self.scale = scale
        self.path = path.strip("/")
        self.store = scale_store(inner, info, scale, path=self.path, cache=cache)

    def __repr__(self) -> str:
        return f"ShardedScale({self.store.inner!r}, {self.store.prefix!r})"

    @classmethod
    async def open(
        cls,
        inner: StoreLocation,
        scale_key: str,
        *,
        path: str = "",
        cache: LoadingCache | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> ShardedScale:
        """Open the scale ``scale_key`` of the volume at ``path`` of ``inner`` (any
        location of :func:`~asyncshard.open_store`, with its storage options)."""
        volume = await PrecomputedVolume.open(
            inner, path, cache=cache, storage_options=storage_options, **options
        )
        return volume.scale(scale_key)

    # -- names and ids ------------------------------------------------------------------

    def chunk_id(self, name: str) -> int:
        """The chunk id of an unsharded chunk name; ``KeyError`` unless it names a chunk."""
        chunk_id = self.scale.chunk_id_of_name(name)
        if chunk_id is None:
            raise KeyError(f"{name!r} is not a chunk name of scale {self.scale.key!r}")
        return chunk_id

    def chunk_name(self, chunk_id: int) -> str:
        """The unsharded chunk name of a chunk id; ``ValueError`` if it is not one of this scale."""
        return self.scale.chunk_name(self.scale.grid_pos_of(chunk_id))

    def chunk_names(self, chunk_ids: Iterable[int]) -> builtins.list[str | None]:
        """Vectorised :meth:`chunk_name`; ``None`` for ids that are not chunks of this scale."""
        out: list[str | None] = []
        for chunk_id in as_uint64_array(list(chunk_ids)).tolist():
            try:
                out.append(self.chunk_name(chunk_id))
            except ValueError:
                out.append(None)
        return out

    # -- chunks -------------------------------------------------------------------------

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
        cache: LoadingCache | None = None,
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
        cls,
        inner: StoreLocation,
        path: str = "",
        *,
        cache: LoadingCache | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> PrecomputedVolume:
        """Read and validate ``<path>/info``; ``inner`` is any location of
        :func:`~asyncshard.open_store`, the keywords are its storage options."""
        store, path, info_key, doc = await open_document(
            inner, storage_options, options, path, "info"
        )
        if doc is None:
            raise InvalidMetadataError(f"{info_key}: no info file")
        try:
            return cls(store, doc, path=path, cache=cache)
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
