"""open_sharded(url, path): one opener that detects the format."""

from __future__ import annotations

import json

import pytest

from asyncshard.backends import MemoryStore
from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.sharding import Uint64ShardedStore, ZarrShardedStore, open_sharded
from tests.zarr.helpers import array_doc

SPEC = ShardingSpec(0, "identity", minishard_bits=1, shard_bits=1)
VOLUME = {
    "type": "image",
    "data_type": "uint8",
    "num_channels": 1,
    "scales": [
        {
            "key": "s0",
            "size": [8, 8, 8],
            "chunk_sizes": [[4, 4, 4]],
            "encoding": "raw",
            "sharding": SPEC.to_json(),
        },
        {"key": "s1", "size": [4, 4, 4], "chunk_sizes": [[4, 4, 4]], "encoding": "raw"},
    ],
}


async def test_open_sharded_detects_each_format() -> None:
    inner = MemoryStore()
    await inner.set("arr/zarr.json", json.dumps(array_doc([8], [4], [2])).encode())
    await inner.set("mesh/info", json.dumps({"@type": "x", "sharding": SPEC.to_json()}).encode())
    await inner.set("vol/info", json.dumps(VOLUME).encode())

    zarr = await open_sharded(inner, "arr")
    assert isinstance(zarr, ZarrShardedStore)
    await zarr.set("arr/c/3", b"z")
    assert await zarr.get("arr/c/3") == b"z"

    mesh = await open_sharded(inner, "/mesh/")
    assert isinstance(mesh, Uint64ShardedStore) and mesh.prefix == "mesh"
    await mesh.set("42", b"m")
    assert await mesh.get("42") == b"m"

    scale = await open_sharded(inner, "vol/s0")
    assert isinstance(scale, Uint64ShardedStore)
    await scale.set("4-8_0-4_0-4", bytes(64))
    assert await scale.get("4-8_0-4_0-4") == bytes(64)
    assert [k async for k in scale.list()] == ["4-8_0-4_0-4"]

    with pytest.raises(InvalidMetadataError, match="vol/s0"):
        await open_sharded(inner, "vol")  # a volume: which scale?
    with pytest.raises(InvalidMetadataError, match="no sharded dataset"):
        await open_sharded(inner, "nothing/here")
    with pytest.raises(InvalidMetadataError, match="no scale"):
        await open_sharded(inner, "vol/s9")


async def test_store_options_reach_the_sharded_store() -> None:
    inner = MemoryStore()
    await inner.set("arr/zarr.json", json.dumps(array_doc([8], [4], [2])).encode())
    store = await open_sharded(inner, "arr", recheck_after=0)
    assert store.recheck_after == 0


async def test_a_group_is_named_with_its_arrays() -> None:
    inner = MemoryStore()
    group = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode()
    await inner.set("scan/zarr.json", group)
    await inner.set("scan/labels/zarr.json", group)
    for path in ("scan/0", "scan/1", "scan/labels/cells"):
        await inner.set(f"{path}/zarr.json", json.dumps(array_doc([8], [4], [2])).encode())
    message = (
        "a Zarr group, not an array; open one of its arrays: scan/0, scan/1, scan/labels/cells"
    )
    with pytest.raises(InvalidMetadataError, match=message):
        await open_sharded(inner, "scan")
    await inner.set("empty/zarr.json", group)
    with pytest.raises(InvalidMetadataError, match=r"\(it has none\)"):
        await open_sharded(inner, "empty")
