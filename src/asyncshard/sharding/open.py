"""``open_sharded(url, path)``: the sharded store of a dataset, whatever its format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asyncshard.backends.registry import StoreLocation, split_options
from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.precomputed.volume import VolumeInfo
from asyncshard.sharding.common import folder_key, open_document, read_json
from asyncshard.sharding.engine import ShardedAdapter
from asyncshard.sharding.precomputed import Uint64ShardedStore
from asyncshard.sharding.volume import scale_store
from asyncshard.sharding.zarr import ZarrShardedStore, draft_key
from asyncshard.store import Store

__all__ = ["ADAPTER_OPTIONS", "open_sharded"]

#: The keywords of :func:`open_sharded` that go to the sharded store, not to the storage.
ADAPTER_OPTIONS = ("cache", "data_cache", "recheck_after", "write_order")


async def open_sharded(
    url_or_store: StoreLocation,
    path: str = "",
    *,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> ShardedAdapter[Any]:
    """Open the sharded dataset at ``path`` of a store URL (or Store).

    * a folder with ``zarr.json`` (or draft transformer metadata): its sharded Zarr array,
      keys are the array's chunk keys (:class:`ZarrShardedStore`);
    * a folder whose ``info`` has ``sharding`` (meshes, skeletons, annotations by id): keys
      are chunk ids (:class:`Uint64ShardedStore`);
    * a sharded scale's folder of a precomputed volume (``<volume>/<scale key>``): keys are
      the unsharded chunk names ``x0-x1_y0-y1_z0-z1``.

    ``options`` go to the sharded store (``cache``, ``data_cache``, ``recheck_after``,
    ``write_order`` for Zarr); the rest, and ``storage_options``, are storage options for
    :func:`~asyncshard.open_store` (the location may also be a Store or an obstore store).
    """
    adapter, storage = split_options(options, ADAPTER_OPTIONS)
    inner, path, _, doc = await open_document(
        url_or_store, storage_options, storage, path, "zarr.json"
    )
    base = folder_key(path, "")
    if doc is not None and doc.get("node_type") == "group":
        arrays = await _arrays_below(inner, base)
        raise InvalidMetadataError(
            f"{base}zarr.json: a Zarr group, not an array; open one of its arrays: "
            + (", ".join(arrays) or "(it has none)")
        )
    if doc is not None or await _has_draft(inner, path):
        return await ZarrShardedStore.open(inner, path, **adapter)
    adapter.pop("write_order", None)
    info = await read_json(inner, base + "info")
    if info is not None:
        if info.get("sharding") is not None:
            return await Uint64ShardedStore.open(inner, path, **adapter)
        sharded = [
            s.get("key")
            for s in info.get("scales") or []
            if isinstance(s, dict) and s.get("sharding")
        ]
        raise InvalidMetadataError(
            f"{base}info: a precomputed volume; open one of its sharded scales: "
            + (", ".join(f"{base}{k}" for k in sharded) or "(none is sharded)")
        )
    volume_path, _, scale_key = path.rpartition("/")
    vinfo_key = folder_key(volume_path, "info")
    doc = await read_json(inner, vinfo_key) if scale_key else None
    if doc is not None and "scales" in doc:
        volume = VolumeInfo.from_json(doc)
        try:
            scale = volume.scale(scale_key)
        except KeyError:
            raise InvalidMetadataError(f"{vinfo_key}: no scale {scale_key!r}") from None
        return scale_store(inner, volume, scale, path=volume_path, named=True, **adapter)
    raise InvalidMetadataError(
        f"no sharded dataset at {path or '/'!r}: no zarr.json, draft metadata or info"
    )


async def _arrays_below(inner: Store, base: str, limit: int = 20) -> list[str]:
    """Paths of the Zarr arrays in the group at ``base`` (breadth first, at most ``limit``)."""
    found: list[str] = []
    folders = [base]
    while folders and len(found) < limit:
        _, children = await inner.list_dir(folders.pop(0))
        for child in children:
            doc = await read_json(inner, child + "zarr.json")
            if doc is None:
                continue
            if doc.get("node_type") == "array":
                found.append(child.rstrip("/"))
            elif doc.get("node_type") == "group":
                folders.append(child)
    return sorted(found[:limit])


async def _has_draft(inner: Store, path: str) -> bool:
    return await inner.exists(draft_key(path))
