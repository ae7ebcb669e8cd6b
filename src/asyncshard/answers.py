"""Checks of what an obspec client answers to a read: the bytes asked, or an error.

A ``get_async`` result says which bytes of the object it holds (``range``, ``(start,
end)``) and how large the object is (``meta["size"]``). :func:`checked_answer` holds both
against the body and against what was asked: an answer of exactly the bytes asked
(clamped at the object's end) is returned as it is, one holding more that says which
(a whole object for a range) has the bytes asked cut out of it, and anything else (a
body of another length than its range, a range that misses bytes asked or none at all)
is a :class:`~asyncshard.errors.CorruptResponseError`: never other bytes than those asked.
"""

from __future__ import annotations

from typing import Any

from asyncshard.errors import CorruptResponseError
from asyncshard.ranges import ByteRange, resolve
from asyncshard.store import BytesLike

__all__ = ["answered_span", "checked_answer", "checked_ranged_body"]


def answered_span(result: Any) -> tuple[int, int] | None:
    """The ``(start, end)`` a get result says it holds; ``None`` if it says none."""
    try:
        start, end = result.range
        return int(start), int(end)
    except Exception:  # no range, or not a pair of integers: the answer names none
        return None


def _bytes_view(data: BytesLike, key: str) -> memoryview:
    try:
        view = memoryview(data)
    except TypeError:
        what = type(data).__name__
        raise CorruptResponseError(f"the answer is not bytes ({what})", key=key) from None
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def _span_text(span: tuple[int, int]) -> str:
    return f"[{span[0]}, {span[1]})"


def checked_answer(
    key: str, asked: ByteRange | None, data: BytesLike, result: Any, size: int
) -> memoryview:
    """The bytes ``asked`` of an object of ``size`` bytes out of an answer ``data`` (the
    body of ``result``); ``CorruptResponseError`` when they are not exactly in it."""
    view = _bytes_view(data, key)
    want = resolve(asked, size)
    got = answered_span(result)
    if got is None:
        if asked is None and view.nbytes == size:  # the whole object by its length
            return view
        raise CorruptResponseError(
            f"asked bytes {_span_text(want)} of {size}; the answer ({view.nbytes} bytes) "
            "names no byte range",
            key=key,
        )
    start, end = got
    if view.nbytes != end - start:
        raise CorruptResponseError(
            f"the answer says it holds bytes {_span_text(got)} ({end - start} bytes) but its "
            f"body has {view.nbytes}",
            key=key,
        )
    if not 0 <= start <= want[0] <= want[1] <= end <= size:
        raise CorruptResponseError(
            f"asked bytes {_span_text(want)} of an object of {size} bytes; the answer holds "
            f"bytes {_span_text(got)}",
            key=key,
        )
    return view[want[0] - start : want[1] - start]  # the whole view when they agree


def checked_ranged_body(key: str, span: tuple[int, int], data: BytesLike) -> memoryview:
    """The body of a ``get_range_async(start, end)`` answer (no size, no range to check
    it by): longer than ``end - start`` is another range than the one asked, an error;
    shorter is the range clamped at the object's end, as obspec says."""
    view = _bytes_view(data, key)
    if view.nbytes > span[1] - span[0]:
        raise CorruptResponseError(
            f"asked bytes {_span_text(span)}; the answer has {view.nbytes} bytes", key=key
        )
    return view
