"""Pure HTTP validators: ETags from store versions, HTTP dates, preconditions (RFC 9110 §13).

Every store reports a version per object (an ETag, a generation, ``inode-mtime-size``...).
The server turns it into a strong ``ETag``: the version itself in quotes when it is made
of ETag characters, otherwise a hash of it; either way it changes exactly when the
version does.

:func:`evaluate_preconditions` applies ``If-Match``, ``If-Unmodified-Since``,
``If-None-Match`` and ``If-Modified-Since`` in the order RFC 9110 section 13.2.2 gives;
:func:`if_range_holds` decides whether a ``Range`` is honoured under ``If-Range``.

Dates follow the ``HTTP-date`` grammar of RFC 9110 section 5.6.7 exactly: the
IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``) and the two obsolete forms that recipients
must accept (RFC 850 ``Sunday, 06-Nov-94 08:49:37 GMT``, asctime ``Sun Nov  6 08:49:37
1994``). Anything else (a numeric time zone, year ``0000``, a five-digit year, 31 February)
is invalid, and an invalid date makes its header ignored, as RFC 9110 sections 13.1.3,
13.1.4 and 13.1.5 require: :func:`parse_http_date` never raises. The standard library's
``email.utils`` parser is not used: it reads ``0000`` as 2000, accepts any time zone and
raises ``OverflowError`` on very long numbers.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import format_datetime

_ETAG_CHARS = re.compile(r"[\x21\x23-\x7e]+")
_ETAG_LIST_ITEM = re.compile(r'\s*(?:W/)?"[^"]*"\s*')

_MONTHS = {
    name: n
    for n, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_MONTH = "(" + "|".join(_MONTHS) + ")"
_TIME = "([0-9]{2}):([0-9]{2}):([0-9]{2})"
_IMF_FIXDATE = re.compile(
    rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{{2}}) {_MONTH} ([0-9]{{4}}) {_TIME} GMT"
)
_RFC850_DATE = re.compile(
    r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), "
    rf"([0-9]{{2}})-{_MONTH}-([0-9]{{2}}) {_TIME} GMT"
)
_ASCTIME_DATE = re.compile(
    rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) {_MONTH} ([0-9]{{2}}| [0-9]) {_TIME} ([0-9]{{4}})"
)


@functools.lru_cache(maxsize=4096)  # one per object served recently: a regex and a hash
def etag_for(version: str | None) -> str | None:
    """A strong ``ETag`` (with quotes) for a store version; ``None`` without a version."""
    if not version:
        return None
    inner = version[1:-1] if len(version) >= 2 and version[0] == version[-1] == '"' else version
    if not _ETAG_CHARS.fullmatch(inner):
        inner = hashlib.sha256(version.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f'"{inner}"'


@functools.lru_cache(maxsize=4096)  # formatting costs more than the rest of the headers
def http_date(moment: datetime) -> str:
    """An IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return format_datetime(moment.astimezone(UTC), usegmt=True)


def parse_http_date(value: str | None) -> datetime | None:
    """The moment an ``HTTP-date`` names (any of its three forms), in UTC; ``None`` if
    ``value`` is absent or not a valid date. Never raises."""
    if not value:
        return None
    value = value.strip(" \t")
    if match := _IMF_FIXDATE.fullmatch(value):
        day, month, year, hour, minute, second = match.groups()
    elif match := _RFC850_DATE.fullmatch(value):
        day, month, yy, hour, minute, second = match.groups()
        year = str(_rfc850_year(int(yy)))
    elif match := _ASCTIME_DATE.fullmatch(value):
        month, day, hour, minute, second, year = match.groups()
    else:
        return None
    try:
        return datetime(
            int(year), _MONTHS[month], int(day), int(hour), int(minute), int(second), tzinfo=UTC
        )
    except ValueError:  # year 0000, 31 Feb, hour 24, second 60...
        return None


def _rfc850_year(yy: int) -> int:
    """RFC 9110: a two-digit year more than 50 years ahead is the latest past one."""
    this_year = datetime.now(UTC).year
    year = this_year - this_year % 100 + yy
    return year - 100 if year > this_year + 50 else year


def _seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def parse_etags(value: str) -> list[str] | None:
    """The entity tags of an ``If-Match``/``If-None-Match`` value; ``None`` for ``*``."""
    if value.strip() == "*":
        return None
    tags: list[str] = []
    for item in value.split(","):
        item = item.strip()
        if item and _ETAG_LIST_ITEM.fullmatch(item):
            tags.append(item)
    return tags


def _opaque(tag: str) -> str:
    return tag[2:] if tag.startswith("W/") else tag


def strong_match(tags: list[str], etag: str | None) -> bool:
    """Strong comparison: neither tag may be weak."""
    return etag is not None and any(t == etag and not t.startswith("W/") for t in tags)


def weak_match(tags: list[str], etag: str | None) -> bool:
    """Weak comparison: the opaque parts are equal."""
    return etag is not None and any(_opaque(t) == _opaque(etag) for t in tags)


def evaluate_preconditions(
    method: str,
    headers: Mapping[str, str],
    *,
    exists: bool,
    etag: str | None,
    last_modified: datetime | None,
) -> int | None:
    """``412``, ``304`` or ``None`` (proceed) for a request on a resource (RFC 9110 §13.2.2)."""
    safe = method in ("GET", "HEAD")
    if_match = headers.get("If-Match")
    if if_match is not None:
        tags = parse_etags(if_match)
        if not exists or (tags is not None and not strong_match(tags, etag)):
            return 412
    else:
        since = parse_http_date(headers.get("If-Unmodified-Since"))
        stale = since is not None and last_modified is not None and _seconds(last_modified) > since
        if exists and stale:
            return 412
    if_none_match = headers.get("If-None-Match")
    if if_none_match is not None:
        tags = parse_etags(if_none_match)
        if exists and (tags is None or weak_match(tags, etag)):
            return 304 if safe else 412
    elif safe and exists and last_modified is not None:
        since = parse_http_date(headers.get("If-Modified-Since"))
        if since is not None and _seconds(last_modified) <= since:
            return 304
    return None


def if_range_holds(value: str | None, etag: str | None, last_modified: datetime | None) -> bool:
    """Whether a ``Range`` applies under ``If-Range: value`` (``True`` without the header)."""
    if value is None:
        return True
    value = value.strip()
    if value.startswith(('"', 'W/"')):
        return strong_match([value], etag)
    moment = parse_http_date(value)
    return moment is not None and last_modified is not None and _seconds(last_modified) == moment
