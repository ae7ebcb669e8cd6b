"""The sharded datasets a scan inspects, and what each needs beyond its format: a check
that stored chunks decode (``--decode``) and a source of replacement chunks (``--from``).

Datasets are found as conversions find them: the sharded scales of the precomputed
volume when the store holds an ``info`` file, else the sharded Zarr v3 arrays (all of
them, or the ``datasets`` paths).

A replacement chunk comes from the dataset at the same path of another store (a backup,
the flat original a conversion started from), in any layout: Zarr v3 flat or sharded,
Zarr v2 (read through its v3 translation), precomputed sharded or not. Its stored bytes
are put into the repaired shard as they are, so the source must store them the same way;
this is checked before anything is read, and a mismatch is an ``InvalidMetadataError``.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncshard.buffers import BytesLike
from asyncshard.convert.hierarchy import read_node
from asyncshard.convert.journal import normalize
from asyncshard.convert.layout import read_layout
from asyncshard.convert.zarr_array import find_arrays
from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.precomputed.volume import VolumeInfo
from asyncshard.formats.zarr2 import translate
from asyncshard.formats.zarr3.codecs import chunk_check, decoded_size
from asyncshard.formats.zarr3.documents import unsharded_metadata
from asyncshard.formats.zarr3.metadata import is_sharded
from asyncshard.sharding.common import read_json
from asyncshard.sharding.engine import ShardedAdapter
from asyncshard.sharding.volume import PrecomputedVolume
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Store

__all__ = ["Dataset", "restore_source", "sharded_datasets"]

#: Raises a typed ``CorruptShardError`` when a stored chunk does not decode.
DecodeCheck = Callable[[BytesLike, str, Any], object]
#: The stored bytes a repaired shard takes for one lost chunk (``None``: none there).
Restore = Callable[[str, Any], Awaitable[BytesLike | None]]


@dataclass
class Dataset:
    """One sharded dataset: its name (array path or scale key), its sharded store and
    its metadata (``zarr.json``, or the volume's ``info``)."""

    name: str
    adapter: ShardedAdapter[Any]
    meta: Mapping[str, Any]

    @property
    def is_zarr(self) -> bool:
        return isinstance(self.adapter, ZarrShardedStore)

    def decode_check(self) -> DecodeCheck | None:
        """What ``--decode`` runs on every intact chunk (``None``: nothing to decode).
        ``InvalidMetadataError`` for a Zarr codec the check does not know."""
        fmt = self.adapter.format
        if not self.is_zarr:
            return fmt.decode if fmt.encoded else None
        inner = self.meta["codecs"][0]["configuration"]
        size = decoded_size(self.meta.get("data_type"), inner["chunk_shape"])
        try:
            check = chunk_check(inner["codecs"], size)
        except InvalidMetadataError as exc:
            raise InvalidMetadataError(f"{self.name}: {exc}") from None
        return lambda stored, key, chunk: check(stored)

    def possible_chunks(self, shard_key: str) -> Iterator[Any]:
        """Every chunk the shard ``shard_key`` can hold (the chunks a shard whose index is
        unreadable may have lost); precomputed chunk ids are found slab by slab, so a
        large scale's grid is never held whole."""
        adapter = self.adapter
        if isinstance(adapter, ZarrShardedStore):
            cps = adapter.layout.chunks_per_shard
            positions = itertools.product(*(range(n) for n in cps))
            yield from (p for p in positions if adapter.format.chunk_key(shard_key, p) is not None)
            return
        scale = VolumeInfo.from_json(self.meta).scale(self.name)
        assert scale.sharding is not None
        number = scale.sharding.parse_shard_filename(shard_key.rsplit("/", 1)[-1])
        gx, gy, gz = scale.grid_shape
        for z in range(gz):  # one z slab of grid positions at a time
            grid = np.indices((gx, gy, 1)).reshape(3, -1).T
            grid[:, 2] = z
            ids = scale.chunk_ids(grid)
            shards, _ = scale.sharding.shard_and_minishard(ids)
            yield from (int(i) for i in ids[shards == number].tolist())


async def sharded_datasets(store: Store, datasets: Sequence[str] | None = None) -> list[Dataset]:
    """Every sharded dataset of ``store`` (see the module)."""
    try:
        info = await read_json(store, "info")
    except InvalidMetadataError:
        info = None
    if isinstance(info, dict) and "scales" in info:
        volume = PrecomputedVolume(store, info)
        keys = volume.sharded_scale_keys if datasets is None else list(datasets)
        unknown = [k for k in keys if k not in volume.sharded_scale_keys]
        if unknown:
            raise InvalidMetadataError(
                f"info: no sharded scale {unknown[0]!r} (sharded: {volume.sharded_scale_keys})"
            )
        return [Dataset(key, volume.scale(key).store, info) for key in keys]
    found: list[Dataset] = []
    for path in await find_arrays(store) if datasets is None else datasets:
        path = path.strip("/")
        doc = await read_json(store, f"{path}/zarr.json" if path else "zarr.json")
        if doc is not None and is_sharded(doc):
            adapter = await ZarrShardedStore.open(store, path)
            found.append(Dataset(path or "/", adapter, doc))
        elif datasets is not None:
            raise InvalidMetadataError(f"{path or '/'}: not a sharded Zarr v3 array")
    return found


def _stored_form(doc: Mapping[str, Any]) -> Any:
    """What decides a Zarr array's stored chunk bytes: shape, type, (inner) chunks, codecs."""
    flat = unsharded_metadata(doc) if is_sharded(doc) else doc
    form = {k: flat.get(k) for k in ("shape", "data_type", "chunk_grid", "codecs")}
    return normalize(form)


async def _zarr_restore(source: Store, dataset: Dataset) -> Restore:
    path = "" if dataset.name == "/" else dataset.name
    node = await read_node(source, path)
    if node is None or node.kind != "array":
        raise InvalidMetadataError(f"--from: no Zarr array at {path or '/'} in the source")
    doc = node.meta if node.zarr_format == 3 else translate(node.meta, node.attributes).doc
    if node.zarr_format == 2 and not translate(node.meta).moved:
        raise InvalidMetadataError(f"--from: {path or '/'}: the source's codecs differ")
    if _stored_form(doc) != _stored_form(dataset.meta):
        raise InvalidMetadataError(
            f"--from: {path or '/'}: the source stores its chunks differently "
            "(shape, data type, chunk shape or codecs)"
        )
    prefix = f"{path}/" if path else ""
    keys = read_layout(doc, prefix).keys  # chunk keys, whether flat or sharded (the view)
    view: Store = await ZarrShardedStore.open(source, path) if is_sharded(doc) else source
    adapter = dataset.adapter
    assert isinstance(adapter, ZarrShardedStore)
    fmt, layout = adapter.format, adapter.layout

    async def restore(shard_key: str, chunk: Any) -> BytesLike | None:
        key = fmt.chunk_key(shard_key, chunk)
        coords = None if key is None else layout.parse_chunk_key(key)
        return None if coords is None else await view.get(keys.encode(coords))

    return restore


async def _precomputed_restore(source: Store, dataset: Dataset) -> Restore:
    info = await read_json(source, "info")
    if not isinstance(info, dict) or "scales" not in info:
        raise InvalidMetadataError("--from: the source has no precomputed info")
    mine, theirs = VolumeInfo.from_json(dataset.meta), VolumeInfo.from_json(info)
    a, b = mine.scale(dataset.name), theirs.scale(dataset.name)
    same = (
        a.size,
        a.chunk_sizes,
        a.voxel_offset,
        a.encoding,
        a.compressed_segmentation_block_size,
        mine.dtype,
        mine.num_channels,
    ) == (
        b.size,
        b.chunk_sizes,
        b.voxel_offset,
        b.encoding,
        b.compressed_segmentation_block_size,
        theirs.dtype,
        theirs.num_channels,
    )
    if not same:
        raise InvalidMetadataError(f"--from: scale {dataset.name!r} differs in the source")
    fmt = dataset.adapter.format
    if b.sharding is not None:
        scale = PrecomputedVolume(source, info).scale(dataset.name)

        async def raw(chunk: int) -> BytesLike | None:
            return await scale.store.get_chunk(chunk)
    else:

        async def raw(chunk: int) -> BytesLike | None:
            return await source.get(f"{b.key}/{b.chunk_name(b.grid_pos_of(chunk))}")

    async def restore(shard_key: str, chunk: Any) -> BytesLike | None:
        found = await raw(chunk)
        return None if found is None else fmt.encode(found)

    return restore


async def restore_source(source: Store, dataset: Dataset) -> Restore:
    """Where ``repair --from`` gets the stored bytes of a lost chunk of ``dataset``."""
    if dataset.is_zarr:
        return await _zarr_restore(source, dataset)
    return await _precomputed_restore(source, dataset)
