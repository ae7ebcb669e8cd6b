"""ZarrShardedStore against real peers, on local files and on SeaweedFS S3.

Reading: arrays written by zarr-python 3 and tensorstore; every inner chunk that
asyncshard returns must equal the bytes tensorstore's ``zarr3_sharding_indexed`` kvstore
returns for the same shard and position (missing on both sides alike).
Writing: shards written through asyncshard read back in zarr-python and tensorstore as
the expected values.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import obstore.store
import pytest
import tensorstore as ts
import zarr
import zarr.storage

from asyncshard.backends import LocalStore, open_store
from asyncshard.cache import LoadingCache
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Store
from tests.servers.fixtures import unique_prefix
from tests.servers.s3 import S3Server
from tests.zarr.helpers import array_doc


@dataclass
class Backend:
    """One place to put arrays, reachable by asyncshard, zarr-python and tensorstore."""

    store: Store
    zarr_store: Any
    ts_base: dict[str, Any]  # tensorstore kvstore spec of the root, without "path"
    root: str  # path prefix inside ts_base

    def ts_kvstore(self, key: str) -> dict[str, Any]:
        return {**self.ts_base, "path": self.root + key}


@pytest.fixture(params=["local", "s3"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Backend]:
    if request.param == "local":
        root = tmp_path / "root"
        root.mkdir()
        yield Backend(
            LocalStore(root),
            zarr.storage.LocalStore(root),
            {"driver": "file"},
            str(root) + "/",
        )
        return
    server: S3Server = request.getfixturevalue("s3_server")
    prefix = unique_prefix()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    obs = obstore.store.S3Store(
        server.bucket,
        prefix=prefix,
        endpoint=server.endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        region=server.region,
        client_options={"allow_http": True},
    )
    store = open_store(f"s3://{server.bucket}/{prefix}", **server.options())
    ts_base = {
        "driver": "s3",
        "bucket": server.bucket,
        "endpoint": server.endpoint,
        "aws_region": server.region,
        "aws_credentials": {"type": "environment"},
    }
    yield Backend(store, zarr.storage.ObjectStore(obs), ts_base, prefix + "/")
    await store.close()


def sample(shape: tuple[int, ...]) -> np.ndarray[Any, np.dtype[np.uint16]]:
    """Values with a zero block, so some inner chunks stay unwritten (missing)."""
    data = (np.arange(int(np.prod(shape)), dtype=np.uint32) % 60000 + 1).astype(np.uint16)
    data = data.reshape(shape)
    data[tuple(slice(0, 8) for _ in shape)] = 0
    return data


GEOMETRIES = {  # shape, shard shape, inner chunk shape (edge shards in every case)
    "2d": ((50, 37), (16, 16), (8, 8)),
    "3d": ((20, 18, 10), (8, 8, 8), (4, 4, 4)),
}


def write_with_zarr_python(backend: Backend, geometry: str) -> np.ndarray[Any, Any]:
    shape, shards, chunks = GEOMETRIES[geometry]
    data = sample(shape)
    arr = zarr.create_array(
        store=backend.zarr_store,
        name="arr",
        shape=shape,
        chunks=chunks,
        shards=shards,
        dtype="uint16",
        fill_value=0,
        zarr_format=3,
    )
    arr[...] = data
    return data


def write_with_tensorstore(
    backend: Backend, geometry: str, location: str, checksum: bool
) -> np.ndarray[Any, Any]:
    shape, shards, chunks = GEOMETRIES[geometry]
    data = sample(shape)
    index_codecs: list[Any] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if checksum:
        index_codecs.append("crc32c")
    spec = {
        "driver": "zarr3",
        "kvstore": backend.ts_kvstore("arr/"),
        "metadata": {
            "shape": list(shape),
            "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shards)}},
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": list(chunks),
                        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                        "index_codecs": index_codecs,
                        "index_location": location,
                    },
                }
            ],
        },
        "create": True,
    }
    arr = ts.open(spec).result()
    arr[...] = data
    return data


def ts_inner_chunks(backend: Backend, store: ZarrShardedStore) -> dict[str, bytes | None]:
    """Every inner chunk of the array as tensorstore's sharding kvstore returns it."""
    layout = store.layout
    index_codecs: list[Any] = [{"name": "bytes", "configuration": {"endian": layout.index.endian}}]
    if layout.index.checksum:
        index_codecs.append({"name": "crc32c"})
    out: dict[str, bytes | None] = {}
    for shard in itertools.product(*map(range, layout.shard_grid_shape)):
        kv = ts.KvStore.open(
            {
                "driver": "zarr3_sharding_indexed",
                "base": backend.ts_kvstore(layout.shard_key(shard)),
                "grid_shape": list(layout.chunks_per_shard),
                "index_codecs": index_codecs,
                "index_location": layout.index.location,
            }
        ).result()
        for pos in itertools.product(*map(range, layout.chunks_per_shard)):
            coords = layout.grid.chunk_coords(shard, pos)
            if not layout.grid.chunk_in_bounds(coords):
                continue
            key = np.asarray(pos, dtype=">u4").tobytes()
            result = kv.read(key).result()
            out[layout.chunk_key(coords)] = bytes(result.value) if result.state == "value" else None
    return out


async def assert_matches_tensorstore(backend: Backend) -> ZarrShardedStore:
    store = await ZarrShardedStore.open(backend.store, "arr", cache=LoadingCache())
    expected = ts_inner_chunks(backend, store)
    keys = sorted(expected)
    values = await store.get_partial_values([(k, None) for k in keys])
    got = {k: None if v is None else bytes(v) for k, v in zip(keys, values, strict=True)}
    assert got == expected
    assert any(v is None for v in got.values()) and any(v is not None for v in got.values())
    return store


@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
async def test_reads_zarr_python_arrays(backend: Backend, geometry: str) -> None:
    write_with_zarr_python(backend, geometry)
    await assert_matches_tensorstore(backend)


@pytest.mark.parametrize(
    ("geometry", "location", "checksum"),
    [("2d", "start", True), ("2d", "end", False), ("3d", "start", False), ("3d", "end", True)],
)
async def test_reads_tensorstore_arrays(
    backend: Backend, geometry: str, location: str, checksum: bool
) -> None:
    data = write_with_tensorstore(backend, geometry, location, checksum)
    store = await assert_matches_tensorstore(backend)
    # uncompressed inner chunks: decode one and compare with the array values
    chunk = GEOMETRIES[geometry][2]
    coords = tuple(8 // c for c in chunk)  # the first chunk past the zeroed block
    raw = await store.get(store.layout.chunk_key(coords))
    assert raw is not None
    block = np.frombuffer(bytes(raw), dtype="<u2").reshape(chunk)
    window = data[tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, chunk, strict=True))]
    assert np.array_equal(block[tuple(slice(0, s) for s in window.shape)], window)


def chunks_of(data: np.ndarray[Any, Any], chunk: tuple[int, ...]) -> Iterator[tuple[Any, bytes]]:
    """Every inner chunk of ``data`` padded to full size, as little-endian bytes."""
    grid = [-(-s // c) for s, c in zip(data.shape, chunk, strict=True)]
    for coords in itertools.product(*map(range, grid)):
        block = np.zeros(chunk, dtype=data.dtype)
        window = tuple(slice(i * n, (i + 1) * n) for i, n in zip(coords, chunk, strict=True))
        part = data[window]
        block[tuple(slice(0, s) for s in part.shape)] = part
        if block.any():  # all-fill chunks stay missing, like other writers do
            yield coords, block.astype("<u2").tobytes()


@pytest.mark.parametrize(("geometry", "location"), [("2d", "end"), ("3d", "start")])
async def test_peers_read_what_asyncshard_writes(
    backend: Backend, geometry: str, location: str
) -> None:
    shape, shards, chunk = GEOMETRIES[geometry]
    data = sample(shape)
    doc = array_doc(list(shape), list(shards), list(chunk), index_location=location,
                    dtype="uint16")  # fmt: skip
    await backend.store.set("arr/zarr.json", json.dumps(doc).encode())
    store = await ZarrShardedStore.open(backend.store, "arr", cache=LoadingCache())
    await store.set_values({store.layout.chunk_key(c): b for c, b in chunks_of(data, chunk)})

    from_zarr = zarr.open_array(store=backend.zarr_store, path="arr", mode="r")[...]
    assert np.array_equal(from_zarr, data)
    from_ts = ts.open({"driver": "zarr3", "kvstore": backend.ts_kvstore("arr/")}).result()
    assert np.array_equal(from_ts.read().result(), data)


async def test_partial_updates_read_by_peers(backend: Backend) -> None:
    """Chunk-by-chunk writes (read-merge-write of shards) stay readable by both peers."""
    shape, shards, chunk = GEOMETRIES["2d"]
    data = sample(shape)
    doc = array_doc(list(shape), list(shards), list(chunk), dtype="uint16")
    await backend.store.set("arr/zarr.json", json.dumps(doc).encode())
    store = await ZarrShardedStore.open(backend.store, "arr", cache=LoadingCache())
    for coords, raw in chunks_of(data, chunk):
        await store.set(store.layout.chunk_key(coords), raw)
    from_ts = ts.open({"driver": "zarr3", "kvstore": backend.ts_kvstore("arr/")}).result()
    assert np.array_equal(from_ts.read().result(), data)
    assert np.array_equal(zarr.open_array(store=backend.zarr_store, path="arr")[...], data)
