"""Pure parsing of the HTTP ``Range`` request header (RFC 9110 section 14).

:func:`parse_range_header` turns a header value into store byte ranges, or ``None`` when
the header must be ignored (absent, another range unit, malformed, too many ranges); the
server then answers ``200`` with the whole object. :func:`satisfiable_ranges` resolves the
ranges against the object size: an empty result means ``416 Range Not Satisfiable``.

Behaviour, following RFC 9110:

* ``bytes=a-b`` (``b`` inclusive), ``bytes=a-`` and ``bytes=-n``; the unit is
  case-insensitive, whitespace is allowed around the commas of a list, empty list
  elements are skipped.
* A range with ``b < a``, a non-digit, a sign or any other syntax error makes the whole
  header malformed: it is ignored.
* ``a >= size`` and ``-0`` are unsatisfiable; ``b >= size`` is clamped to the end.
* Several ranges are sorted and overlapping or adjacent ones merged; more than
  :data:`MAX_RANGES` make the header ignored (a defence against many tiny ranges).
* A position of more than :data:`MAX_DIGITS` significant digits (leading zeros aside) makes
  the whole header ignored, like a malformed one. Such a number is syntactically valid,
  but no object is that large and it cannot be converted (Python's ``int()`` refuses
  strings over 4300 digits); RFC 9110 section 14.1.1 asks recipients to guard against such
  conversions and section 14.2 lets a server ignore ``Range``, so the answer is a ``200``
  with the whole object, never a failure. A representable first position beyond the end
  (``bytes=99999999-``) is still ``416``.
"""

from __future__ import annotations

import re

from asyncshard.ranges import ByteRange, Offset, Range, Suffix, resolve

#: A Range header with more ranges than this is ignored (whole object, 200).
MAX_RANGES = 100

#: Most significant digits of a position: 19 reach 10**19 - 1 > 2**63, past any object.
MAX_DIGITS = 19

# Bounded digit counts: longer numbers fail to match and the header is ignored.
_SPEC = re.compile(rf"(?:0*([0-9]{{1,{MAX_DIGITS}}}))?-(?:0*([0-9]{{1,{MAX_DIGITS}}}))?")


def parse_range_header(value: str | None) -> list[ByteRange] | None:
    """The byte ranges of a ``Range`` header, or ``None`` if it is to be ignored."""
    if value is None:
        return None
    unit, sep, rest = value.strip().partition("=")
    if not sep or unit.lower() != "bytes":
        return None
    out: list[ByteRange] = []
    for raw in rest.split(","):
        item = raw.strip(" \t")
        if not item:
            continue
        match = _SPEC.fullmatch(item)
        if match is None:
            return None
        first, last = match.groups()
        if first and last:
            if int(last) < int(first):
                return None
            out.append(Range(int(first), int(last) + 1))
        elif first:
            out.append(Offset(int(first)))
        elif last:
            out.append(Suffix(int(last)))
        else:
            return None  # a bare "-"
        if len(out) > MAX_RANGES:
            return None
    return out or None


def is_satisfiable(byte_range: ByteRange, size: int) -> bool:
    """Whether one range selects at least one byte of an object of ``size`` bytes."""
    if isinstance(byte_range, Suffix):
        return byte_range.length > 0 and size > 0
    start = byte_range.start if isinstance(byte_range, Range) else byte_range.offset
    return start < size


def satisfiable_ranges(ranges: list[ByteRange], size: int) -> list[tuple[int, int]]:
    """Sorted, merged ``[start, end)`` spans of the satisfiable ``ranges``.

    An empty list means the request is unsatisfiable (416).
    """
    spans = sorted(resolve(r, size) for r in ranges if is_satisfiable(r, size))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def content_range(start: int, end: int, size: int) -> str:
    """The ``Content-Range`` value of the span ``[start, end)``."""
    return f"bytes {start}-{end - 1}/{size}"


def unsatisfied_range(size: int) -> str:
    """The ``Content-Range`` value of a 416 answer."""
    return f"bytes */{size}"
