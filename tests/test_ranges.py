"""The pure range arithmetic: resolution, parsing and the coalescing planner."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncshard.errors import InvalidRangeError
from asyncshard.ranges import (
    MAX_OVERFETCH,
    OVERFETCH_SLACK,
    ByteRange,
    Offset,
    Range,
    Suffix,
    coalesce,
    parse_range,
    resolve,
)

ranges_st = st.builds(lambda a, n: Range(a, a + n), st.integers(0, 10_000), st.integers(0, 2_000))


def spans(requests: list) -> list[tuple[int, int, list[int]]]:  # type: ignore[type-arg]
    return [(r.start, r.end, sorted(r.members)) for r in requests]


def test_adjacent_ranges_merge() -> None:
    plan = coalesce([Range(0, 10), Range(10, 20)], max_gap=0, max_request=100)
    assert spans(plan) == [(0, 20, [0, 1])]


def test_overlapping_and_duplicate_ranges_merge() -> None:
    plan = coalesce([Range(5, 15), Range(0, 10), Range(0, 10)], max_gap=0, max_request=100)
    assert spans(plan) == [(0, 15, [0, 1, 2])]


def test_gap_threshold_is_inclusive() -> None:
    ranges = [Range(0, 10), Range(15, 20), Range(26, 30)]
    assert spans(coalesce(ranges, max_gap=5, max_request=100)) == [(0, 20, [0, 1]), (26, 30, [2])]
    assert spans(coalesce(ranges, max_gap=6, max_request=100)) == [(0, 30, [0, 1, 2])]


def test_unsorted_input_sorted_output() -> None:
    plan = coalesce([Range(100, 110), Range(0, 5), Range(50, 60)], max_gap=0, max_request=1000)
    assert spans(plan) == [(0, 5, [1]), (50, 60, [2]), (100, 110, [0])]


def test_max_request_caps_merging() -> None:
    ranges = [Range(i * 10, i * 10 + 10) for i in range(10)]
    plan = coalesce(ranges, max_gap=100, max_request=35)
    assert spans(plan) == [
        (0, 30, [0, 1, 2]),
        (30, 60, [3, 4, 5]),
        (60, 90, [6, 7, 8]),
        (90, 100, [9]),
    ]


def test_oversized_single_range_sent_alone_unsplit() -> None:
    plan = coalesce([Range(0, 500), Range(500, 510)], max_gap=10, max_request=100)
    assert spans(plan) == [(0, 500, [0]), (500, 510, [1])]


def test_empty_input_and_bad_caps() -> None:
    assert coalesce([], max_gap=0, max_request=1) == []
    with pytest.raises(ValueError):
        coalesce([Range(0, 1)], max_gap=-1, max_request=1)
    with pytest.raises(ValueError):
        coalesce([Range(0, 1)], max_gap=0, max_request=0)


@given(st.lists(ranges_st, max_size=40), st.integers(0, 3000), st.integers(1, 20_000))
def test_planner_invariants(ranges: list[Range], max_gap: int, max_request: int) -> None:
    plan = coalesce(ranges, max_gap=max_gap, max_request=max_request)
    members = sorted(m for r in plan for m in r.members)
    assert members == list(range(len(ranges)))  # every range served exactly once
    for req in plan:
        for m in req.members:
            assert req.start <= ranges[m].start and ranges[m].end <= req.end
        if len(req.members) > 1:
            assert req.end - req.start <= max_request
        else:
            only = ranges[req.members[0]]
            assert (req.start, req.end) == (only.start, only.end)
    starts = [r.start for r in plan]
    assert starts == sorted(starts)
    for req in plan:  # what is sent beyond what is wanted stays bounded
        covered = set().union(*(range(ranges[m].start, ranges[m].end) for m in req.members))
        assert req.wanted == len(covered)
        assert req.end - req.start - req.wanted <= max(MAX_OVERFETCH * req.wanted, OVERFETCH_SLACK)
    for a, b in itertools.pairwise(plan):  # neighbours that stayed apart had a reason to
        first = ranges[b.members[0]]
        end = max(a.end, first.end)
        wanted = a.wanted + max(0, first.end - max(first.start, a.end))
        assert (
            first.start - a.end > max_gap
            or end - a.start > max_request
            or end - a.start - wanted > max(MAX_OVERFETCH * wanted, OVERFETCH_SLACK)
        )


def test_sparse_small_ranges_are_not_merged_into_whole_shards() -> None:
    """4 KiB chunks 64 KiB apart under a 256 KiB gap: merging would send 17x the bytes."""
    sparse = [Range(i * 65536, i * 65536 + 4096) for i in range(16)]
    plan = coalesce(sparse, max_gap=256 * 1024, max_request=16 * 2**20)
    assert len(plan) == 16
    dense = [Range(i * 5000, i * 5000 + 4096) for i in range(16)]  # 904-byte gaps
    [one] = coalesce(dense, max_gap=256 * 1024, max_request=16 * 2**20)
    assert one.wanted == 16 * 4096 and one.end - one.start <= 1.5 * one.wanted
    tiny = [Range(0, 10), Range(20, 30), Range(40, 50)]  # within the slack: one request
    assert len(coalesce(tiny, max_gap=100, max_request=1000)) == 1


def test_no_overfetch_bound_merges_by_gap_and_size_alone() -> None:
    """``max_overfetch=None``: even ranges that want nothing (empty ones) share a request."""
    empty = [Range(2, 2), Range(2, 2), Range(3, 3)]
    [one] = coalesce(empty, max_gap=1, max_request=10, max_overfetch=None, slack=0)
    assert (one.start, one.end, one.members, one.wanted) == (2, 3, [0, 1, 2], 0)
    far = [Range(0, 1), Range(500, 501)]  # 499 bytes of gap for 2 wanted: no ratio bound
    assert len(coalesce(far, max_gap=1000, max_request=1000, max_overfetch=None)) == 1
    assert len(coalesce(far, max_gap=1000, max_request=100, max_overfetch=None)) == 2


@given(
    st.one_of(
        ranges_st,
        st.builds(Offset, st.integers(0, 5000)),
        st.builds(Suffix, st.integers(0, 5000)),
    ),
    st.integers(0, 4000),
)
def test_resolve_matches_python_slicing(byte_range: ByteRange, size: int) -> None:
    data = bytes(i % 256 for i in range(size))
    start, end = resolve(byte_range, size)
    if isinstance(byte_range, Range):
        expected = data[byte_range.start : byte_range.end]
    elif isinstance(byte_range, Offset):
        expected = data[byte_range.offset :]
    else:
        expected = data[max(0, size - byte_range.length) :]
    assert data[start:end] == expected
    assert 0 <= start <= end <= size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0-10", Range(0, 10)), ("5-", Offset(5)), ("-7", Suffix(7)), (" 3-4 ", Range(3, 4))],
)
def test_parse_range(text: str, expected: ByteRange) -> None:
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", ["", "-", "abc", "1-2-3", "10-5", "-x", "1.5-2"])
def test_parse_range_rejects(text: str) -> None:
    with pytest.raises(InvalidRangeError):
        parse_range(text)


@pytest.mark.parametrize("args", [(-1, 5), (5, 4)])
def test_invalid_range_types(args: tuple[int, int]) -> None:
    with pytest.raises(InvalidRangeError):
        Range(*args)
    with pytest.raises(InvalidRangeError):
        Offset(-1)
    with pytest.raises(InvalidRangeError):
        Suffix(-1)
