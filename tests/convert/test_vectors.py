"""zarr-vectors stores converted by asyncshard, zarr-vectors (PyPI) as the oracle.

Every step must leave a store from which zarr-vectors reads exactly what it read from the
store it wrote: a whole level, a box, objects by id; and each tool must convert the
other's output.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncshard.backends import open_store
from asyncshard.convert import (
    rebuild_manifest,
    reshard,
    reshard_async,
    shard_store,
    shard_store_async,
    unshard_store,
    unshard_store_async,
)
from tests.convert.helpers import snapshot, store_snapshot
from tests.convert.vectors import (
    KINDS,
    ORIGINS,
    arrays_of,
    assert_same,
    counts,
    is_sharded,
    spatial_arrays,
    write_store,
    zv_reads,
)
from tests.servers.fixtures import unique_prefix
from tests.servers.s3 import S3Server

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Each kind of store as zarr-vectors wrote it, with what zarr-vectors reads from it."""
    root = tmp_path_factory.mktemp("zv")
    out = {}
    for kind in KINDS:
        path = root / f"{kind}.zv"
        write_store(kind, path)
        origin = arrays_of(path)["0/vertices"]["attributes"].get("chunk_grid_origin")
        assert origin == ORIGINS[kind]
        reads = zv_reads(kind, path)
        for whole, box, objects in counts(reads).values():
            assert 0 < box < whole and objects > 0  # the queries read something
        out[kind] = (path, reads)
    yield out


def fresh(written: dict[str, Any], kind: str, tmp_path: Path) -> tuple[Path, Any]:
    source, reads = written[kind]
    path = tmp_path / source.name
    shutil.copytree(source, path)
    return path, reads


def parsed(objects: dict[str, bytes]) -> dict[str, Any]:
    """Objects of a store with the ``zarr.json`` documents parsed."""
    return {k: json.loads(v) if k.endswith("zarr.json") else v for k, v in objects.items()}


def contents(root: Path) -> dict[str, Any]:
    """Every object of a store below ``root`` (``zarr.json`` documents parsed)."""
    return parsed(snapshot(root, skip=()))


def sharded_arrays(root: Path) -> set[str]:
    """Paths of the sharded arrays below ``root``."""
    return {p for p, doc in arrays_of(root).items() if is_sharded(doc)}


@pytest.mark.parametrize("kind", KINDS)
def test_asyncshard_shard_reshard_unshard(
    written: dict[str, Any], kind: str, tmp_path: Path
) -> None:
    """shard, reshard, unshard: zarr-vectors reads the same after every step; a second
    run of each does nothing; unsharding gives back the store zarr-vectors wrote."""
    path, expected = fresh(written, kind, tmp_path)
    original = contents(path)

    summary = shard_store(str(path), 4)
    assert sharded_arrays(path) == set(summary.arrays_changed) == set(spatial_arrays(path))
    assert {a.rsplit("/", 1)[0] for a, _ in summary.skipped} <= {"0/object_index", "1/object_index"}
    assert_same(expected, zv_reads(kind, path), "sharded")
    before = contents(path)
    assert shard_store(str(path), 4).arrays_changed == []  # idempotent
    assert contents(path) == before

    reshard(str(path), (2, 2, 1))
    assert_same(expected, zv_reads(kind, path), "resharded")
    before = contents(path)
    assert reshard(str(path), (2, 2, 1)).arrays_changed == []
    assert contents(path) == before

    unshard_store(str(path))
    assert_same(expected, zv_reads(kind, path), "unsharded")
    assert contents(path) == original  # same objects, same zarr.json (manifests included)
    assert unshard_store(str(path)).arrays_changed == []


@pytest.mark.parametrize("kind", KINDS)
def test_zarr_vectors_sharded_store_converted_by_asyncshard(
    written: dict[str, Any], kind: str, tmp_path: Path
) -> None:
    """zarr-vectors' shard_store output: asyncshard has nothing to move for the same
    request, reshards and unshards it; the flat result keeps zarr-vectors' keys (its
    presence rebuild finds every cell again)."""
    from zarr_vectors.building import rebuild_presence
    from zarr_vectors.core.store import get_resolution_level, list_resolution_levels, open_store
    from zarr_vectors.sharding import shard_store as zv_shard_store

    path, expected = fresh(written, kind, tmp_path)
    original = contents(path)
    zv_shard_store(str(path), shard_shape=4)
    again = shard_store(str(path), 4)  # zarr-vectors leaves arrays without cells flat:
    assert again.chunks_moved == 0  # asyncshard shards them too (their zarr.json only)
    by_zv = sharded_arrays(path)

    reshard(str(path), 2)
    assert_same(expected, zv_reads(kind, path), "resharded")
    assert sharded_arrays(path) == by_zv  # the same arrays, in shards of 2

    summary = unshard_store(str(path))
    assert_same(expected, zv_reads(kind, path), "unsharded")
    assert set(summary.arrays_changed) == by_zv
    for array, doc in arrays_of(path).items():
        assert doc["chunk_key_encoding"]["configuration"]["separator"] == "/", array
    root = open_store(str(path), mode="r+")
    manifests = {a: d["attributes"].get("nonempty_chunks") for a, d in arrays_of(path).items()}
    for level in list_resolution_levels(root):
        rebuild_presence(get_resolution_level(root, level))
    assert manifests == {
        a: d["attributes"].get("nonempty_chunks") for a, d in arrays_of(path).items()
    }
    assert {k: v for k, v in contents(path).items() if not k.endswith("zarr.json")} == {
        k: v for k, v in original.items() if not k.endswith("zarr.json")
    }


@pytest.mark.parametrize("kind", KINDS)
def test_asyncshard_sharded_store_converted_by_zarr_vectors(
    written: dict[str, Any], kind: str, tmp_path: Path
) -> None:
    """asyncshard's output: zarr-vectors skips the same request, reshards and unshards it."""
    from zarr_vectors.sharding import reshard as zv_reshard
    from zarr_vectors.sharding import shard_store as zv_shard_store
    from zarr_vectors.sharding import unshard_store as zv_unshard_store

    path, expected = fresh(written, kind, tmp_path)
    shard_store(str(path), 4)
    sharded = sharded_arrays(path)
    assert zv_shard_store(str(path), shard_shape=4)["arrays_sharded"] == 0

    zv_reshard(str(path), 2)
    assert_same(expected, zv_reads(kind, path), "resharded by zarr-vectors")
    assert sharded_arrays(path) == sharded

    zv_unshard_store(str(path))
    assert_same(expected, zv_reads(kind, path), "unsharded by zarr-vectors")
    assert sharded_arrays(path) == set()


def zarr_store_on(server: S3Server, prefix: str) -> Any:
    """The store as zarr-vectors opens it on S3: zarr's ObjectStore over obstore."""
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    s3 = S3Store(
        server.bucket, prefix=prefix, client_options={"allow_http": True}, **server.options()
    )
    return ObjectStore(s3)


async def test_polylines_on_s3(written: dict[str, Any], s3_server: S3Server) -> None:
    """The streamlines store on S3 (SeaweedFS): shard, reshard, unshard by URL; zarr-vectors
    reads the same from S3 after every step; the objects end as zarr-vectors wrote them."""
    source, expected = written["polylines"]
    original = snapshot(source, skip=())
    prefix = unique_prefix()
    url = f"s3://{s3_server.bucket}/{prefix}"
    options = s3_server.options()
    zv_store = zarr_store_on(s3_server, prefix)
    async with open_store(url, **options) as store:
        for key, value in original.items():
            await store.set(key, value)
        summary = await shard_store_async(url, 4, storage_options=options)
        assert sorted(summary.arrays_changed) == sorted(spatial_arrays(source))
        assert_same(expected, zv_reads("polylines", zv_store), "sharded")
        await reshard_async(url, 2, storage_options=options)
        assert_same(expected, zv_reads("polylines", zv_store), "resharded")
        await unshard_store_async(url, storage_options=options)
        assert_same(expected, zv_reads("polylines", zv_store), "unsharded")
        assert parsed(await store_snapshot(store)) == parsed(original)
        if s3_server.external:
            await store.erase_prefix("")


def test_explicit_arrays_separator_and_manifest_rebuild(
    written: dict[str, Any], tmp_path: Path
) -> None:
    """An object-level array named in ``arrays=`` is sharded (no manifest added) and the
    walk unshards it again; ``separator='.'`` is refused for flat zarr-vectors arrays;
    rebuilding the manifests from the data gives zarr-vectors' own."""
    path, expected = fresh(written, "mesh", tmp_path)
    original = contents(path)
    ids = "0/object_index/object_ids"
    assert shard_store(str(path), 2, arrays=[ids]).arrays_changed == [ids]
    assert is_sharded(arrays_of(path)[ids])
    assert "nonempty_chunks" not in arrays_of(path)[ids]["attributes"]
    assert_same(expected, zv_reads("mesh", path), "object index sharded")
    refused = unshard_store(str(path), separator=".")
    assert refused.skipped[0][1].endswith("separator '.' refused")
    assert unshard_store(str(path)).arrays_changed == [ids]

    summary = rebuild_manifest(str(path))
    assert {a for a, _ in summary.skipped} == {ids, "0/object_index/manifests"}
    assert contents(path) == original
