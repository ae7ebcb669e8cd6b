"""Pure byte-range arithmetic: range types, resolution against a size, coalescing.

Ranges follow Python slicing: a range that reaches past the end of an object is
clamped to the object, and one that starts at or after the end yields empty bytes.
Every backend behaves this way, so callers check lengths when they need exact ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from asyncshard.errors import InvalidRangeError


@dataclass(frozen=True, slots=True)
class Range:
    """Bytes ``[start, end)``."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise InvalidRangeError(f"invalid byte range [{self.start}, {self.end})")


@dataclass(frozen=True, slots=True)
class Offset:
    """Bytes from ``offset`` to the end of the object."""

    offset: int

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise InvalidRangeError(f"invalid byte offset {self.offset}")


@dataclass(frozen=True, slots=True)
class Suffix:
    """The last ``length`` bytes of the object (the whole object if it is shorter)."""

    length: int

    def __post_init__(self) -> None:
        if self.length < 0:
            raise InvalidRangeError(f"invalid suffix length {self.length}")


ByteRange = Range | Offset | Suffix
"""A byte range of one object: :class:`Range`, :class:`Offset` or :class:`Suffix`."""


def resolve(byte_range: ByteRange | None, size: int) -> tuple[int, int]:
    """Return the clamped ``(start, end)`` of ``byte_range`` in an object of ``size`` bytes."""
    if byte_range is None:
        return 0, size
    # comparisons rather than min/max calls: this runs for every read
    if isinstance(byte_range, Range):  # 0 <= start <= end (checked when made)
        start, end = byte_range.start, byte_range.end
    elif isinstance(byte_range, Offset):  # offset >= 0
        start, end = byte_range.offset, size
    else:
        start, end = size - byte_range.length, size
        if start < 0:
            start = 0
    if end > size:
        end = size
    if start > end:
        start = end
    return start, end


#: The end of a range that reads to the end of an object: far past any object's size and
#: below 2^63, which servers that parse a range into a signed 64-bit integer accept.
TO_THE_END = 1 << 62


def bounded_span(byte_range: ByteRange | None) -> tuple[int, int] | None:
    """``byte_range`` as the ``(start, end)`` of one ranged request with both ends given
    (the whole object and an offset reach ``TO_THE_END``); ``None`` for a suffix or an
    empty range, which such a request cannot ask for."""
    if byte_range is None:
        return 0, TO_THE_END
    if isinstance(byte_range, Offset):
        return (byte_range.offset, TO_THE_END) if byte_range.offset < TO_THE_END else None
    if isinstance(byte_range, Range) and byte_range.end > byte_range.start:
        return byte_range.start, byte_range.end
    return None


def parse_range(text: str) -> ByteRange:
    """Parse ``A-B`` (end exclusive), ``A-`` (offset) or ``-N`` (suffix)."""
    head, sep, tail = text.strip().partition("-")
    try:
        if not sep:
            raise ValueError
        if not head:
            return Suffix(int(tail))
        if not tail:
            return Offset(int(head))
        return Range(int(head), int(tail))
    except ValueError as exc:
        if isinstance(exc, InvalidRangeError):
            raise
        raise InvalidRangeError(
            f"cannot parse byte range {text!r}: use START-END, START- or -LENGTH"
        ) from None


#: A merged request may fetch this fraction of the bytes its ranges want on top of them
#: (their gaps): at most 1.5x what is needed is sent.
MAX_OVERFETCH = 0.5
#: ... or this many bytes of gaps, however little is wanted (one page: tiny ranges a few
#: bytes apart still share a request).
OVERFETCH_SLACK = 4096


@dataclass(slots=True)
class Coalesced:
    """One coalesced request ``[start, end)`` serving the input ranges ``members``;
    ``wanted``: the bytes its members cover (overlaps counted once)."""

    start: int
    end: int
    members: list[int] = field(default_factory=list)
    wanted: int = 0


def coalesce(
    ranges: Sequence[Range],
    *,
    max_gap: int,
    max_request: int,
    max_overfetch: float | None = MAX_OVERFETCH,
    slack: int = OVERFETCH_SLACK,
) -> list[Coalesced]:
    """Merge ``ranges`` into as few requests as the caps allow.

    Two neighbouring ranges (after sorting by start) share a request when the gap between
    them is at most ``max_gap`` bytes (overlapping and duplicate ranges have a negative or
    zero gap), the merged request stays within ``max_request`` bytes, and the bytes it
    fetches beyond those wanted stay within ``max_overfetch`` times the bytes wanted (or
    ``slack`` bytes; ``None``: no such bound): a fixed gap alone would read whole shards
    for a few small chunks spread over them. A single range longer than ``max_request``
    is sent alone and never split. Members are indices into ``ranges``; requests come
    back sorted by start.
    """
    if max_gap < 0 or max_request <= 0 or slack < 0:
        raise ValueError("max_gap, slack must be >= 0 and max_request > 0")
    if max_overfetch is not None and max_overfetch < 0:
        raise ValueError("max_overfetch must be >= 0, or None for no bound")
    order = sorted(range(len(ranges)), key=[(r.start, r.end) for r in ranges].__getitem__)
    requests: list[Coalesced] = []
    last: Coalesced | None = None
    for i in order:  # comparisons, not min/max calls: this runs for every range read
        r = ranges[i]
        start, stop = r.start, r.end
        if last is not None and start - last.end <= max_gap:
            seen = last.end
            end = stop if stop > seen else seen
            fresh = stop - (start if start > seen else seen)  # bytes not covered yet
            wanted = last.wanted + fresh if fresh > 0 else last.wanted
            span = end - last.start
            if span <= max_request and (
                max_overfetch is None
                or span - wanted <= slack
                or span - wanted <= max_overfetch * wanted
            ):
                last.end, last.wanted = end, wanted
                last.members.append(i)
                continue
        last = Coalesced(start, stop, [i], stop - start if stop > start else 0)
        requests.append(last)
    return requests
