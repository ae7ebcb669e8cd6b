"""Shared helpers for sharded-store tests: array metadata and sample arrays."""

from __future__ import annotations

import json
from typing import Any, Literal

from asyncshard.cache import LoadingCache
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Store


def array_doc(
    shape: list[int],
    shard_shape: list[int],
    chunk_shape: list[int],
    *,
    index_location: Literal["start", "end"] = "end",
    checksum: bool = True,
    dtype: str = "uint8",
    separator: str = "/",
    endian: Literal["little", "big"] = "little",
) -> dict[str, Any]:
    """A Zarr v3 ``zarr.json`` for a sharded array with uncompressed inner chunks."""
    index_codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": endian}}]
    if checksum:
        index_codecs.append({"name": "crc32c"})
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shard_shape}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": separator}},
        "fill_value": 0,
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": chunk_shape,
                    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "index_codecs": index_codecs,
                    "index_location": index_location,
                },
            }
        ],
        "attributes": {},
    }


async def sharded(
    inner: Store, doc: dict[str, Any], path: str = "arr", **options: Any
) -> ZarrShardedStore:
    """Write ``doc`` as ``path/zarr.json`` and open a ZarrShardedStore with a private cache."""
    await inner.set(f"{path}/zarr.json", json.dumps(doc).encode())
    options.setdefault("cache", LoadingCache())
    store = await ZarrShardedStore.open(inner, path, **options)
    inner.stats.reset()
    return store


def chunk_bytes(coords: tuple[int, ...], nbytes: int) -> bytes:
    """Deterministic, coordinate-specific chunk content."""
    seed = sum((c + 1) * 7**i for i, c in enumerate(coords))
    return bytes((seed + i) % 251 for i in range(nbytes))
