"""What a damaged shard still holds: the shape of a shard inspection, for every format.

Pure. A format's ``inspect_shard`` reads a whole shard as far as it can instead of
raising at the first fault: the chunks whose bytes are where the index says and pass
the checks the format has (``intact``), the chunks the index names but that cannot be
read (``lost``, with the reason), and the faults that hide which chunks they affect
(``faults``: an unreadable index, a corrupt minishard index).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

C = TypeVar("C", bound=Hashable)

__all__ = ["ShardHealth", "overlapping"]


@dataclass
class ShardHealth(Generic[C]):
    """The result of inspecting one shard (see the module docstring)."""

    intact: dict[C, memoryview] = field(default_factory=dict)
    lost: dict[C, str] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        """Whether anything in the shard cannot be read."""
        return bool(self.lost or self.faults)


def overlapping(spans: list[tuple[int, int, C]]) -> dict[C, str]:
    """Chunks whose ``[start, end)`` partly overlaps another chunk's: neither can be
    trusted. Identical ranges (one stored chunk shared by two entries) are allowed."""
    bad: dict[C, str] = {}
    reach: tuple[int, int, C] | None = None  # the span reaching furthest so far
    for start, end, chunk in sorted(spans, key=lambda s: (s[0], s[1])):
        if start == end:
            continue
        if reach is not None and start < reach[1] and (start, end) != (reach[0], reach[1]):
            bad[chunk] = f"bytes [{start}, {end}) overlap another chunk's [{reach[0]}, {reach[1]})"
            bad[reach[2]] = (
                f"bytes [{reach[0]}, {reach[1]}) overlap another chunk's [{start}, {end})"
            )
        if reach is None or end > reach[1]:
            reach = (start, end, chunk)
    return bad
