"""The shard/unshard/reshard commands, invoked through click's runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from asyncshard.convert.command import commands, reshard, shard, unshard
from tests.convert.helpers import assert_readable, make_array, snapshot


def invoke(command: click.Command, *args: str) -> Result:
    return CliRunner().invoke(command, list(args), catch_exceptions=False)


def test_shard_reshard_unshard(tmp_path: Path) -> None:
    arr = tmp_path / "vol" / "arr"
    data = make_array(arr, (40, 30), (5, 5))
    original = snapshot(arr)
    url = str(tmp_path / "vol")

    result = invoke(shard, url, "2")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "arr: Zarr v3, flat → sharded (2x2 chunks per shard): 44 chunks moved into 11 "
        "shards, 55 superseded objects removed, "
    ), lines  # keys kept: no key change named
    assert lines[0].endswith("written in 2 passes")
    assert lines[1].startswith(f"Total: 1 array converted in place at file://{url}; ")
    assert "44 chunks in 11 shards" in lines[1] and len(lines) == 2
    assert "B/s" not in result.stderr  # no progress bar where stderr is no terminal
    assert "pass 1/2" in result.stderr  # but each pass is named
    assert_readable(arr, data)

    result = invoke(reshard, url, "1", "--progress", "-j", "2")  # bars asked for
    assert result.exit_code == 0, result.output
    assert "shard" in result.stderr and "B/s" in result.stderr  # the progress bar

    result = invoke(shard, url, "2", "--quiet")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")

    args = ["4,1", "--separator", ".", "--json", "-q", "-j", "2"]
    result = invoke(reshard, f"file://{tmp_path / 'vol'}", *args)
    summary = json.loads(result.stdout)  # another separator: keys disjoint, one pass
    assert summary["arrays_changed"] == ["arr"] and summary["arrays"][0]["passes"] == 1
    assert summary["arrays"][0]["target"] == "sharded 4x1 (c.0.1)"
    assert summary["arrays"][0]["format"] == "Zarr v3" and summary["arrays"][0]["shards"] == 12
    assert summary["in_place"] and summary["destination"] is None
    assert summary["location"] == f"file://{tmp_path / 'vol'}"
    assert result.stderr == ""
    assert_readable(arr, data)

    result = invoke(unshard, url, "--array", "arr", "--separator", "/")
    first = result.stdout.splitlines()[0]
    assert (
        result.exit_code == 0
        and "sharded (4x1 chunks per shard) → flat, chunk keys c.0.1 → c/0/1" in first
    )
    assert "44 chunks moved, one object each" in first and "passes" not in first
    assert snapshot(arr) == original
    result = invoke(reshard, url, "none", "-q", "--json")
    assert json.loads(result.stdout)["skipped"] == [
        {"path": "arr", "reason": "already flat (c/0/1)"}
    ]


def test_usage_errors(tmp_path: Path) -> None:
    make_array(tmp_path / "a", (10, 10), (5, 5))
    assert invoke(shard, str(tmp_path)).exit_code == 2  # SHAPE is required for Zarr
    result = invoke(shard, str(tmp_path), "2,x")
    assert result.exit_code == 2 and "chunks per shard" in result.output
    assert invoke(shard, str(tmp_path), "0").exit_code == 2
    result = invoke(shard, str(tmp_path), "2,2,2")  # a 3-d SHAPE for a 2-d array
    assert result.exit_code == 1 and "ShardShapeError" in result.output
    assert "array 'a'" in result.output and "the array 2" in result.output
    result = invoke(shard, "nope://x", "2")
    assert result.exit_code == 2 and "UnknownSchemeError" in result.output
    assert [c.name for c in commands()] == ["shard", "unshard", "reshard"]


@pytest.mark.parametrize("command", ["shard", "unshard", "reshard"])
def test_a_location_without_arrays_fails(tmp_path: Path, command: str) -> None:
    """Nothing to convert is an error (exit 1), unlike arrays already in the layout."""
    (tmp_path / "notes.txt").write_text("no array here")
    args = {"shard": ["2"], "unshard": [], "reshard": ["2"]}[command]
    by_name = {c.name: c for c in commands()}
    result = invoke(by_name[command], str(tmp_path), *args)
    assert result.exit_code == 1 and "NothingToConvertError" in result.output
    assert str(tmp_path) in result.output
    make_array(tmp_path / "a", (10, 10), (5, 5))
    assert invoke(unshard, str(tmp_path)).exit_code == 0  # flat already: nothing to do


@pytest.mark.parametrize("command", ["shard", "unshard", "reshard"])
@pytest.mark.parametrize("quiet", [[], ["-q"]])
def test_an_array_path_that_names_nothing_fails(
    tmp_path: Path, command: str, quiet: list[str]
) -> None:
    """``-a`` naming no array fails (exit 1, one line on stderr, with -q too) before
    anything is converted, as ``verify -a`` refuses it; so does a URL that does not
    exist."""
    make_array(tmp_path / "a", (10, 10), (5, 5))
    make_array(tmp_path / "s", (10, 10), (5, 5))
    assert invoke(shard, str(tmp_path / "s"), "2", "-q").exit_code == 0
    before = snapshot(tmp_path)
    args = {"shard": ["2"], "unshard": [], "reshard": ["2"]}[command]
    by_name = {c.name: c for c in commands()}
    for url, arrays, named in [
        (tmp_path, ["a", "s", "typo"], "typo"),
        (tmp_path / "missing", ["a"], "a"),
        (tmp_path, ["/"], "/"),  # the root is a group
    ]:
        flags = [arg for a in arrays for arg in ("-a", a)]
        result = invoke(by_name[command], str(url), *args, *flags, *quiet)
        assert result.exit_code == 1 and result.stdout == "", result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert f"NothingToConvertError: no Zarr v3 array at {named} in file://{url}" in lines[0]
    assert snapshot(tmp_path) == before, "nothing converted"


def test_sharding_is_refused_where_it_does_not_apply(tmp_path: Path) -> None:
    """``--sharding`` sets the sharding of precomputed scales in place: a usage error
    for Zarr arrays and with --to, not an option silently ignored."""
    make_array(tmp_path / "a", (10, 10), (5, 5))
    before = snapshot(tmp_path)
    spec = json.dumps({"@type": "neuroglancer_uint64_sharded_v1"})
    for args in [["2", "--sharding", spec], ["2", "--sharding", spec, "--to", str(tmp_path / "d")]]:
        result = invoke(shard, str(tmp_path), *args)
        assert result.exit_code == 2, result.output
        assert "--sharding applies to precomputed volumes sharded in place" in result.stderr
    assert snapshot(tmp_path) == before and not (tmp_path / "d").exists()


def write_precomputed(root: Path) -> None:
    """An unsharded precomputed volume of 64 chunks, written by tensorstore."""
    import tensorstore as ts

    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(root)},
        "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
        "scale_metadata": {"size": [20, 20, 20], "chunk_size": [5, 5, 5], "encoding": "raw"},
        "create": True,
    }
    store = ts.open(spec).result()
    store.write(1).result()


def test_precomputed_is_detected(tmp_path: Path) -> None:
    root = tmp_path / "vol"
    write_precomputed(root)
    original = snapshot(root, skip=("info",))
    sharding = json.dumps(
        {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 0,
            "hash": "identity",
            "minishard_bits": 1,
            "shard_bits": 3,
        }
    )
    result = invoke(shard, str(root), "--sharding", sharding, "-q", "--json")
    assert json.loads(result.stdout)["chunks_moved"] == 64
    assert len(snapshot(root, skip=("info",))) == 8
    assert invoke(shard, str(root), "4").exit_code == 2  # precomputed takes --sharding
    (scale,) = json.loads((root / "info").read_text())["scales"]
    sharded = snapshot(root)
    result = invoke(unshard, str(root), "-a", scale["key"], "-a", "typo", "-q")
    assert result.exit_code == 1 and "info has no scale with key 'typo'" in result.stderr
    assert snapshot(root) == sharded, "nothing converted"
    assert invoke(unshard, str(root), "-q").exit_code == 0
    assert snapshot(root, skip=("info",)) == original


def test_dask_scheduler_flag(dask_client: Any, tmp_path: Path) -> None:
    arr = tmp_path / "arr"
    data = make_array(arr, (30, 30), (5, 5))
    address = dask_client.scheduler.address
    result = invoke(shard, str(arr), "3", "--dask-scheduler", address, "-q", "--json")
    assert json.loads(result.stdout)["arrays_changed"] == [""]
    assert_readable(arr, data)
    result = invoke(shard, str(arr), "3", "--dask-scheduler", address, "--dask-workers", "2")
    assert result.exit_code == 2


@pytest.mark.parametrize("volume", ["zarr", "precomputed"])
def test_a_command_opens_its_store_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, volume: str
) -> None:
    """The URL is opened once: the format is detected on that store and the conversion
    runs on it (a second open could lose an option on the way)."""
    import asyncshard.backends.registry as registry

    opened_urls: list[str] = []
    real = registry.open_store

    def counting(location: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(location, str):
            opened_urls.append(location)
        return real(location, *args, **kwargs)

    monkeypatch.setattr(registry, "open_store", counting)
    if volume == "zarr":
        make_array(tmp_path / "vol" / "arr", (20, 20), (5, 5))
        result = invoke(shard, str(tmp_path / "vol"), "2", "-q")
    else:
        write_precomputed(tmp_path / "vol")
        result = invoke(shard, str(tmp_path / "vol"), "-q")
    assert result.exit_code == 0, result.output
    assert opened_urls == [str(tmp_path / "vol")]
