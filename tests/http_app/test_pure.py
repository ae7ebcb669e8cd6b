"""The pure parts of the server: Range header parsing and HTTP validators."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncshard.ranges import Offset, Range, Suffix
from asyncshard.server.ranges import (
    MAX_RANGES,
    content_range,
    parse_range_header,
    satisfiable_ranges,
)
from asyncshard.server.validators import (
    etag_for,
    evaluate_preconditions,
    http_date,
    if_range_holds,
    parse_etags,
    parse_http_date,
)

NOW = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)

spec = st.one_of(
    st.tuples(st.integers(0, 400), st.integers(0, 400)).map(lambda p: f"{min(p)}-{max(p)}"),
    st.integers(0, 400).map(lambda a: f"{a}-"),
    st.integers(0, 400).map(lambda n: f"-{n}"),
)


@given(st.lists(spec, min_size=1, max_size=6), st.integers(0, 300))
def test_spans_cover_exactly_the_satisfiable_bytes(specs: list[str], size: int) -> None:
    ranges = parse_range_header("bytes=" + ", ".join(specs))
    assert ranges is not None and len(ranges) == len(specs)
    wanted: set[int] = set()
    for item in specs:
        first, last = item.split("-")
        if not first:
            wanted |= set(range(max(size - int(last), 0), size)) if int(last) else set()
        else:
            wanted |= set(range(int(first), min(int(last) + 1 if last else size, size)))
    spans = satisfiable_ranges(ranges, size)
    covered = [i for start, end in spans for i in range(start, end)]
    assert sorted(covered) == sorted(wanted) and len(covered) == len(set(covered))
    assert all(a[1] < b[0] for a, b in pairwise(spans)), "sorted, apart"
    assert all(start < end for start, end in spans)


@given(st.text(max_size=40))
def test_any_header_parses_or_is_ignored(text: str) -> None:
    result = parse_range_header(text)
    assert result is None or all(isinstance(r, Range | Offset | Suffix) for r in result)


def test_range_header_details() -> None:
    assert parse_range_header("bytes=0-0") == [Range(0, 1)]
    assert parse_range_header("Bytes=5-") == [Offset(5)]
    assert parse_range_header("bytes=-7") == [Suffix(7)]
    assert parse_range_header("bytes=1-2,,3-4") == [Range(1, 3), Range(3, 5)]
    for bad in (None, "", "bytes=", "bytes=,", "bytes=2-1", "bytes=a", "bits=0-1", "bytes=1-2 3"):
        assert parse_range_header(bad) is None, bad
    many = "bytes=" + ",".join(["0-0"] * (MAX_RANGES + 1))
    assert parse_range_header(many) is None
    assert satisfiable_ranges([Suffix(0)], 10) == []
    assert satisfiable_ranges([Offset(0)], 0) == []
    assert content_range(0, 10, 100) == "bytes 0-9/100"


def test_etags() -> None:
    assert etag_for(None) is None and etag_for("") is None
    assert etag_for("1f-2a-3") == '"1f-2a-3"'
    assert etag_for('"abc"') == '"abc"', "S3 ETags keep their value"
    odd = etag_for('"abc"#123')
    assert odd is not None and odd.startswith('"') and '"' not in odd[1:-1]
    assert etag_for("a b") != etag_for("a c")
    assert parse_etags("*") is None
    assert parse_etags('"a", W/"b" ,junk, "c"') == ['"a"', 'W/"b"', '"c"']


def test_http_dates() -> None:
    assert http_date(NOW) == "Mon, 06 May 2024 07:08:09 GMT"
    for text in (
        "Mon, 06 May 2024 07:08:09 GMT",
        "Monday, 06-May-24 07:08:09 GMT",
        "Mon May  6 07:08:09 2024",
    ):
        assert parse_http_date(text) == NOW, text
    assert parse_http_date("yesterday") is None and parse_http_date(None) is None


def _eval(method: str, headers: dict[str, str], exists: bool = True) -> int | None:
    return evaluate_preconditions(method, headers, exists=exists, etag='"v1"', last_modified=NOW)


def test_preconditions_follow_rfc_9110_order() -> None:
    later, earlier = http_date(NOW + timedelta(hours=1)), http_date(NOW - timedelta(hours=1))
    assert _eval("GET", {}) is None
    assert _eval("GET", {"If-None-Match": '"v1"'}) == 304
    assert _eval("GET", {"If-None-Match": 'W/"v1"'}) == 304, "weak comparison"
    assert _eval("PUT", {"If-None-Match": "*"}) == 412
    assert _eval("PUT", {"If-None-Match": "*"}, exists=False) is None
    assert _eval("GET", {"If-Match": '"v1"'}) is None
    assert _eval("GET", {"If-Match": 'W/"v1"'}) == 412, "strong comparison"
    assert _eval("PUT", {"If-Match": "*"}, exists=False) == 412
    assert _eval("GET", {"If-Unmodified-Since": earlier}) == 412
    assert _eval("GET", {"If-Unmodified-Since": later}) is None
    assert _eval("GET", {"If-Match": '"v1"', "If-Unmodified-Since": earlier}) is None
    assert _eval("GET", {"If-Modified-Since": http_date(NOW)}) == 304
    assert _eval("GET", {"If-Modified-Since": earlier}) is None
    assert _eval("PUT", {"If-Modified-Since": later}) is None, "only for GET and HEAD"
    assert _eval("GET", {"If-None-Match": '"v2"', "If-Modified-Since": later}) is None
    assert _eval("GET", {"If-Match": '"v2"', "If-None-Match": '"v1"'}) == 412


@pytest.mark.parametrize(
    ("value", "holds"),
    [(None, True), ('"v1"', True), ('W/"v1"', False), ('"v2"', False),
     ("Mon, 06 May 2024 07:08:09 GMT", True), ("Mon, 06 May 2024 07:08:10 GMT", False),
     ("garbage", False)],
)  # fmt: skip
def test_if_range(value: str | None, holds: bool) -> None:
    assert if_range_holds(value, '"v1"', NOW) is holds
