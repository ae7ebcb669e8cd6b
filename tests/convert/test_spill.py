"""The sorted spill that conversions plan with: any order in, sorted and distinct out."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncshard.convert import spill
from asyncshard.convert.spill import KeyFile, SortedSpill, groups


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.integers(0, 2**64 - 1), max_size=400),
    run=st.sampled_from([4, 16, 1 << 13]),
)
def test_codes_come_back_sorted_and_distinct(values: list[int], run: int) -> None:
    """Runs spilled to disk and merged (several merge levels with tiny runs)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spill, "RUN", run)
        mp.setattr(spill, "FANIN", 3)
        with SortedSpill() as sorted_spill:
            for i in range(0, len(values), 7):
                sorted_spill.add(values[i : i + 7])
            out = [b for b in sorted_spill.blocks()]
            again = [b for b in sorted_spill.blocks()]
    flat = np.concatenate(out) if out else np.empty(0, np.uint64)
    assert flat.tolist() == sorted(set(values))
    assert [b.tolist() for b in again] == [b.tolist() for b in out]


@given(values=st.lists(st.integers(0, 10_000), max_size=300), size=st.integers(1, 50))
def test_groups_join_across_blocks(values: list[int], size: int) -> None:
    codes = np.array(sorted(set(values)), dtype=np.uint64)
    blocks = iter(np.array_split(codes, 5))
    got = [(k, g.tolist()) for k, g in groups(blocks, size)]
    expected: dict[int, list[int]] = {}
    for c in codes.tolist():
        expected.setdefault(c // size, []).append(c)
    assert got == list(expected.items())


def test_key_file_gives_back_every_key() -> None:
    keys = KeyFile()
    names = [f"a/c/{i}/é\n{i}" for i in range(10_000)]
    for name in names:
        keys.add(name)
    assert [k for batch in keys.batches(333) for k in batch] == names
    assert keys.count == len(names)
    keys.close()


def test_key_file_reads_back_a_block_at_a_time() -> None:
    """Reading 300,000 kept keys back holds a batch and a block of names, not a MiB of
    names at once."""
    keys = KeyFile()
    for i in range(300_000):
        keys.add(f"c/{i // 1000}/{i % 1000}")
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        count = sum(len(batch) for batch in keys.batches(8192))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        keys.close()
    assert count == 300_000
    assert peak - before < 3_000_000, peak - before  # 1.5 MB; 10 MB reading a MiB at once
