"""Suggestions for misspelt names: the nearest valid name, as click suggests for flags."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: How alike a name must be to a valid one to be suggested (difflib's ratio).
CUTOFF = 0.75


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the candidate nearest ``name``, or ``""``."""
    close = difflib.get_close_matches(name, sorted(set(candidates) - {name}), n=1, cutoff=CUTOFF)
    return f" (did you mean {close[0]!r}?)" if close else ""
