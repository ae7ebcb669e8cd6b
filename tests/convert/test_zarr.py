"""Zarr conversions on local files and memory: round trips, readers, manifest, options."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncshard.backends import LocalStore, MemoryStore
from asyncshard.convert import (
    MANIFEST_ATTRIBUTE,
    ConversionError,
    ManifestWarning,
    PassStarted,
    TaskDone,
    find_arrays,
    rebuild_manifest,
    reshard,
    reshard_async,
    shard_store,
    shard_store_async,
    unshard_store,
    unshard_store_async,
)
from asyncshard.errors import NothingToConvertError
from tests.convert.helpers import (
    CrashingStore,
    assert_readable,
    make_array,
    snapshot,
    store_snapshot,
)


def meta(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((path / "zarr.json").read_text())
    return doc


def write_meta(path: Path, doc: dict[str, Any]) -> None:
    (path / "zarr.json").write_text(json.dumps(doc))


def cells(keys: Iterable[str]) -> list[str]:
    """Flat chunk keys ``c/0/1`` as manifest keys ``0.1``."""
    return [k.removeprefix("c/").replace("/", ".") for k in keys]


def test_round_trip_flat_sharded_resharded_flat(tmp_path: Path) -> None:
    """flat -> sharded -> resharded -> flat: byte-identical chunk objects, same keys;
    zarr-python and tensorstore read every intermediate layout."""
    arr = tmp_path / "a"
    data = make_array(
        arr, (70, 45, 9), (8, 8, 4), compressors={"name": "zstd", "configuration": {"level": 3}}
    )
    original = snapshot(arr)
    original_meta = meta(arr)

    summary = shard_store(str(arr), 4)
    assert summary.arrays_changed == [""]
    assert summary.chunks_moved == len(original)
    sharded = meta(arr)
    config = sharded["codecs"][0]["configuration"]
    assert config["codecs"] == original_meta["codecs"]  # inner codecs = the flat codecs
    assert sharded["chunk_key_encoding"] == original_meta["chunk_key_encoding"]  # c/i/j/k
    assert summary.arrays[0].passes == 2  # keys kept: staged under i/j/k, copied back
    assert len(snapshot(arr)) == 3 * 2 * 1  # a 9x6x3 chunk grid in 4x4x4 shards
    assert_readable(arr, data)

    summary = reshard(str(arr), (2, 3, 1))
    assert summary.arrays[0].passes == 2
    assert meta(arr)["chunk_key_encoding"] == sharded["chunk_key_encoding"]
    assert_readable(arr, data)

    unshard_store(str(arr))
    assert snapshot(arr) == original  # same keys, same bytes
    back = meta(arr)
    manifest = back["attributes"].pop(MANIFEST_ATTRIBUTE)
    assert manifest == sorted(cells(original))  # zarr-vectors' form: "0.0.2"
    assert back == original_meta
    assert_readable(arr, data)


async def test_reshard_into_smaller_shards_reads_each_source_shard_once(
    tmp_path: Path,
) -> None:
    """Where every target shard lies inside one source shard, each source shard is read
    once, whole (no index or range reads), and cut into its targets."""
    data = make_array(tmp_path / "a", (40, 36), (4, 4))  # 10x9 chunks, 86 stored
    await shard_store_async(LocalStore(tmp_path / "a"), 4, separator=".")  # 3x3 shards
    source = CrashingStore(LocalStore(tmp_path / "a"))
    summary = await reshard_async(source, 2, to=str(tmp_path / "b"))
    shard_reads = sorted((k, r) for k, r in source.reads if k.startswith("c."))
    assert shard_reads == [(f"c.{i}.{j}", None) for i in range(3) for j in range(3)]
    report = summary.arrays[0]
    assert (report.objects_written, report.chunks) == (5 * 5 - 1, 86)  # one target empty
    assert len([p for p in (tmp_path / "b").iterdir() if p.name.startswith("c.")]) == 24
    assert_readable(tmp_path / "b", data)


async def test_reshard_of_sources_too_large_to_hold_reads_by_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source shard over SPLIT_WHOLE_BYTES is not read whole: its targets are read
    by range, one at a time, through the cached index."""
    from asyncshard.convert import tasks

    monkeypatch.setattr(tasks, "SPLIT_WHOLE_BYTES", 0)
    data = make_array(tmp_path / "a", (40, 36), (4, 4))
    await shard_store_async(LocalStore(tmp_path / "a"), 4, separator=".")
    source = CrashingStore(LocalStore(tmp_path / "a"))
    summary = await reshard_async(source, 2, to=str(tmp_path / "b"))
    ranged = {k for k, r in source.reads if k.startswith("c.") and r is not None}
    whole = [k for k, r in source.reads if k.startswith("c.") and r is None]
    assert whole == ["c.2.2"]  # the corner shard feeds one target: a repack reads it all
    assert ranged == {f"c.{i}.{j}" for i in range(3) for j in range(3)} - {"c.2.2"}
    report = summary.arrays[0]
    assert (report.objects_written, report.chunks) == (5 * 5 - 1, 86)
    assert_readable(tmp_path / "b", data)


@pytest.mark.filterwarnings("ignore:The data type")
def test_spec_002_vlen_bytes_cells(tmp_path: Path) -> None:
    """zarr-vectors' arrays: vlen-bytes, one cell per inner chunk, b"" for absent cells."""
    import zarr

    arr = tmp_path / "vertices"
    values = np.empty((6, 5, 4), dtype=object)
    for idx in np.ndindex(values.shape):
        values[idx] = b"" if sum(idx) % 3 == 0 else f"{idx}".encode() * (idx[0] + 1)
    created = zarr.create_array(
        str(arr),
        shape=values.shape,
        chunks=(1, 1, 1),
        dtype=zarr.dtype.VariableLengthBytes(),
        fill_value=b"",
    )
    created[...] = values
    original = snapshot(arr)
    summary = shard_store(str(arr), 4)
    assert summary.chunks_moved == len(original) == 80
    assert len(meta(arr)["attributes"][MANIFEST_ATTRIBUTE]) == 80
    assert (zarr.open_array(str(arr), mode="r")[...] == values).all()
    unshard_store(str(arr))
    assert snapshot(arr) == original


def test_idempotent_and_noop(tmp_path: Path) -> None:
    arr = tmp_path / "a"
    make_array(arr, (20, 20), (5, 5))
    assert unshard_store(str(arr)).skipped == [("", "already flat (c/0/1)")]
    shard_store(str(arr), 2)
    before = snapshot(tmp_path, skip=())
    again = shard_store(str(arr), (2, 2))
    assert again.arrays_changed == [] and again.chunks_moved == 0
    assert again.skipped[0][1].startswith("already sharded 2x2")
    assert snapshot(tmp_path, skip=()) == before  # nothing touched


def test_group_tree_and_array_selection(tmp_path: Path) -> None:
    import zarr

    root = tmp_path / "tree"
    group = zarr.open_group(str(root), mode="w")
    group.create_group("empty")
    values = {}
    for name, shape in [("a", (30, 30)), ("sub/b", (17,)), ("sub/deep/c", (9, 9, 9))]:
        values[name] = make_array(root / name, shape, (4,) * len(shape), sparse=False)
    async_found = find_arrays  # the walk does not list chunk folders
    assert async_found is not None
    summary = shard_store(str(root), 2, arrays=["sub/b"])
    assert summary.arrays_changed == ["sub/b"]
    assert meta(root / "a")["codecs"][0]["name"] != "sharding_indexed"
    summary = shard_store(str(root), 2)
    assert summary.arrays_changed == ["a", "sub/deep/c"]
    assert summary.skipped == [("sub/b", "already sharded 2 (c/0)")]
    for name, expected in values.items():
        assert_readable(root / name, expected)
    unshard_store(str(root))
    for name, expected in values.items():
        assert_readable(root / name, expected)
        assert meta(root / name)["chunk_key_encoding"]["configuration"]["separator"] == "/"


@pytest.mark.parametrize(
    ("shape", "chunks", "encoding", "separator"),
    [
        ((), (), "default", "/"),  # 0-d: the kinds switch, v2 <-> default
        ((23,), (5,), "v2", "."),  # 1-d v2 keys: no separator to flip
        ((12, 10), (5, 3), "v2", "."),
        ((12, 10), (5, 3), "v2", "/"),
        ((12, 10), (5, 3), "default", "."),
    ],
)
def test_key_encodings(
    tmp_path: Path, shape: tuple[int, ...], chunks: tuple[int, ...], encoding: str, separator: str
) -> None:
    arr = tmp_path / "a"
    data = make_array(arr, shape, chunks, encoding=encoding, separator=separator, sparse=False)
    original = snapshot(arr)
    shard_store(str(arr), (2,) * len(shape))
    assert_readable(arr, data)
    reshard(str(arr), (3,) * len(shape))  # one pass: the other keys
    assert_readable(arr, data)
    reshard(str(arr), (4,) * len(shape))  # and back
    assert_readable(arr, data)
    unshard_store(str(arr))
    assert_readable(arr, data)
    if encoding == "v2" and len(shape) == 1:
        assert sorted(snapshot(arr).values()) == sorted(original.values())  # keys c/i now
    else:
        assert snapshot(arr) == original


def test_index_options_and_forced_separator(tmp_path: Path) -> None:
    arr = tmp_path / "a"
    data = make_array(arr, (40, 40), (10, 10))
    summary = shard_store(str(arr), 2, separator="/", index_location="start", checksum=False)
    assert summary.arrays[0].passes == 2  # "/" is the current separator: via "."
    config = meta(arr)["codecs"][0]["configuration"]
    assert config["index_location"] == "start" and config["index_codecs"][1:] == []
    assert sorted(snapshot(arr)) == ["c/0/1", "c/1/0", "c/1/1"]  # shard (0, 0) is all fill
    assert_readable(arr, data)
    # only the index changes: a rewrite with the same shard shape
    shard_store(str(arr), 2, index_location="end")
    assert meta(arr)["codecs"][0]["configuration"]["index_location"] == "end"
    assert_readable(arr, data)


def test_manifest_maintained_and_rebuilt(tmp_path: Path) -> None:
    arr = tmp_path / "a"
    make_array(arr, (40, 40), (10, 10))  # chunks (0..1, 0..1) are fill: not stored
    stored = sorted(snapshot(arr))
    shard_store(str(arr), 2)
    manifest = meta(arr)["attributes"][MANIFEST_ATTRIBUTE]
    assert manifest == sorted(cells(stored))
    assert len(manifest) == 12

    doc = meta(arr)
    doc["attributes"][MANIFEST_ATTRIBUTE] = ["0.0"]  # stale
    write_meta(arr, doc)
    summary = shard_store(str(arr), 2, rebuild_manifest=True)
    assert "manifest rebuilt (12 chunks)" in summary.skipped[0][1]
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == manifest
    rebuild_manifest(str(arr))
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == manifest

    unshard_store(str(arr), manifest=False)  # present: kept
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == manifest
    doc = meta(arr)
    del doc["attributes"][MANIFEST_ATTRIBUTE]
    write_meta(arr, doc)
    shard_store(str(arr), 2, manifest=False)  # absent: not added
    assert MANIFEST_ATTRIBUTE not in meta(arr)["attributes"]


def test_manifest_cells_are_relative_to_the_grid_origin(tmp_path: Path) -> None:
    """zarr-vectors' form: cell index plus ``chunk_grid_origin`` (negative here)."""
    arr = tmp_path / "a"
    make_array(arr, (40, 40), (10, 10))  # stores chunks (i, j) outside (0..1, 0..1)
    doc = meta(arr)
    doc["attributes"]["chunk_grid_origin"] = [-2, 5]
    write_meta(arr, doc)
    shard_store(str(arr), 2)
    manifest = meta(arr)["attributes"][MANIFEST_ATTRIBUTE]
    assert "-2.7" in manifest and "1.8" in manifest and "-2.5" not in manifest
    assert manifest == sorted(manifest) and len(manifest) == 12


def test_manifest_of_zarr_vectors_form_is_kept_verbatim(tmp_path: Path) -> None:
    """A ``zarr-vectors`` manifest names cells, not objects: conversions never rewrite it
    (here it lists fewer cells than are stored, and stays so)."""
    arr = tmp_path / "a"
    make_array(arr, (40, 40), (10, 10))
    doc = meta(arr)
    doc["attributes"][MANIFEST_ATTRIBUTE] = ["3.-1", "0.2"]  # unsorted, origin-shifted
    write_meta(arr, doc)
    for convert in (lambda: shard_store(str(arr), 2), lambda: reshard(str(arr), 4)):
        convert()
        assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == ["3.-1", "0.2"]
    unshard_store(str(arr))
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == ["3.-1", "0.2"]


def test_manifest_of_chunk_keys_keeps_its_form(tmp_path: Path) -> None:
    """A manifest of chunk keys (asyncshard 0.1) follows the key encoding, in its form."""
    arr = tmp_path / "a"
    make_array(arr, (40, 40), (10, 10))
    stored = sorted(snapshot(arr))
    doc = meta(arr)
    doc["attributes"][MANIFEST_ATTRIBUTE] = stored
    write_meta(arr, doc)
    shard_store(str(arr), 2, separator=".")
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == sorted(
        k.replace("/", ".") for k in stored
    )
    reshard(str(arr), 4)  # keys kept
    rebuild_manifest(str(arr))
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE][0] == "c.0.2"
    unshard_store(str(arr), separator="/")
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == stored


@pytest.mark.parametrize(
    "value",
    [["c/0/0", "0.1"], ["x.1"], "0.1", [[0, 1]], ["0.1.2"], ["0." + "1" * 5000]],  # no int()
)
def test_manifest_in_an_unknown_form_is_left_alone(tmp_path: Path, value: Any) -> None:
    """Neither form (mixed, not integers, not a list, wrong arity): untouched, warned
    about, and the report says so; rebuilding refuses too."""
    arr = tmp_path / "a"
    data = make_array(arr, (40, 40), (10, 10))
    doc = meta(arr)
    doc["attributes"][MANIFEST_ATTRIBUTE] = value
    write_meta(arr, doc)
    with pytest.warns(ManifestWarning, match="left unchanged"):
        summary = shard_store(str(arr), 2)
    assert "nonempty_chunks left unchanged" in str(summary)
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == value
    assert_readable(arr, data)
    summary = rebuild_manifest(str(arr))
    assert summary.skipped[0][1].startswith("nonempty_chunks")
    assert meta(arr)["attributes"][MANIFEST_ATTRIBUTE] == value


@pytest.mark.filterwarnings("ignore:Consolidated metadata")
def test_consolidated_metadata_follows(tmp_path: Path) -> None:
    import zarr

    root = tmp_path / "g"
    group = zarr.open_group(str(root), mode="w")
    group.create_group("sub")
    data = make_array(root / "sub" / "x", (20, 20), (5, 5))
    zarr.consolidate_metadata(str(root))
    shard_store(str(root), 2)
    consolidated = meta(root)["consolidated_metadata"]["metadata"]["sub/x"]
    assert consolidated == meta(root / "sub" / "x")
    reopened = zarr.open_group(str(root), mode="r")
    np.testing.assert_array_equal(reopened["sub/x"][...], data)


async def test_memory_store_round_trip_and_progress() -> None:
    store = MemoryStore()
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [64, 64],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }
    await store.set("x/zarr.json", json.dumps(doc).encode())
    objects = {f"x/c/{i}/{j}": bytes([i * 8 + j]) * 64 for i in range(8) for j in range(8)}
    for key, value in objects.items():
        await store.set(key, value)
    events: list[Any] = []
    summary = await shard_store_async(store, 4, max_in_flight=1, progress=events.append)
    assert summary.chunks_moved == 64
    started = [e for e in events if isinstance(e, PassStarted)]
    assert [e.tasks for e in started] == [4, 4]  # keys kept: the shards copied back
    assert sum(isinstance(e, TaskDone) for e in events) == 8
    await reshard_async(store, 8)
    await unshard_store_async(store)
    after = await store_snapshot(store, "x/")
    after.pop("zarr.json")
    assert after == {k[2:]: v for k, v in objects.items()}


async def test_junk_in_target_key_space_is_refused(tmp_path: Path) -> None:
    arr = tmp_path / "a"
    make_array(arr, (20, 20), (5, 5))
    (arr / "0").mkdir()
    (arr / "0" / "0").write_bytes(b"not ours")  # a staging key: i/j
    with pytest.raises(ConversionError, match=r"already use the target keys \(e.g. 0/0\)"):
        await shard_store_async(LocalStore(arr), 2)


def test_unsupported_arrays_are_skipped_with_a_reason(tmp_path: Path) -> None:
    arr = tmp_path / "a"
    make_array(arr, (20, 20), (5, 5))
    doc = meta(arr)
    doc["chunk_grid"] = {"name": "rectilinear", "configuration": {}}
    (arr / "zarr.json").write_text(json.dumps(doc))
    summary = shard_store(str(tmp_path), 2)
    assert summary.skipped == [
        ("a", "chunk_grid.name: only 'regular' is supported, got 'rectilinear'")
    ]
    with pytest.raises(NothingToConvertError, match="no Zarr v3 array at missing, b in"):
        shard_store(str(tmp_path), 2, arrays=["a", "missing", "b"])
    assert meta(arr)["chunk_grid"]["name"] == "rectilinear", "nothing converted"


def test_sync_api_refuses_a_running_loop() -> None:
    import asyncio

    async def inner() -> None:
        with pytest.raises(RuntimeError, match="_async"):
            shard_store("memory://", 2)

    asyncio.run(inner())


async def test_manifest_rebuild_refuses_an_index_pointing_past_the_shard() -> None:
    """Index-only reads are checked against the whole object's size, not trusted."""
    from asyncshard.backends import MemoryStore
    from asyncshard.convert.zarr import rebuild_manifest_async
    from asyncshard.formats.zarr3.shard import IndexLayout, empty_index, encode_index
    from tests.zarr.helpers import array_doc

    store = MemoryStore()
    await store.set("arr/zarr.json", json.dumps(array_doc([8, 8], [8, 8], [4, 4])).encode())
    layout = IndexLayout((2, 2))
    index = empty_index(layout)
    index[0, 0] = (0, 4096)  # the shard holds 16 data bytes
    await store.set("arr/c/0/0", b"x" * 16 + encode_index(index, layout))
    summary = await rebuild_manifest_async(store)
    [report] = summary.arrays
    assert report.action == "skipped"
    assert "arr/c/0/0" in report.reason and "outside the data region" in report.reason
    doc = json.loads(bytes(await store.get("arr/zarr.json") or b"{}"))
    assert "nonempty_chunks" not in doc.get("attributes", {})  # no manifest built on it
