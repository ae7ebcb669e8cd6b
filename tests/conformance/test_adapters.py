"""The conformance suite on every adapter: the sharded stores and the unsharded view.

Each runs with pass-through keys (the identity mapping: keys outside the dataset, which
reach the wrapped store) and with chunk keys (``ChunkKeys``: every test key becomes a
chunk of the dataset, spread over several shards). Adapters count logical operations.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.cache import LoadingCache
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import VolumeInfo
from asyncshard.sharding.precomputed import Uint64ShardedStore
from asyncshard.sharding.volume import scale_store
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Store
from asyncshard.testing import ChunkKeys, Harness, KeyMapper, StoreConformance, identity
from asyncshard.views import UnshardedView
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.s3 import S3Server
from tests.zarr.helpers import array_doc

# A 2-d Zarr array at "ds/": 64 x 512 chunks of one element, 4 x 8 chunks per shard.
ZARR_DOC = array_doc([64, 512], [4, 8], [1, 1])
ZARR_META = "ds/zarr.json"


def zarr_chunk(n: int) -> str:
    """Chunk (n % 13, 5n): rows 0..12 (so row prefixes such as "1" match 1, 10, 11, 12),
    a few test keys per shard, many shards."""
    return f"ds/c/{n % 13}/{5 * n}"


def sharding(encoding: str) -> ShardingSpec:
    return ShardingSpec.from_json(
        {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 0,
            "hash": "murmurhash3_x86_128",
            "minishard_bits": 2,
            "shard_bits": 2,
            "minishard_index_encoding": encoding,
            "data_encoding": encoding,
        }
    )


def chunk_id(n: int) -> str:
    """Decimal ids far apart, so that string prefixes of them are selective."""
    return str(7919 * n + 3)


# A precomputed volume at "vol/": one sharded scale "s0" of 16^3 chunks of 64^3 voxels.
VOLUME_INFO: dict[str, Any] = {
    "@type": "neuroglancer_multiscale_volume",
    "type": "image",
    "data_type": "uint8",
    "num_channels": 1,
    "scales": [
        {
            "key": "s0",
            "size": [1024, 1024, 1024],
            "voxel_offset": [0, 0, 0],
            "chunk_sizes": [[64, 64, 64]],
            "resolution": [8, 8, 8],
            "encoding": "raw",
            "sharding": sharding("gzip").to_json(),
        }
    ],
}
VOLUME = VolumeInfo.from_json(VOLUME_INFO)
SCALE = VOLUME.scale("s0")


def chunk_name(n: int) -> str:
    """The unsharded name of grid position (n % 16, n // 16 % 16, 5n % 16)."""
    return SCALE.chunk_name((n % 16, n // 16 % 16, 5 * n % 16))


def mapping(chunks: Callable[[int], str], keys: str) -> dict[str, Any]:
    """Harness options for ``keys``: ``""`` pass-through keys, ``"chunks"`` chunk keys
    named by ``chunks``, ``"mixed"`` every second key a chunk key, the others passed
    through."""
    if not keys:
        return {"keys": identity, "structured": True}
    mapper: KeyMapper = ChunkKeys(chunks, mixed=keys == "mixed")
    return {"keys": mapper, "structured": False}


async def open_zarr(inner: Store) -> ZarrShardedStore:
    await inner.set(ZARR_META, json.dumps(ZARR_DOC).encode())
    return await ZarrShardedStore.open(inner, "ds", cache=LoadingCache())


async def open_volume(inner: Store) -> Uint64ShardedStore:
    """The info of the volume, and the scale's store by chunk name (a private cache)."""
    await inner.set("vol/info", json.dumps(VOLUME_INFO).encode())
    return scale_store(inner, VOLUME, SCALE, path="vol", named=True, cache=LoadingCache())


def routed(inner: Store, scopes: Mapping[str, Store]) -> Callable[[Mapping[str, bytes]], Any]:
    """A seeder writing keys below a scope's folder through its store (relative keys),
    others to ``inner``."""

    async def seed(objects: Mapping[str, bytes]) -> None:
        for key, value in objects.items():
            base = next((b for b in scopes if key.startswith(b)), None)
            if base is None:
                await inner.set(key, value)
            else:
                await scopes[base].set(key[len(base) :], value)

    return seed


class TestZarrSharded(StoreConformance):
    """ZarrShardedStore over memory, local files and S3 (moto)."""

    @pytest.fixture(params=["memory", "memory-chunks", "memory-mixed", "local-chunks", "s3-chunks"])
    async def harness(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> AsyncIterator[Harness]:
        backend, _, keys = request.param.partition("-")
        server: S3Server | None = None
        if backend == "s3":
            server = request.getfixturevalue("s3_server")
            inner: Store = s3_store_on(server, unique_prefix())
        else:
            inner = MemoryStore() if backend == "memory" else LocalStore(tmp_path, durable=False)
        async with await open_zarr(inner) as store:
            yield Harness(
                store,
                present_keys=frozenset({ZARR_META}),
                **mapping(zarr_chunk, keys),
            )
            if server is not None and server.external:
                await inner.erase_prefix("")


class TestUint64Sharded(StoreConformance):
    """Uint64ShardedStore by decimal chunk id (raw and gzip) and by chunk name."""

    @pytest.fixture(params=["raw", "raw-chunks", "gzip-chunks", "gzip-mixed", "names-chunks"])
    async def harness(self, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
        kind, _, keys = request.param.partition("-")
        inner = MemoryStore()
        if kind == "names":
            store = await open_volume(inner)
            chunks: Callable[[int], str] = chunk_name
        else:
            store = Uint64ShardedStore(inner, sharding(kind), prefix="vol/s0", cache=LoadingCache())
            chunks = chunk_id
        async with store:
            yield Harness(store, **mapping(chunks, keys))


class TestUnshardedView(StoreConformance):
    """UnshardedView (read-only), seeded through a sharded store of its dataset.

    ``zarr``: pass-through keys, the server's listing (``list_chunks=False``);
    ``*-chunks``: chunk keys, listings that enumerate chunks (``list_chunks=True``).
    """

    @pytest.fixture(params=["zarr", "zarr-chunks", "precomputed-chunks"])
    async def harness(self, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
        kind, _, keys = request.param.partition("-")
        inner = MemoryStore()
        if kind == "zarr":
            writer: Store = await open_zarr(inner)
            seeder = routed(inner, {"": writer})
            present, chunks = ZARR_META, zarr_chunk
        else:
            writer = await open_volume(inner)
            seeder = routed(inner, {"vol/s0/": writer})
            present, chunks = "vol/info", (lambda n: "vol/s0/" + chunk_name(n))
        async with UnshardedView(inner, list_chunks=bool(keys)) as view:
            yield Harness(
                view,
                seeder=seeder,
                present_keys=frozenset({present}),
                **mapping(chunks, keys),
            )
