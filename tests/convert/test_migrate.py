"""Conversion into another store: OME-Zarr 0.4 (Zarr v2) to sharded OME-Zarr 0.5."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncshard.convert import shard_store
from asyncshard.convert.journal import JOURNAL_NAME
from asyncshard.errors import ConversionError, InvalidMetadataError, NothingToConvertError
from tests.convert.helpers import make_array, read_zarr
from tests.convert.ome_data import (
    assert_same_arrays,
    tree_digest,
    write_image_04,
    write_plate_04,
)

SMALL_SHARDS = 64 * 1024


@pytest.fixture(scope="module")
def image_04(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray[Any, Any]]:
    path = tmp_path_factory.mktemp("ome") / "image.zarr"
    return path, write_image_04(path)


@pytest.fixture(scope="module")
def plate_04(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("ome") / "plate.zarr"
    return path, write_plate_04(path)


def _doc(path: Path) -> dict[str, Any]:
    return dict(json.loads((path / "zarr.json").read_text()))


def test_image_with_labels_becomes_valid_sharded_0_5(
    image_04: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path
) -> None:
    import zarr
    from ome_zarr_models.v05.image import Image
    from ome_zarr_models.v05.image_label import ImageLabel

    source, data = image_04
    before = tree_digest(source)
    dest = tmp_path / "image.ome.zarr"
    summary = shard_store(source, "auto", to=dest, shard_bytes=SMALL_SHARDS)

    assert tree_digest(source) == before  # the source is untouched
    paths = assert_same_arrays(source, dest)
    assert sorted(summary.arrays_changed) == sorted(paths)
    assert summary.chunks_moved > 0 and not summary.skipped

    Image.from_zarr(zarr.open_group(str(dest), mode="r"))
    ImageLabel.from_zarr(zarr.open_group(str(dest / "labels" / "cells"), mode="r"))
    attrs = _doc(dest)["attributes"]
    assert attrs["ome"]["version"] == "0.5"
    assert attrs["ome"]["omero"]["channels"][1]["label"] == "GFP"
    assert "version" not in attrs["ome"]["multiscales"][0]
    label = _doc(dest / "labels" / "cells")["attributes"]["ome"]
    assert label["image-label"]["colors"][0]["rgba"] == [255, 0, 0, 255]
    assert _doc(dest / "labels")["attributes"]["ome"]["labels"] == ["cells"]
    assert _doc(dest / "s0")["dimension_names"] == ["c", "z", "y", "x"]
    assert _doc(dest / "labels" / "cells" / "s0")["dimension_names"] == ["z", "y", "x"]
    np.testing.assert_array_equal(zarr.open_array(str(dest / "s0"), mode="r")[...], data)


def test_ome_zarr_py_reads_the_copy(
    image_04: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path
) -> None:
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    source, data = image_04
    dest = tmp_path / "image.ome.zarr"
    shard_store(source, "auto", to=dest, shard_bytes=SMALL_SHARDS)
    location = parse_url(str(dest))
    assert location is not None and location.version == "0.5"
    image = next(iter(Reader(location)()))
    np.testing.assert_array_equal(np.asarray(image.data[0]), data)
    assert len(image.data) == 3
    assert [a["name"] for a in image.metadata["axes"]] == ["c", "z", "y", "x"]


def test_plate_becomes_valid_0_5(plate_04: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    import zarr
    from ome_zarr_models.v05.hcs import HCS
    from ome_zarr_models.v05.well import Well

    source, fields = plate_04
    before = tree_digest(source)
    dest = tmp_path / "plate.ome.zarr"
    shard_store(source, 2, to=dest)
    assert tree_digest(source) == before
    assert_same_arrays(source, dest)
    HCS.from_zarr(zarr.open_group(str(dest), mode="r"))
    Well.from_zarr(zarr.open_group(str(dest / "A" / "1"), mode="r"))
    plate = _doc(dest)["attributes"]["ome"]
    assert plate["version"] == "0.5" and "version" not in plate["plate"]
    assert [w["path"] for w in plate["plate"]["wells"]] == ["A/1", "A/2"]
    for path, data in fields.items():
        level0 = zarr.open_array(str(dest / path / "s0"), mode="r")
        np.testing.assert_array_equal(level0[...], data)


def test_rerun_is_idempotent(image_04: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path) -> None:
    source, _ = image_04
    dest = tmp_path / "image.ome.zarr"
    shard_store(source, "auto", to=dest, shard_bytes=SMALL_SHARDS)
    written = tree_digest(dest)
    again = shard_store(source, "auto", to=dest, shard_bytes=SMALL_SHARDS)
    assert again.arrays_changed == [] and again.bytes_moved == 0
    assert all(reason.startswith("already") for _, reason in again.skipped)
    assert tree_digest(dest) == written


def test_checks_come_before_any_write(
    image_04: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path
) -> None:
    source, _ = image_04
    dest = tmp_path / "image.ome.zarr"
    shard_store(source, 4, to=dest)
    with pytest.raises(ConversionError, match="already holds a different array"):
        shard_store(source, 2, to=dest)  # another shard shape over a finished copy
    with pytest.raises(ConversionError, match="the destination is the source"):
        shard_store(source, 2, to=source)
    with pytest.raises(ConversionError, match="inside one another"):
        shard_store(source, 2, to=source / "sharded")
    assert not (source / "sharded").exists()
    (tmp_path / "link").symlink_to(source)
    with pytest.raises(ConversionError, match="inside one another"):
        shard_store(source, 2, to=tmp_path / "link" / "sharded")
    with pytest.raises(ConversionError, match="--to DEST"):
        shard_store(source, 2)  # v2 is never converted in place
    with pytest.raises(NothingToConvertError):
        shard_store(tmp_path / "empty", 2, to=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_other_ome_versions_are_refused_before_writing(tmp_path: Path) -> None:
    import zarr

    source = tmp_path / "old.zarr"
    root = zarr.open_group(str(source), mode="w", zarr_format=2)
    root.create_array("0", shape=(4, 4), chunks=(2, 2), dtype="u1")
    root.attrs["multiscales"] = [
        {"version": "0.3", "axes": ["y", "x"], "datasets": [{"path": "0"}]}
    ]
    dest = tmp_path / "out.zarr"
    with pytest.raises(InvalidMetadataError, match=r"OME-Zarr 0\.3 is not migrated"):
        shard_store(source, 2, to=dest)
    assert not dest.exists()


def _shards(dest: Path) -> int:
    return sum(1 for p in dest.rglob("*") if p.is_file() and "c" in p.relative_to(dest).parts)


def test_kill_9_during_an_ome_conversion_then_rerun(tmp_path: Path) -> None:
    """A conversion killed mid-way leaves no root document (groups go last); a rerun
    finishes it: valid 0.5, data equal, source untouched, no journal left."""
    import zarr
    from ome_zarr_models.v05.image import Image
    from ome_zarr_models.v05.image_label import ImageLabel

    source = tmp_path / "image.zarr"
    write_image_04(source, shape=(2, 32, 256, 256))
    before = tree_digest(source)
    dest = tmp_path / "image.ome.zarr"
    command = [
        sys.executable,
        "-c",
        "from asyncshard.cli import main; main()",
        "shard",
        str(source),
        "auto",
        "--to",
        str(dest),
        "--shard-bytes",
        "16KiB",  # one 16 KiB chunk per shard: many shards
        "-j",
        "1",
        "-q",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _shards(dest) < 100:
        assert proc.poll() is None, "the conversion ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (dest / "zarr.json").exists()
    assert list(dest.rglob(JOURNAL_NAME))  # the array in flight has its journal

    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert tree_digest(source) == before
    assert not list(dest.rglob(JOURNAL_NAME))
    assert_same_arrays(source, dest)
    Image.from_zarr(zarr.open_group(str(dest), mode="r"))
    ImageLabel.from_zarr(zarr.open_group(str(dest / "labels" / "cells"), mode="r"))


def test_on_dask(
    image_04: tuple[Path, np.ndarray[Any, Any]], dask_client: Any, tmp_path: Path
) -> None:
    source, _ = image_04
    dest = tmp_path / "image.ome.zarr"
    summary = shard_store(
        f"file://{source}",
        "auto",
        to=f"file://{dest}",
        shard_bytes=SMALL_SHARDS,
        client=dask_client,
    )
    assert summary.chunks_moved > 0
    assert_same_arrays(source, dest)


def test_the_command(image_04: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from asyncshard.cli import cli

    source, _ = image_04
    dest = tmp_path / "out.zarr"
    runner = CliRunner()
    done = runner.invoke(cli, ["shard", str(source), "2", "--to", str(dest), "--json"])
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout)  # one JSON document, nothing else on stdout
    assert len(summary["arrays_changed"]) == 6 and not summary["in_place"]
    assert (summary["location"], summary["destination"]) == (f"file://{source}", f"file://{dest}")
    assert {(a["format"], a["ome"]) for a in summary["arrays"]} == {("Zarr v2 → v3", "0.4 → 0.5")}
    assert all(a["shards"] > 0 for a in summary["arrays"])
    text = runner.invoke(cli, ["shard", str(source), "2", "--to", str(tmp_path / "b.zarr")])
    *arrays, total = text.stdout.splitlines()
    assert len(arrays) == 6 and "removed" not in text.stdout
    assert all(
        line.split(": ", 1)[1].startswith("Zarr v2 → v3, OME-Zarr 0.4 → 0.5, flat → sharded (")
        and " chunks copied into " in line
        for line in arrays
    ), arrays
    assert total.startswith(
        f"Total: 6 arrays copied from file://{source} to file://{tmp_path / 'b.zarr'} "
        "(the source is unchanged); "
    ), total
    in_place = runner.invoke(cli, ["reshard", str(dest), "1", "--json", "-q"])
    summary = json.loads(in_place.stdout)  # the copy, now OME-Zarr 0.5 in Zarr v3
    assert {(a["format"], a["ome"]) for a in summary["arrays"]} == {("Zarr v3", "0.5")}
    refused = runner.invoke(
        cli, ["shard", str(source), "2", "--to", str(dest), "--to-option", "x=1"]
    )
    assert refused.exit_code == 2 and "UnknownOptionError" in refused.output
    usage = runner.invoke(cli, ["shard", str(source), "2", "--to-option", "x=1"])
    assert usage.exit_code == 2 and "need --to DEST" in usage.output
    usage = runner.invoke(cli, ["shard", str(source), "2", "--to", str(dest), "--rebuild-manifest"])
    assert usage.exit_code == 2 and "in-place" in usage.output


def test_reshard_into_another_store(tmp_path: Path) -> None:
    """``reshard SRC SHAPE --to DEST`` writes the resharded copy and leaves SRC as it
    was; ``none`` (unsharding) into another store is refused before anything is written,
    by the command and by the function."""
    import zarr
    from click.testing import CliRunner

    from asyncshard.cli import cli
    from asyncshard.convert import reshard

    source, dest = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    data = np.arange(48 * 32, dtype=np.uint16).reshape(48, 32)
    zarr.create_array(
        str(source), shape=data.shape, dtype=data.dtype, chunks=(8, 8), shards=(16, 16)
    )[...] = data
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    runner = CliRunner()
    done = runner.invoke(cli, ["reshard", str(source), "4,2", "--to", str(dest), "-q"])
    assert done.exit_code == 0, done.output
    copy = zarr.open_array(str(dest), mode="r")
    assert copy.shards == (32, 16) and copy.chunks == (8, 8)
    np.testing.assert_array_equal(copy[...], data)
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before
    other = tmp_path / "unsharded.zarr"
    refused = runner.invoke(cli, ["reshard", str(source), "none", "--to", str(other)])
    assert refused.exit_code == 2 and "in place only" in refused.output
    with pytest.raises(ValueError, match="in place only"):
        reshard(str(source), None, to=str(other))
    assert not other.exists()
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(("separator", "asked"), [(".", None), ("/", None), ("/", ".")])
def test_a_v3_copy_keeps_the_source_keys(tmp_path: Path, separator: str, asked: str | None) -> None:
    """A v3 array sharded into another store keeps its separator unless asked for one."""
    source, dest = tmp_path / "src", tmp_path / "dst"
    data = make_array(source, (20, 20), (5, 5), separator=separator)
    shard_store(str(source), 2, to=str(dest), separator=asked)
    keys = json.loads((dest / "zarr.json").read_text())["chunk_key_encoding"]
    assert keys == {"name": "default", "configuration": {"separator": asked or separator}}
    np.testing.assert_array_equal(read_zarr(dest), data)


def test_bioformats2raw_layout(tmp_path: Path) -> None:
    """The layout's root and OME group move under ``ome``; METADATA.ome.xml is copied."""
    import zarr
    from ome_zarr_models.v05.image import Image

    source = tmp_path / "layout.zarr"
    write_image_04(source / "0", labels=False)
    root = zarr.open_group(str(source), mode="a", zarr_format=2)
    root.attrs["bioformats2raw.layout"] = 3
    meta = root.require_group("OME")
    meta.attrs["series"] = ["0"]
    (source / "OME" / "METADATA.ome.xml").write_text("<OME/>")
    dest = tmp_path / "layout.ome.zarr"
    shard_store(source, "auto", to=dest)
    assert _doc(dest)["attributes"] == {"ome": {"version": "0.5", "bioformats2raw.layout": 3}}
    assert _doc(dest / "OME")["attributes"] == {"ome": {"version": "0.5", "series": ["0"]}}
    assert (dest / "OME" / "METADATA.ome.xml").read_text() == "<OME/>"
    Image.from_zarr(zarr.open_group(str(dest / "0"), mode="r"))


def test_plain_groups_keep_attributes_with_ome_names(tmp_path: Path) -> None:
    import zarr

    source = tmp_path / "plain.zarr"
    root = zarr.open_group(str(source), mode="w", zarr_format=2)
    root.create_array("a", shape=(4,), chunks=(2,), dtype="u1")
    root.attrs.update({"labels": ["cat", "dog"], "well": "A1"})
    shard_store(source, 2, to=tmp_path / "out")
    assert _doc(tmp_path / "out")["attributes"] == {"labels": ["cat", "dog"], "well": "A1"}


def test_unknown_v2_codec_and_stray_objects_fail_before_writing(tmp_path: Path) -> None:
    import zarr

    source = tmp_path / "src.zarr"
    root = zarr.open_group(str(source), mode="w", zarr_format=2)
    root.create_array("a", shape=(4,), chunks=(2,), dtype="u1")[...] = 1
    root.create_array("b", shape=(4,), chunks=(2,), dtype="u1")[...] = 2
    zarray = json.loads((source / "b" / ".zarray").read_text())
    zarray["compressor"] = {"id": "no-such-codec"}
    (source / "b" / ".zarray").write_text(json.dumps(zarray))
    dest = tmp_path / "dst.zarr"
    with pytest.raises(InvalidMetadataError, match="array b: its v2 codecs cannot be decoded"):
        shard_store(source, 2, to=dest)
    assert not dest.exists()

    (source / "b" / ".zarray").write_text(json.dumps({**zarray, "compressor": None}))
    (dest / "b" / "c").mkdir(parents=True)
    (dest / "b" / "c" / "9").write_bytes(b"someone else's")
    with pytest.raises(ConversionError, match="no conversion journal accounts for it"):
        shard_store(source, 2, to=dest)
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == ["9"]


def test_a_runner_that_ignores_the_source_cannot_switch(
    image_04: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path
) -> None:
    """A custom runner written before Job.source read nothing: the copy refuses to
    switch rather than publish arrays of fill values."""
    from asyncshard.convert.runner import Job, run_tasks

    class OldRunner:
        async def run(self, job: Job) -> None:
            await run_tasks(job.spec.executor(job.store), job.tasks, job.on_result, 4)

    source, _ = image_04
    dest = tmp_path / "out.zarr"
    with pytest.raises(ConversionError, match="source chunks reached the destination"):
        shard_store(source, 2, to=dest, runner=OldRunner())
    assert not list(dest.rglob("zarr.json"))
    shard_store(source, 2, to=dest)  # a normal rerun finishes it
    assert_same_arrays(source, dest)


def test_reshard_into_another_store_counts_the_shards_written(tmp_path: Path) -> None:
    """A reshard copy that splits each source shard into several (128³ array, 16³ chunks,
    4³ chunks per shard -> 2³) reports the 64 shards it wrote, as an in-place one does,
    not the 8 source shards it read."""
    import zarr
    from click.testing import CliRunner

    from asyncshard.cli import cli

    source = tmp_path / "src.zarr"
    zarr.create_array(
        str(source), shape=(128,) * 3, dtype="uint8", chunks=(16,) * 3, shards=(64,) * 3
    )[...] = 1
    runner = CliRunner()
    copied = runner.invoke(cli, ["reshard", str(source), "2", "--to", str(tmp_path / "d.zarr")])
    assert copied.exit_code == 0, copied.output
    written = [p for p in (tmp_path / "d.zarr" / "c").rglob("*") if p.is_file()]
    assert len(written) == 64
    assert "512 chunks in 64 shards" in copied.output
    in_place = runner.invoke(cli, ["reshard", str(source), "2", "--json", "-q"])
    assert json.loads(in_place.stdout)["arrays"][0]["shards"] == 64
