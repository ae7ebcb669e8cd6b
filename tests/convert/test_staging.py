"""The first pass of a conversion that keeps the array's keys is staged in nested keys:
no folder receives more than one row of the grid (an unshard of millions of chunks
never puts them all into one folder), and a run stopped after it ends at the original
keys."""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncshard.backends import LocalStore
from asyncshard.backends.local import TMP_PREFIX
from asyncshard.convert import plan, unshard_store_async
from asyncshard.convert.journal import JOURNAL_NAME
from asyncshard.convert.layout import disjoint
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding
from tests.convert.helpers import Crash, CrashingStore, assert_readable, snapshot

GRID = (16, 16, 16)  # chunks of the array: 4,096


def _sharded(arr: Path, separator: str = "/") -> np.ndarray[Any, Any]:
    """A 64^3 uint8 array of 4^3 chunks in 32^3 shards (8 shards of 8x8x8 chunks)."""
    import zarr

    data = np.random.default_rng(3).integers(1, 255, (64, 64, 64), dtype=np.uint8)
    zarr.create_array(
        str(arr),
        shape=data.shape,
        dtype="uint8",
        chunks=(4, 4, 4),
        shards=(32, 32, 32),
        chunk_key_encoding={"name": "default", "separator": separator},
    )[...] = data
    return data


def _keys(arr: Path) -> set[str]:
    """The objects below ``arr`` (temp files and the journal not counted)."""
    return {
        k
        for k in snapshot(arr)
        if not any(part.startswith(TMP_PREFIX) for part in k.split("/")) and k != JOURNAL_NAME
    }


@pytest.mark.parametrize("separator", ["/", "."])
async def test_a_staged_unshard_puts_one_row_of_chunks_in_a_folder(
    tmp_path: Path, separator: str
) -> None:
    """``unshard`` keeping the keys (two passes), stopped at the switch of its first
    pass: every chunk is staged in nested keys (``i/j/k`` for a ``c/i/j/k`` array, where
    ``c.i.j.k`` staging put all 4,096 into the array's folder; ``c/i/j/k`` for a
    ``c.i.j.k`` one), at most a row of 16 to a folder; readers still read the sharded
    array, and a rerun ends with the chunks under the array's own keys."""
    arr = tmp_path / "a"
    data = _sharded(arr, separator)
    shards = _keys(arr)
    crashing = CrashingStore(LocalStore(arr), puts=0, match=lambda k: k.endswith("zarr.json"))
    with pytest.raises(Crash):
        await unshard_store_async(crashing)  # the first switch: every chunk is staged
    assert (arr / JOURNAL_NAME).exists()
    staged = Counter(os.path.dirname(k) for k in _keys(arr) - shards)
    assert sum(staged.values()) == math.prod(GRID)  # every chunk
    assert max(staged.values()) == GRID[-1]  # a row to a folder
    assert_readable(arr, data)

    summary = await unshard_store_async(LocalStore(arr))
    assert summary.arrays[0].resumed and not (arr / JOURNAL_NAME).exists()
    keys = ChunkKeyEncoding("default", separator)  # type: ignore[arg-type]
    assert _keys(arr) == {keys.encode(c) for c in np.ndindex(*GRID)}
    assert_readable(arr, data)


def _previous_partner(encoding: ChunkKeyEncoding, ndim: int) -> ChunkKeyEncoding:
    """The staging encoding of the previous version: the other separator (``c/i/j``
    staged as ``c.i.j``) where that is disjoint."""
    flipped = ChunkKeyEncoding(encoding.kind, "." if encoding.separator == "/" else "/")
    if disjoint(encoding, flipped, ndim):
        return flipped
    return ChunkKeyEncoding("v2" if encoding.kind == "default" else "default", encoding.separator)


@pytest.mark.parametrize(
    "crash",
    [
        {"puts": 2000, "match": lambda k: k.startswith("c.")},  # staging
        {"puts": 0, "match": lambda k: k.endswith("zarr.json")},  # the first switch
        {"deletes": 3},  # the shards, after it
        {"puts": 1000, "match": lambda k: k.startswith("c/")},  # the copy back
        {"puts": 1, "match": lambda k: k.endswith("zarr.json")},  # the second switch
    ],
    ids=["staging", "switch-1", "deletes-1", "copy-back", "switch-2"],
)
async def test_a_run_of_the_previous_version_stopped_anywhere_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: dict[str, Any]
) -> None:
    """A run of the previous version, which staged in ``c.i.j.k`` keys and named them in
    its journal, stopped in any phase: a rerun of this version ends at the original keys
    (a stop while staging discards what was staged and converts again)."""
    arr = tmp_path / "a"
    data = _sharded(arr)
    with monkeypatch.context() as previous:
        previous.setattr(plan, "partner", _previous_partner)
        with pytest.raises(Crash):
            await unshard_store_async(CrashingStore(LocalStore(arr), **crash))
    assert (arr / JOURNAL_NAME).exists()
    assert_readable(arr, data)

    summary = await unshard_store_async(LocalStore(arr))
    assert summary.arrays[0].action == "converted"
    assert not (arr / JOURNAL_NAME).exists()
    assert _keys(arr) == {ChunkKeyEncoding().encode(c) for c in np.ndindex(*GRID)}
    assert_readable(arr, data)
