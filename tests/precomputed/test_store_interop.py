"""Store-level interop with tensorstore, both ways, on local files and on S3 (SeaweedFS).

* Volumes written by tensorstore's ``neuroglancer_precomputed`` driver (sharded: identity
  and murmurhash3, preshift bits, raw and gzip for both encodings, clipped edge chunks)
  read through :class:`Uint64ShardedStore` byte-identical to what tensorstore's
  ``neuroglancer_uint64_sharded`` kvstore returns for every chunk id (keys: 8-byte
  big-endian ids), and by chunk name through the volume layer.
* Shards written through asyncshard (merging writes and whole-shard writes) open in
  tensorstore with the expected voxel values.
* On S3 also: concurrent writers lose nothing, and the read budget holds server-side.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from asyncshard.backends import LocalStore
from asyncshard.cache import LoadingCache
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import Scale
from asyncshard.sharding.precomputed import Uint64ShardedStore
from asyncshard.sharding.volume import PrecomputedVolume
from asyncshard.store import Store
from asyncshard.views import UnshardedView
from tests.servers import fixtures as server_fixtures
from tests.servers.fixtures import s3_store_on, unique_prefix
from tests.servers.proxy import FaultProxy
from tests.servers.s3 import S3Server

s3_server = server_fixtures.s3_server  # the shared session S3 server (SeaweedFS, or MinIO)

CASES = [
    pytest.param("identity", 0, "raw", "raw", id="identity-raw"),
    pytest.param("identity", 2, "gzip", "raw", id="identity-preshift2-gzip-index"),
    pytest.param("murmurhash3_x86_128", 0, "raw", "gzip", id="murmur-gzip-data"),
    pytest.param("murmurhash3_x86_128", 1, "gzip", "gzip", id="murmur-preshift1-gzip-both"),
]
SIZE, CHUNK, OFFSET = (9, 7, 5), (4, 3, 2), (3, -2, 1)  # grid (3, 3, 3), clipped edges
CHANNELS = 2


def sharding_doc(hash: str, preshift: int, index: str, data: str) -> dict[str, Any]:
    return {
        "@type": "neuroglancer_uint64_sharded_v1",
        "preshift_bits": preshift,
        "hash": hash,
        "minishard_bits": 1,
        "shard_bits": 2,
        "minishard_index_encoding": index,
        "data_encoding": data,
    }


def voxels(seed: int = 7) -> np.ndarray[Any, np.dtype[np.uint16]]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60000, size=(*SIZE, CHANNELS), dtype=np.uint16)


def chunk_bytes(scale: Scale, values: np.ndarray[Any, Any], pos: tuple[int, int, int]) -> bytes:
    """Raw encoding: the clipped block, x fastest, channel slowest."""
    (x0, y0, z0), (x1, y1, z1) = scale.chunk_bounds(pos)
    ox, oy, oz = scale.voxel_offset
    block = values[x0 - ox : x1 - ox, y0 - oy : y1 - oy, z0 - oz : z1 - oz, :]
    return np.ascontiguousarray(block.transpose(3, 2, 1, 0)).astype("<u2").tobytes()


def grid_positions(scale: Scale) -> list[tuple[int, int, int]]:
    gx, gy, gz = scale.grid_shape
    return [(x, y, z) for x in range(gx) for y in range(gy) for z in range(gz)]


# --------------------------------------------------------------------------- backends


@dataclass
class Place:
    """One empty location, as an asyncshard Store and as a tensorstore kvstore spec."""

    name: str
    store: Store
    kvstore: dict[str, Any]

    def ts_kvstore(self, sub: str) -> dict[str, Any]:
        """The tensorstore kvstore spec of the sub-directory ``sub``."""
        spec = dict(self.kvstore)
        if spec["driver"] == "file":
            spec["path"] = f"{spec['path']}/{sub}"
        else:
            spec["path"] = f"{spec['path']}{sub}/"
        return spec


@pytest.fixture(scope="session")
def s3_credentials(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> Path:
    """An AWS profile for tensorstore (whose s3 driver takes no inline keys)."""
    folder = tmp_path_factory.mktemp("aws")
    (folder / "credentials").write_text(
        f"[default]\naws_access_key_id = {s3_server.access_key}\n"
        f"aws_secret_access_key = {s3_server.secret_key}\n"
    )
    (folder / "config").write_text(f"[default]\nregion = {s3_server.region}\n")
    return folder


def ts_s3_kvstore(server: S3Server, credentials: Path, path: str) -> dict[str, Any]:
    return {
        "driver": "s3",
        "bucket": server.bucket,
        "endpoint": server.endpoint,
        "aws_region": server.region,
        "aws_credentials": {
            "type": "profile",
            "profile": "default",
            "credentials_file": str(credentials / "credentials"),
            "config_file": str(credentials / "config"),
        },
        "path": path,
    }


@pytest.fixture(params=["local", "s3"])
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Place]:
    if request.param == "local":
        root = tmp_path / "vol"
        async with LocalStore(root, durable=False) as store:
            yield Place("local", store, {"driver": "file", "path": str(root)})
        return
    server: S3Server = request.getfixturevalue("s3_server")
    credentials: Path = request.getfixturevalue("s3_credentials")
    prefix = unique_prefix()
    async with s3_store_on(server, prefix) as store:
        yield Place("s3", store, ts_s3_kvstore(server, credentials, prefix + "/"))
        if server.external:
            await store.erase_prefix("")


def ts_volume(place: Place, scale_metadata: dict[str, Any] | None = None) -> Any:
    spec: dict[str, Any] = {"driver": "neuroglancer_precomputed", "kvstore": place.kvstore}
    if scale_metadata is not None:
        spec["multiscale_metadata"] = {
            "type": "image",
            "data_type": "uint16",
            "num_channels": CHANNELS,
        }
        spec["scale_metadata"] = scale_metadata
        spec["create"] = True
    return ts.open(spec).result()


def ts_sharded_kvstore(place: Place, scale_key: str, sharding: dict[str, Any]) -> Any:
    return ts.KvStore.open(
        {
            "driver": "neuroglancer_uint64_sharded",
            "base": place.ts_kvstore(scale_key),
            "metadata": sharding,
        }
    ).result()


def info_doc(sharding: dict[str, Any]) -> dict[str, Any]:
    return {
        "@type": "neuroglancer_multiscale_volume",
        "type": "image",
        "data_type": "uint16",
        "num_channels": CHANNELS,
        "scales": [
            {
                "key": "s0",
                "size": list(SIZE),
                "voxel_offset": list(OFFSET),
                "chunk_sizes": [list(CHUNK)],
                "resolution": [1, 1, 1],
                "encoding": "raw",
                "sharding": sharding,
            }
        ],
    }


# --------------------------------------------------------------------------- tensorstore writes


@pytest.mark.parametrize(("hash", "preshift", "index", "data"), CASES)
async def test_asyncshard_reads_what_tensorstore_wrote(
    place: Place, hash: str, preshift: int, index: str, data: str
) -> None:
    sharding = sharding_doc(hash, preshift, index, data)
    scale_md = {
        "size": list(SIZE),
        "chunk_size": list(CHUNK),
        "voxel_offset": list(OFFSET),
        "encoding": "raw",
        "sharding": sharding,
    }
    values = voxels()
    array = ts_volume(place, scale_md)
    await asyncio.to_thread(lambda: array.__setitem__(..., values))

    volume = await PrecomputedVolume.open(place.store, cache=LoadingCache())
    [scale_key] = volume.sharded_scale_keys
    scale = volume.scale(scale_key)
    assert scale.store.spec == ShardingSpec.from_json(sharding)

    # every chunk id tensorstore lists, read both ways, byte-identical
    kv = ts_sharded_kvstore(place, scale_key, sharding)
    ts_ids = sorted(int.from_bytes(k, "big") for k in await asyncio.to_thread(kv.list().result))
    assert ts_ids == await scale.store.chunk_ids()
    assert ts_ids == sorted(scale.scale.chunk_id(p) for p in grid_positions(scale.scale))
    expected = {i: bytes(kv.read(i.to_bytes(8, "big")).result().value) for i in ts_ids}
    scale.store.cache.clear()
    place.store.stats.reset()
    got = await scale.store.get_chunks(ts_ids)
    assert got == expected
    # one batch: per shard one shard index, one request per minishard index, one data round
    shard_numbers = {scale.store.spec.shard_and_minishard_of(i) for i in ts_ids}
    n_shards = len({s for s, _ in shard_numbers})
    assert place.store.stats.requests["get"] == n_shards + len(shard_numbers) + n_shards
    # chunk by chunk through the decimal keys (warm cache: one data request each)
    for chunk_id in ts_ids[:5]:
        assert await scale.store.get(str(chunk_id)) == expected[chunk_id]
    # and by unsharded chunk name: the voxels tensorstore wrote
    for pos in grid_positions(scale.scale):
        name = scale.scale.chunk_name(pos)
        assert await scale.get_chunk(name) == chunk_bytes(scale.scale, values, pos), name
    view = UnshardedView(place.store)
    names = [f"{scale_key}/{scale.scale.chunk_name(p)}" for p in grid_positions(scale.scale)]
    batch = await view.get_partial_values([(n, None) for n in names])
    assert [bytes(v or b"") for v in batch] == [
        chunk_bytes(scale.scale, values, p) for p in grid_positions(scale.scale)
    ]


# --------------------------------------------------------------------------- asyncshard writes


@pytest.mark.parametrize(("hash", "preshift", "index", "data"), CASES)
async def test_tensorstore_reads_what_asyncshard_wrote(
    place: Place, hash: str, preshift: int, index: str, data: str
) -> None:
    sharding = sharding_doc(hash, preshift, index, data)
    doc = info_doc(sharding)
    await place.store.set("info", json.dumps(doc).encode())
    volume = await PrecomputedVolume.open(place.store, cache=LoadingCache())
    scale = volume.scale("s0")
    values = voxels(seed=11)
    positions = grid_positions(scale.scale)
    chunks = {scale.scale.chunk_name(p): chunk_bytes(scale.scale, values, p) for p in positions}
    names = list(chunks)
    # two merging batches (the second lands in shards the first created), then a
    # one-chunk update through the Store API
    await scale.set_chunks({n: chunks[n] for n in names[::2]})
    await scale.set_chunks({n: chunks[n] for n in names[1::2]})
    values[0:1, 0:3, 0:2, :] = 7  # inside chunk (0, 0, 0)
    first = scale.scale.chunk_name((0, 0, 0))
    first_key = str(scale.scale.chunk_id((0, 0, 0)))
    await scale.store.set(first_key, chunk_bytes(scale.scale, values, (0, 0, 0)))

    array = ts_volume(place)
    assert array.domain.inclusive_min == (*OFFSET, 0)
    np.testing.assert_array_equal(await asyncio.to_thread(lambda: array.read().result()), values)
    kv = ts_sharded_kvstore(place, "s0", sharding)
    for name in (first, names[-1]):
        chunk_id = scale.chunk_id(name)
        ts_value = bytes(kv.read(chunk_id.to_bytes(8, "big")).result().value)
        assert ts_value == await scale.get_chunk(name)


async def test_tensorstore_reads_whole_shards_and_updates(place: Place) -> None:
    sharding = sharding_doc("murmurhash3_x86_128", 1, "gzip", "gzip")
    await place.store.set("info", json.dumps(info_doc(sharding)).encode())
    scale = (await PrecomputedVolume.open(place.store, cache=LoadingCache())).scale("s0")
    values = voxels(seed=3)
    positions = grid_positions(scale.scale)
    by_id = {scale.scale.chunk_id(p): chunk_bytes(scale.scale, values, p) for p in positions}
    place.store.stats.reset()
    await scale.store.write_shards(by_id)
    assert place.store.stats.requests["get"] == 0  # whole shards: no reads
    array = ts_volume(place)
    np.testing.assert_array_equal(await asyncio.to_thread(lambda: array.read().result()), values)

    # tensorstore updates a region; asyncshard sees it (its cached indexes are stale)
    values[4:9, 0:7, 0:5, :] = 123
    await asyncio.to_thread(lambda: array[4 + OFFSET[0] :, :, :, :].write(values[4:]).result())
    for pos in positions:
        name = scale.scale.chunk_name(pos)
        assert await scale.get_chunk(name) == chunk_bytes(scale.scale, values, pos), name


# --------------------------------------------------------------------------- S3 specifics


@pytest.fixture
def counting_proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    proxy = FaultProxy(s3_server.endpoint).start()
    yield proxy
    proxy.stop()


async def test_budget_holds_server_side_on_s3(
    s3_server: S3Server, counting_proxy: FaultProxy
) -> None:
    spec = ShardingSpec.from_json(sharding_doc("murmurhash3_x86_128", 0, "gzip", "gzip"))
    async with s3_store_on(s3_server, unique_prefix(), endpoint=counting_proxy.url) as inner:
        store = Uint64ShardedStore(inner, spec, cache=LoadingCache())
        chunks = {i: f"chunk {i}".encode() * 20 for i in range(64)}
        await store.write_shards(chunks)
        store.cache.clear()
        counting_proxy.log.clear()
        same = [i for i in chunks if spec.shard_and_minishard_of(i) == (0, 0)]
        assert await store.get_chunk(same[0]) == chunks[same[0]]
        assert len(counting_proxy.log) == 3  # shard index, minishard index, data
        assert await store.get_chunk(same[1]) == chunks[same[1]]
        assert len(counting_proxy.log) == 4
        assert all(s.method == "GET" and s.range for s in counting_proxy.log)


async def test_concurrent_writers_on_s3_lose_nothing(s3_server: S3Server) -> None:
    spec = ShardingSpec.from_json(sharding_doc("identity", 0, "raw", "gzip") | {"shard_bits": 0})
    async with s3_store_on(s3_server, unique_prefix()) as inner:
        assert inner.supports_conditional_writes
        stores = [Uint64ShardedStore(inner, spec, cache=LoadingCache()) for _ in range(2)]

        async def writer(task: int) -> None:
            for n in range(5):
                await stores[task % 2].set_chunks({task * 100 + n: f"{task}:{n}".encode()})

        await asyncio.gather(*(writer(t) for t in range(4)))
        fresh = Uint64ShardedStore(inner, spec, cache=LoadingCache())
        expected = {t * 100 + n: f"{t}:{n}".encode() for t in range(4) for n in range(5)}
        assert await fresh.get_chunks(expected) == expected
        assert [k async for k in inner.list()] == ["0.shard"]
