"""The pure shard inspections: faults, lost chunks and overlaps, without I/O."""

from __future__ import annotations

from asyncshard.formats.health import ShardHealth, overlapping
from asyncshard.formats.zarr3.shard import IndexLayout, encode_shard, inspect_shard


def test_overlaps_are_found_however_far_apart_the_entries_sort() -> None:
    spans = [(0, 100, "a"), (10, 20, "b"), (50, 60, "c"), (100, 110, "d"), (200, 210, "e")]
    assert set(overlapping(spans)) == {"a", "b", "c"}
    assert overlapping([(0, 10, "x"), (0, 10, "y"), (10, 10, "z")]) == {}, "shared, empty"


def test_a_sound_zarr_shard_is_all_intact_and_a_short_one_all_faults() -> None:
    layout = IndexLayout((2, 2))
    chunks = {(0, 0): b"first", (1, 1): b"second"}
    shard = encode_shard(chunks, layout)
    health = inspect_shard(shard, layout)
    assert not health.damaged and {p: bytes(v) for p, v in health.intact.items()} == chunks
    cut = inspect_shard(shard[:10], layout)
    assert cut.damaged and cut.faults and not cut.intact and not cut.lost
    assert ShardHealth().damaged is False
