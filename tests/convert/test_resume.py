"""Interrupted conversions: the array stays readable, a second run completes the work."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncshard.backends import LocalStore
from asyncshard.backends.local import TMP_PREFIX
from asyncshard.convert import (
    ConversionError,
    ConversionSummary,
    reshard_async,
    shard_store_async,
    unshard_store_async,
)
from asyncshard.convert.journal import JOURNAL_NAME
from asyncshard.store import Store
from tests.convert.helpers import Crash, CrashingStore, assert_readable, make_array, snapshot

Step = Callable[[Store], Awaitable[ConversionSummary]]
STEPS: list[tuple[str, Step]] = [
    ("shard 2", lambda s: shard_store_async(s, 2, max_in_flight=2)),
    ("reshard 3x1", lambda s: reshard_async(s, (3, 1), max_in_flight=2)),
    # each 3x1 shard alone feeds three 1x1 shards: split tasks, several writes each
    ("reshard 1x1", lambda s: reshard_async(s, 1, max_in_flight=2)),
    ("unshard", lambda s: unshard_store_async(s, max_in_flight=2)),
]


def sample(tmp_path: Path, separator: str = "/") -> tuple[Path, np.ndarray[Any, Any]]:
    arr = tmp_path / "a"
    return arr, make_array(arr, (46, 38), (6, 6), separator=separator)  # 8x7 chunks, 52 stored


@pytest.mark.parametrize("separator", ["/", "."])
@pytest.mark.parametrize(
    ("what", "n"),
    [("puts", n) for n in (0, 1, 4, 9, 15, 22, 40)] + [("deletes", n) for n in (0, 7, 30, 60)],
)
async def test_crash_anywhere_then_rerun(tmp_path: Path, what: str, n: int, separator: str) -> None:
    """Crash at the n-th write (or delete) of every step of flat -> sharded -> resharded
    -> flat, with default arguments (two passes each: the keys are kept): zarr-python and
    tensorstore read the right values right after the crash, a second run finishes, and
    the final objects equal the original ones."""
    arr, data = sample(tmp_path, separator)
    original = snapshot(arr)
    crashes = 0
    for name, step in STEPS:
        crashing = CrashingStore(LocalStore(arr), **{what: n})
        try:
            await step(crashing)
        except Crash:
            crashes += 1
            crashed = True
            assert (arr / JOURNAL_NAME).exists() or (what == "puts" and n == 0), name
        else:
            crashed = False
        assert_readable(arr, data)
        summary = await step(LocalStore(arr))
        assert bool(summary.arrays_changed) == crashed, (name, summary.skipped)
        assert not (arr / JOURNAL_NAME).exists()
        assert_readable(arr, data)
    assert crashes >= 1
    assert snapshot(arr) == original


async def test_resume_keeps_the_shards_already_written(tmp_path: Path) -> None:
    arr, data = sample(tmp_path)
    with pytest.raises(Crash):
        await shard_store_async(
            CrashingStore(LocalStore(arr), puts=3, match=lambda k: k.startswith("c.")),
            2,
            separator=".",  # keys disjoint from the flat ones: one pass
            max_in_flight=1,
        )
    written = sorted(p.name for p in arr.iterdir() if p.name.startswith("c."))
    assert len(written) == 3
    assert json.loads((arr / "zarr.json").read_text())["codecs"][0]["name"] != "sharding_indexed"
    summary = await shard_store_async(LocalStore(arr), 2, separator=".")
    report = summary.arrays[0]
    assert report.resumed and report.action == "converted"
    assert report.objects_written == 4 * 4 - 1 - 3  # 15 shards hold data, 3 were there
    assert report.chunks == 52  # the manifest still lists every chunk
    assert len(json.loads((arr / "zarr.json").read_text())["attributes"]["nonempty_chunks"]) == 52
    assert_readable(arr, data)


async def test_resume_of_a_split_keeps_the_targets_already_written(tmp_path: Path) -> None:
    """A source shard cut into smaller shards (one task, several writes) interrupted
    midway: the rerun writes only the targets still missing."""
    arr, data = sample(tmp_path)
    await shard_store_async(LocalStore(arr), 4, separator=".")  # 2x2 shards of 4x4 chunks
    with pytest.raises(Crash):  # the first source's 2x2 targets: one empty, three written
        await reshard_async(
            CrashingStore(LocalStore(arr), puts=3, match=lambda k: k.startswith("c/")),
            2,
            separator="/",
            max_in_flight=1,
        )
    assert len(list((arr / "c").rglob("*"))) == 2 + 3  # two folders, three shards
    assert_readable(arr, data)
    summary = await reshard_async(LocalStore(arr), 2, separator="/")
    report = summary.arrays[0]
    assert report.resumed and report.action == "converted"
    assert report.objects_written == 4 * 4 - 1 - 3  # 15 shards hold data, 3 were there
    assert report.chunks == 52
    assert_readable(arr, data)


async def test_crash_after_the_switch_finishes_the_cleanup(tmp_path: Path) -> None:
    arr, data = sample(tmp_path)
    with pytest.raises(Crash):
        await shard_store_async(CrashingStore(LocalStore(arr), deletes=10), 2, separator=".")
    doc = json.loads((arr / "zarr.json").read_text())
    assert doc["codecs"][0]["name"] == "sharding_indexed"  # switched
    assert (arr / "c").exists()  # 42 old chunks still there, unread by anyone
    assert_readable(arr, data)
    # what a run killed between removing a folder's last chunk and the folder leaves
    (arr / "c" / "7" / "9").mkdir(parents=True)
    summary = await shard_store_async(LocalStore(arr), 2, separator=".")
    assert summary.arrays[0].resumed and summary.arrays[0].objects_deleted == 42
    assert not (arr / "c").exists() and not (arr / JOURNAL_NAME).exists()


async def test_crash_in_the_second_pass_of_a_reshard(tmp_path: Path) -> None:
    arr, data = sample(tmp_path)
    await shard_store_async(LocalStore(arr), 2, separator=".")  # keys c.i.j
    with pytest.raises(Crash):  # pass 1 writes c/i/j, pass 2 copies them back to c.i.j
        await reshard_async(
            CrashingStore(LocalStore(arr), puts=2, match=lambda k: k.startswith("c.")), 4
        )
    doc = json.loads((arr / "zarr.json").read_text())
    assert doc["chunk_key_encoding"]["configuration"]["separator"] == "/"  # the midpoint
    assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [24, 24]
    assert_readable(arr, data)
    summary = await reshard_async(LocalStore(arr), 4)
    assert summary.arrays[0].resumed and summary.arrays[0].objects_written == 2
    doc = json.loads((arr / "zarr.json").read_text())
    assert doc["chunk_key_encoding"]["configuration"]["separator"] == "."
    assert len(doc["attributes"]["nonempty_chunks"]) == 52
    assert sorted(p.name for p in arr.iterdir()) == [
        "c.0.0",
        "c.0.1",
        "c.1.0",
        "c.1.1",
        "zarr.json",
    ]
    assert_readable(arr, data)


async def test_unshard_resume_skips_chunks_already_out(tmp_path: Path) -> None:
    arr, data = sample(tmp_path)
    await shard_store_async(LocalStore(arr), 4, separator=".")
    with pytest.raises(Crash):
        await unshard_store_async(
            CrashingStore(LocalStore(arr), puts=20, match=lambda k: k.startswith("c/")),
            separator="/",
            max_in_flight=1,
        )
    assert_readable(arr, data)
    summary = await unshard_store_async(LocalStore(arr), separator="/")
    assert summary.arrays[0].objects_written == 52 - 20
    assert_readable(arr, data)


async def test_changed_request_rolls_back_the_unswitched_objects(tmp_path: Path) -> None:
    arr, data = sample(tmp_path)
    original = snapshot(arr)
    with pytest.raises(Crash):
        await shard_store_async(CrashingStore(LocalStore(arr), puts=4), 4)
    assert any(p.name.isdigit() for p in arr.iterdir())  # staged as i/j
    summary = await unshard_store_async(LocalStore(arr))  # changed my mind: stay flat
    assert summary.skipped == [("", "already flat (c/0/1)")]
    assert snapshot(arr) == original and not (arr / JOURNAL_NAME).exists()
    with pytest.raises(Crash):
        await shard_store_async(CrashingStore(LocalStore(arr), puts=4), 4)
    await shard_store_async(LocalStore(arr), (2, 3))  # another shard shape
    assert max(snapshot(arr)) == "c/3/2"  # 4x3 shards under the array's own keys
    assert not [p for p in arr.iterdir() if p.name.isdigit()]
    assert_readable(arr, data)


@pytest.mark.parametrize("crash_in", ["first", "second"])
async def test_changed_request_between_the_passes_keeps_the_array_keys(
    tmp_path: Path, crash_in: str
) -> None:
    """A shard interrupted after its first pass switched the array to the midpoint keys
    (``i/j``), in the first pass's deletes or the second pass's copies; then another
    request (unshard): the result still has the array's own keys, the original objects."""
    arr, data = sample(tmp_path)
    original = snapshot(arr)
    crashing = (
        CrashingStore(LocalStore(arr), deletes=0, match=lambda k: k.startswith("c/"))
        if crash_in == "first"
        else CrashingStore(LocalStore(arr), puts=3, match=lambda k: k.startswith("c/"))
    )
    with pytest.raises(Crash):
        await shard_store_async(crashing, 2)
    doc = json.loads((arr / "zarr.json").read_text())
    assert doc["chunk_key_encoding"]["name"] == "v2"  # the midpoint: i/j
    assert_readable(arr, data)
    summary = await unshard_store_async(LocalStore(arr))
    assert summary.arrays[0].target == "flat (c/0/1)"
    assert snapshot(arr) == original and not (arr / JOURNAL_NAME).exists()
    assert_readable(arr, data)


async def test_changed_request_after_another_separator_keeps_the_array_keys(
    tmp_path: Path,
) -> None:
    """A one-pass shard to the other separator, interrupted, then shard with another
    shape and default arguments: the new shards have the array's own keys."""
    arr, data = sample(tmp_path)
    with pytest.raises(Crash):
        await shard_store_async(CrashingStore(LocalStore(arr), puts=4), 2, separator=".")
    summary = await shard_store_async(LocalStore(arr), 4)
    assert summary.arrays[0].target == "sharded 4x4 (c/0/1)"
    assert sorted(snapshot(arr)) == ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]
    assert_readable(arr, data)


async def test_metadata_changed_under_an_interrupted_conversion(tmp_path: Path) -> None:
    arr, _ = sample(tmp_path)
    with pytest.raises(Crash):
        await shard_store_async(CrashingStore(LocalStore(arr), puts=4), 2)
    doc = json.loads((arr / "zarr.json").read_text())
    doc["shape"] = [40, 38]
    (arr / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(ConversionError, match="matches neither side"):
        await shard_store_async(LocalStore(arr), 2)


async def test_metadata_changed_during_the_run_is_a_conflict(tmp_path: Path) -> None:
    """The switch is conditional on the zarr.json version read at the start."""
    arr, data = sample(tmp_path)

    class Meddler(CrashingStore):
        async def _set(self, key: str, value: Any, if_match: Any, if_absent: bool) -> Any:
            if key == "1/1":  # a shard of the first pass, staged as i/j
                (arr / "zarr.json").write_text((arr / "zarr.json").read_text() + " ")
            return await super()._set(key, value, if_match, if_absent)

    with pytest.raises(ConversionError, match="changed while the conversion ran"):
        await shard_store_async(Meddler(LocalStore(arr)), 2)
    assert_readable(arr, data)
    await shard_store_async(LocalStore(arr), 2)
    assert_readable(arr, data)


def _write_flat(path: Path, shape: tuple[int, int, int], chunk: int) -> np.ndarray[Any, Any]:
    """A flat uint8 Zarr v3 array of many small chunks, written file by file (quicker
    than through zarr-python); returns its values."""
    data = np.random.default_rng(1).integers(1, 255, shape, dtype=np.uint8)
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk] * 3}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }
    path.mkdir()
    (path / "zarr.json").write_text(json.dumps(doc))
    grid = [s // chunk for s in shape]
    for i, j in np.ndindex(grid[0], grid[1]):
        folder = path / "c" / str(i) / str(j)
        folder.mkdir(parents=True)
        for k in range(grid[2]):
            block = data[i * chunk :, j * chunk :, k * chunk :][:chunk, :chunk, :chunk]
            (folder / str(k)).write_bytes(block.tobytes())
    return data


def _kill_9_when(command: list[str], ready: Callable[[], bool]) -> None:
    """Run ``command`` and SIGKILL it as soon as ``ready()`` holds (polled)."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert proc.poll() is None, "the conversion ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.0002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


def test_kill_9_while_deleting_the_old_chunks_then_rerun(tmp_path: Path) -> None:
    """``asyncshard shard`` in place killed with SIGKILL after the switch, while it deletes
    the 16,384 old chunk files: readers read the sharded array right away, the journal
    is left, and a rerun deletes every old object left (and the folders the killed run
    emptied but did not remove) and removes the journal."""
    arr = tmp_path / "a"
    data = _write_flat(arr, (128, 128, 64), 4)
    old = arr / "c"
    command = [
        sys.executable,
        "-c",
        "from asyncshard.cli import main; main()",
        "shard",
        str(arr),
        "8",
        "--separator",
        ".",  # keys disjoint from the flat ones: one pass
        "-q",
    ]
    first = old / "0" / "0" / "0"  # listed first: in the first batch of deletes
    _kill_9_when(
        command,
        lambda: not first.exists() and "sharding_indexed" in (arr / "zarr.json").read_text(),
    )
    left = sum(len(files) for _, _, files in os.walk(old))
    assert 0 < left < 16384, f"{left} old chunks left: the kill missed the deletes"
    assert (arr / JOURNAL_NAME).exists()
    assert_readable(arr, data)

    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    # every old object is gone, and so are the folders the killed run emptied
    assert not old.exists() and not (arr / JOURNAL_NAME).exists()
    assert sorted(p.name for p in arr.iterdir() if p.name != "zarr.json") == [
        f"c.{i}.{j}.{k}" for i in range(4) for j in range(4) for k in range(2)
    ]
    assert_readable(arr, data)


async def test_kill_9_while_unsharding_into_one_folder_then_rerun(tmp_path: Path) -> None:
    """``asyncshard unshard`` of shards with ``/`` keys writes 4,096 chunks as ``c.i.j.k``
    into the array's folder, each shard's chunks staged in a folder of their own there;
    killed with SIGKILL while staging: readers still read the sharded array, a rerun
    completes, the staging folder left is hidden from listings, and a temp-file cleanup
    removes it."""
    import zarr

    arr = tmp_path / "a"
    data = np.random.default_rng(2).integers(1, 255, (64, 64, 64), dtype=np.uint8)
    zarr.create_array(
        str(arr), shape=data.shape, dtype="uint8", chunks=(4, 4, 4), shards=(32, 32, 32)
    )[...] = data
    command = [sys.executable, "-c", "from asyncshard.cli import main; main()"]
    command += ["unshard", str(arr), "--separator", ".", "-q"]
    _kill_9_when(
        command,
        lambda: any(n.startswith(TMP_PREFIX) and (arr / n).is_dir() for n in os.listdir(arr)),
    )
    stages = [p for p in arr.iterdir() if p.name.startswith(TMP_PREFIX) and p.is_dir()]
    assert stages, "no staging folder left: the kill missed the staged writes"
    assert (arr / JOURNAL_NAME).exists()
    assert_readable(arr, data)

    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert not (arr / JOURNAL_NAME).exists()
    store = LocalStore(arr)
    expected = [f"c.{i}.{j}.{k}" for i in range(16) for j in range(16) for k in range(16)]
    assert sorted([k async for k in store.list()]) == sorted([*expected, "zarr.json"])
    assert_readable(arr, data)
    await store.cleanup_temp_files(max_age=0)
    assert not [p for p in arr.iterdir() if p.name.startswith(TMP_PREFIX)]
    assert sorted(p.name for p in arr.iterdir()) == sorted([*expected, "zarr.json"])


#: Run as ``python -c``: the CLI, with every write, copy and delete batch of the stores
#: logged to $OPS_LOG (``method key``); before the $KILL_AT-th one, SIGKILL.
_KILLABLE_CLI = """
import os, signal, sys
from asyncshard.store import Store

log = open(os.environ["OPS_LOG"], "a", buffering=1)
kill_at = int(os.environ["KILL_AT"])
calls = 0

def logged(name, key_of):
    method = getattr(Store, name)

    async def wrapper(self, arg, *args, **kwargs):
        global calls
        calls += 1
        if calls == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        arg = arg if isinstance(arg, str) else list(arg)
        log.write(f"{name} {key_of(arg)}\\n")
        return await method(self, arg, *args, **kwargs)

    setattr(Store, name, wrapper)

logged("set", lambda key: key)
logged("set_many", lambda items: items[0][0] if items else "")
logged("copy_many", lambda pairs: pairs[0][1] if pairs else "")
logged("erase_values", lambda keys: keys[0] if keys else "")
from asyncshard.cli import main
sys.argv = ["asyncshard", *sys.argv[1:]]
main()
"""

ROUND_TRIP: list[tuple[list[str], Step]] = [
    (["shard", "{}", "2"], lambda s: shard_store_async(s, 2)),
    (["reshard", "{}", "3"], lambda s: reshard_async(s, 3)),
    (["unshard", "{}"], lambda s: unshard_store_async(s)),
]


def _killable_run(arr: Path, args: list[str], kill_at: int) -> list[tuple[str, str]]:
    """Run the CLI step ``args`` on ``arr``, SIGKILLed before its ``kill_at``-th store
    write, copy or delete batch (0: never); return the ``(method, key kind)`` of each
    one it started (key kind: journal, meta or object)."""
    log = arr.parent / f"{arr.name}.ops"
    log.unlink(missing_ok=True)
    command = [sys.executable, "-c", _KILLABLE_CLI, *(a.format(arr) for a in args), "-q"]
    env = {**os.environ, "OPS_LOG": str(log), "KILL_AT": str(kill_at)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == (-signal.SIGKILL if kill_at else 0), done.stderr
    ops = []
    for line in log.read_text().splitlines():
        method, _, key = line.partition(" ")
        kind = "journal" if key.endswith(JOURNAL_NAME) else "object"
        ops.append((method, "meta" if key.endswith("zarr.json") else kind))
    return ops


def _kill_points(ops: list[tuple[str, str]]) -> list[int]:
    """Where to kill a run that makes ``ops``: before the first operation of each run of
    alike operations (each phase of each pass, but the first: nothing done yet) and in
    the middle of long runs."""
    points: list[int] = []
    start = 0
    for i in range(1, len(ops) + 1):
        if i == len(ops) or ops[i] != ops[start]:
            points += [start + 1] if start else []
            points += [start + 1 + (i - start) // 2] if i - start >= 3 else []
            start = i
    return points


@pytest.mark.parametrize("number", range(len(ROUND_TRIP)))
async def test_kill_9_anywhere_in_a_round_trip_then_rerun(tmp_path: Path, number: int) -> None:
    """``asyncshard shard``, ``reshard`` (another shard shape), ``unshard`` with default
    arguments end with the original objects. Step ``number``, SIGKILLed in every phase of
    its two passes (and midway through long phases): zarr-python and tensorstore read
    the right values right after the kill, and a rerun followed by the remaining steps
    ends with the very same objects (names and bytes, ``zarr.json`` too) as the round
    trip without a kill, whose chunk objects are the original ones (``c/i/j`` keys;
    :func:`test_crash_anywhere_then_rerun` covers ``c.i.j`` keys too)."""
    arr, data = sample(tmp_path)
    original = snapshot(arr)
    for _, step in ROUND_TRIP[:number]:
        await step(LocalStore(arr))
    before = tmp_path / "before"
    shutil.copytree(arr, before)
    args = ROUND_TRIP[number][0]
    ops = _killable_run(arr, args, 0)  # uninterrupted: what it does, in order
    for _, step in ROUND_TRIP[number + 1 :]:
        await step(LocalStore(arr))
    assert snapshot(arr) == original
    end = snapshot(arr, skip=())
    points = _kill_points(ops)
    assert len(points) >= 9  # two passes: journal, objects, switch, deletes each
    for point in points:
        scratch = tmp_path / f"kill-{point}"
        shutil.copytree(before, scratch)
        _killable_run(scratch, args, point)
        assert_readable(scratch, data)
        store = LocalStore(scratch)
        for _, step in ROUND_TRIP[number:]:
            await step(store)
        await store.cleanup_temp_files(max_age=0)  # what the kill left mid-write
        assert snapshot(scratch, skip=()) == end, point
