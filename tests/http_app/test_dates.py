"""HTTP dates: a hostile or invalid date is ignored (RFC 9110), never a failure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncshard.server.validators import (
    evaluate_preconditions,
    http_date,
    if_range_holds,
    parse_http_date,
)
from tests.http_app.conftest import DATA, Served

HOSTILE = [
    "Mon, 01 Jan 99999 00:00:00 GMT",
    "Mon, 01 Jan 0 00:00:00 GMT",
    "Mon, 01 Jan 0000 00:00:00 GMT",
    "Sat, 01 Jan 0000 00:00:00 GMT",
    "Mon, 01 Jan " + "9" * 30 + " 00:00:00 GMT",
    "Mon, 01 Jan 2000 00:00:00 +" + "9" * 30,
    "Mon, 01 Jan 0001 00:00:00 +2359",
    "Fri, 31 Dec 9999 23:59:59 -2359",
    "Mon, 31 Feb 2021 00:00:00 GMT",
    "Mon, 01 Jan 2021 24:00:00 GMT",
    "Mon, 01 Jan 2021 23:59:60 GMT",
    "Monday, 01-Jan-" + "9" * 30 + " 00:00:00 GMT",
    "Mon Jan  1 00:00:00 99999",
    "Mon Jan  1 00:00:00 0000",
    "Mon, 01 Jan 2021 00:00:00 GMT\x00",
    "Mon, \uff10\uff11 Jan 2021 00:00:00 GMT",  # fullwidth digits
    "",
    "   ",
]

#: The three HTTP-date forms of one moment.
VALID = [
    ("Sun, 06 Nov 1994 08:49:37 GMT", datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)),
    ("Sunday, 06-Nov-94 08:49:37 GMT", datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)),
    ("Sun Nov  6 08:49:37 1994", datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)),
    ("Mon, 01 Jan 0001 00:00:00 GMT", datetime(1, 1, 1, tzinfo=UTC)),
    ("Fri, 31 Dec 9999 23:59:59 GMT", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
]


@pytest.mark.parametrize("text", HOSTILE)
def test_invalid_dates_are_none(text: str) -> None:
    assert parse_http_date(text) is None


@pytest.mark.parametrize(("text", "moment"), VALID)
def test_valid_dates(text: str, moment: datetime) -> None:
    assert parse_http_date(text) == moment


def test_rfc850_years_are_never_more_than_50_years_ahead() -> None:
    this_year = datetime.now(UTC).year
    for yy in range(100):
        year = parse_http_date(f"Monday, 01-Jan-{yy:02d} 00:00:00 GMT")
        assert year is not None and this_year - 50 <= year.year <= this_year + 50


@given(st.text())
def test_any_text_is_a_date_or_none(text: str) -> None:
    moment = parse_http_date(text)
    assert moment is None or moment.tzinfo is UTC


@given(st.text(alphabet="MonTueSdayJFbrgplcNvD, -:0123456789GT+", max_size=40))
def test_date_like_text_is_a_date_or_none(text: str) -> None:
    moment = parse_http_date(text)
    assert moment is None or moment.tzinfo is UTC


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)))
def test_http_dates_round_trip(moment: datetime) -> None:
    moment = moment.replace(microsecond=0, tzinfo=UTC)
    assert parse_http_date(http_date(moment)) == moment


@given(st.text(), st.datetimes(timezones=st.just(UTC)))
def test_preconditions_never_raise(text: str, modified: datetime) -> None:
    for name in ("If-Modified-Since", "If-Unmodified-Since"):
        for method in ("GET", "PUT"):
            evaluate_preconditions(
                method, {name: text}, exists=True, etag='"e"', last_modified=modified
            )
    if_range_holds(text, '"e"', modified)


@pytest.mark.parametrize("text", HOSTILE[:8])
async def test_hostile_dates_are_ignored_by_the_server(
    served: Served, http: aiohttp.ClientSession, text: str
) -> None:
    """Each date header with a hostile value: as if the header were absent."""
    later = http_date(datetime.now(UTC) + timedelta(days=1))
    for name in ("If-Modified-Since", "If-Unmodified-Since"):
        async with http.get(f"{served.url}/obj", headers={name: text}) as r:
            assert r.status == 200, name
            assert await r.read() == DATA
    ranged = {"Range": "bytes=0-9"}
    async with http.get(f"{served.url}/obj", headers={**ranged, "If-Range": text}) as r:
        assert r.status == 200, "If-Range with an invalid date: the whole object"
        assert await r.read() == DATA
    async with http.get(f"{served.url}/obj", headers={**ranged, "If-Range": later}) as r:
        assert r.status == 200, "a valid If-Range date that does not match: the whole object"
    async with http.head(f"{served.url}/obj", headers={"If-Modified-Since": text}) as r:
        assert r.status == 200
