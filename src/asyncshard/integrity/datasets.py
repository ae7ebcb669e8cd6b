"""The sharded datasets a scan inspects, and what each needs beyond its format: a check
that stored chunks decode (``--decode``) and a source of replacement chunks (``--from``).

Datasets are found as conversions find them (:func:`~asyncshard.convert.zarr_array.
find_datasets`), whatever their format: the sharded scales of every precomputed volume
(``info``) and every sharded Zarr v3 array under the root, or the ``datasets`` named
(array paths, scale keys, ``volume/scale`` for a volume below the root).

A chunk is trusted as far as the checks its format has reach: the inner ``crc32c``
codec, and with ``--decode`` the decoding (a ``gzip`` stream carries its own CRC). Intact
chunks no check reaches are counted with the reason (:meth:`Dataset.unverified`).

A replacement chunk comes from the dataset at the same path of another store (a backup,
the flat original a conversion started from), in any layout: Zarr v3 flat or sharded,
Zarr v2 (read through its v3 translation), precomputed sharded or not. Its stored bytes
are put into the repaired shard as they are, so the source must store them the same way;
this is checked before anything is read, and a mismatch is a ``DatasetMismatchError``.
Each replacement passes the checks ``verify`` applies (:meth:`Dataset.chunk_fault`)
before it is used.
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
from asyncshard.convert.zarr_array import find_datasets
from asyncshard.errors import DatasetMismatchError, FormatError, InvalidMetadataError
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
    """One sharded dataset: its name (array path, or scale key behind its volume's
    folder), its sharded store, its metadata (``zarr.json``, or the volume's ``info``)
    and, for a scale, its volume's folder (``""``: the root)."""

    name: str
    adapter: ShardedAdapter[Any]
    meta: Mapping[str, Any]
    volume: str = ""

    @property
    def is_zarr(self) -> bool:
        return isinstance(self.adapter, ZarrShardedStore)

    @property
    def scale_key(self) -> str:
        """A scale's key in its volume's ``info``."""
        return self.name[len(self.volume) + 1 :] if self.volume else self.name

    def _inner_codecs(self) -> list[str]:
        inner = self.meta["codecs"][0]["configuration"]["codecs"]
        return [c if isinstance(c, str) else str(c.get("name")) for c in inner]

    def unverified(self, decode: bool) -> str | None:
        """Why the bytes of this dataset's intact chunks are not checked (``None``: they
        are): no checksum codec, or one that only ``--decode`` reads."""
        if not self.is_zarr:
            if self.adapter.format.encoded:
                return None if decode else "gzip data encoding not decoded, use --decode"
            return "no checksum: raw data encoding"
        codecs = self._inner_codecs()
        if codecs and codecs[-1] == "crc32c":
            return None
        if decode and ("crc32c" in codecs or "gzip" in codecs):
            return None
        if "crc32c" in codecs or "gzip" in codecs:
            return "checksum under a compressor not decoded, use --decode"
        after = codecs[codecs.index("bytes") + 1 :] if "bytes" in codecs else codecs
        if not after:
            return "no checksum codec: raw"
        return f"no checksum codec: {', '.join(after)}{', decoded only' if decode else ''}"

    def chunk_fault(
        self, shard_key: str, chunk: Any, stored: BytesLike, check: DecodeCheck | None
    ) -> str | None:
        """Why ``stored``, put in the shard ``shard_key`` as ``chunk``, would not read
        back intact (``None``: it would): the format's inspection of a shard holding it
        alone, then ``check``."""
        fmt = self.adapter.format
        health = fmt.inspect(shard_key, memoryview(fmt.build(shard_key, {chunk: stored})))
        if chunk not in health.intact:
            return health.lost.get(chunk) or "; ".join(health.faults) or "does not read back"
        if check is not None:
            try:
                check(stored, shard_key, chunk)
            except FormatError as exc:
                return str(exc)
        return None

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
            raise DatasetMismatchError(f"{self.name}: {exc}") from None
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
        scale = VolumeInfo.from_json(self.meta).scale(self.scale_key)
        assert scale.sharding is not None
        number = scale.sharding.parse_shard_filename(shard_key.rsplit("/", 1)[-1])
        gx, gy, gz = scale.grid_shape
        for z in range(gz):  # one z slab of grid positions at a time
            grid = np.indices((gx, gy, 1)).reshape(3, -1).T
            grid[:, 2] = z
            ids = scale.chunk_ids(grid)
            shards, _ = scale.sharding.shard_and_minishard(ids)
            yield from (int(i) for i in ids[shards == number].tolist())


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _scales(store: Store, folder: str, info: Mapping[str, Any]) -> list[Dataset]:
    volume = PrecomputedVolume(store, info, path=folder)
    return [
        Dataset(_join(folder, key), volume.scale(key).store, info, folder)
        for key in volume.sharded_scale_keys
    ]


async def _zarr(store: Store, path: str) -> Dataset | None:
    doc = await read_json(store, _join(path, "zarr.json"))
    if doc is None or doc.get("node_type") != "array" or not is_sharded(doc):
        return None
    return Dataset(path or "/", await ZarrShardedStore.open(store, path), doc)


async def _named(store: Store, name: str) -> Dataset:
    """The dataset ``name``: a sharded Zarr array's path or a sharded scale's key (behind
    its volume's folder)."""
    path = name.strip("/")
    found = await _zarr(store, path)
    if found is not None:
        return found
    folder, _, key = path.rpartition("/")
    try:
        info = await read_json(store, _join(folder, "info"))
    except InvalidMetadataError:
        info = None
    if isinstance(info, dict) and "scales" in info:
        for dataset in _scales(store, folder, info):
            if dataset.name == path:
                return dataset
        sharded = PrecomputedVolume(store, info).sharded_scale_keys
        raise DatasetMismatchError(
            f"{_join(folder, 'info')}: no sharded scale {key!r} (sharded: {sharded})"
        )
    raise DatasetMismatchError(f"{path or '/'}: not a sharded Zarr v3 array")


async def sharded_datasets(store: Store, datasets: Sequence[str] | None = None) -> list[Dataset]:
    """Every sharded dataset of ``store``, or the ``datasets`` named (see the module)."""
    if datasets is not None:
        return [await _named(store, name) for name in datasets]
    found = await find_datasets(store)
    out: list[Dataset] = []
    for folder, info in found.volumes.items():
        try:
            out.extend(_scales(store, folder, info))
        except InvalidMetadataError as exc:
            raise InvalidMetadataError(f"{_join(folder, 'info')}: {exc}") from None
    for path in found.arrays:
        dataset = await _zarr(store, path)
        if dataset is not None:
            out.append(dataset)
    return sorted(out, key=lambda d: d.name)


def _stored_form(doc: Mapping[str, Any]) -> Any:
    """What decides a Zarr array's stored chunk bytes: shape, type, (inner) chunks, codecs."""
    flat = unsharded_metadata(doc) if is_sharded(doc) else doc
    form = {k: flat.get(k) for k in ("shape", "data_type", "chunk_grid", "codecs")}
    return normalize(form)


async def _zarr_restore(source: Store, dataset: Dataset) -> Restore:
    path = "" if dataset.name == "/" else dataset.name
    node = await read_node(source, path)
    if node is None or node.kind != "array":
        raise DatasetMismatchError(f"--from: no Zarr array at {path or '/'} in the source")
    doc = node.meta if node.zarr_format == 3 else translate(node.meta, node.attributes).doc
    if node.zarr_format == 2 and not translate(node.meta).moved:
        raise DatasetMismatchError(f"--from: {path or '/'}: the source's codecs differ")
    if _stored_form(doc) != _stored_form(dataset.meta):
        raise DatasetMismatchError(
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
    info_key = _join(dataset.volume, "info")
    info = await read_json(source, info_key)
    if not isinstance(info, dict) or "scales" not in info:
        raise DatasetMismatchError(f"--from: the source has no precomputed {info_key}")
    mine, theirs = VolumeInfo.from_json(dataset.meta), VolumeInfo.from_json(info)
    try:
        a, b = mine.scale(dataset.scale_key), theirs.scale(dataset.scale_key)
    except KeyError:
        raise DatasetMismatchError(f"--from: no scale {dataset.name!r} in the source") from None
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
        raise DatasetMismatchError(f"--from: scale {dataset.name!r} differs in the source")
    fmt = dataset.adapter.format
    if b.sharding is not None:
        scale = PrecomputedVolume(source, info, path=dataset.volume).scale(b.key)

        async def raw(chunk: int) -> BytesLike | None:
            return await scale.store.get_chunk(chunk)
    else:

        async def raw(chunk: int) -> BytesLike | None:
            name = b.chunk_name(b.grid_pos_of(chunk))
            return await source.get(_join(dataset.volume, f"{b.key}/{name}"))

    async def restore(shard_key: str, chunk: Any) -> BytesLike | None:
        found = await raw(chunk)
        return None if found is None else fmt.encode(found)

    return restore


async def restore_source(source: Store, dataset: Dataset) -> Restore:
    """Where ``repair --from`` gets the stored bytes of a lost chunk of ``dataset``."""
    if dataset.is_zarr:
        return await _zarr_restore(source, dataset)
    return await _precomputed_restore(source, dataset)
