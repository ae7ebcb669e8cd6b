"""Zarr chunk key encodings: grid coordinates <-> keys (pure).

``default`` keys are ``c/1/2``, ``v2`` keys ``1.2``, and the draft sharding transformer's
``c1/2``; decoding is strict (canonical decimals only), so ``encode(decode(key)) == key``.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, SupportsIndex

__all__ = ["ChunkKeyEncoding", "Coords", "CoordsLike", "KeyKind", "Separator"]

KeyKind = Literal["default", "v2", "draft"]
Separator = Literal["/", "."]
Coords = tuple[int, ...]
CoordsLike = Sequence[SupportsIndex]


@dataclass(frozen=True)
class ChunkKeyEncoding:
    """How grid coordinates become keys.

    ``default``: ``c/1/2`` (``c`` for 0-d); ``v2``: ``1.2`` (``0`` for 0-d); ``draft`` (the
    draft transformer): ``c1/2`` (``c`` for 0-d). ``prefix`` is prepended verbatim (for
    example ``data/root/foo/`` for the draft, empty for keys relative to the array folder).
    """

    kind: KeyKind = "default"
    separator: Separator = "/"
    prefix: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("default", "v2", "draft"):
            raise ValueError(f"unknown chunk key encoding kind {self.kind!r}")
        if self.separator not in ("/", "."):
            raise ValueError(f"separator must be '/' or '.', got {self.separator!r}")

    def encode(self, coords: CoordsLike) -> str:
        """The key of the grid cell at ``coords`` (not validated; see ShardingLayout)."""
        sep = self.separator
        body = sep.join(map(str, map(operator.index, coords)))
        if self.kind == "default":
            return f"{self.prefix}c{sep}{body}" if body else self.prefix + "c"
        if self.kind == "v2":
            return self.prefix + (body or "0")
        return f"{self.prefix}c{body}"

    def decode(self, key: str, ndim: int) -> Coords | None:
        """Coordinates named by ``key``, or ``None`` if it is not a key of this encoding.

        Strict: exactly ``ndim`` canonical non-negative decimal integers (no sign, spaces,
        leading zeros or non-ASCII digits), so ``encode(decode(key)) == key``.
        """
        match = _key_pattern(self.kind, self.separator, self.prefix, ndim).fullmatch(key)
        return None if match is None else tuple(map(int, match.groups()))

    def decoder(self, ndim: int) -> Callable[[str], Coords | None]:
        """:meth:`decode` for ``ndim`` dimensions as one function: what a listing of
        millions of keys calls per key (no per-key pattern lookup)."""
        fullmatch = _key_pattern(self.kind, self.separator, self.prefix, ndim).fullmatch

        def decode(key: str) -> Coords | None:
            match = fullmatch(key)
            return None if match is None else tuple(map(int, match.groups()))

        return decode


@functools.lru_cache(maxsize=256)
def _key_pattern(kind: KeyKind, separator: Separator, prefix: str, ndim: int) -> re.Pattern[str]:
    """One regular expression for the keys of an encoding: a single match per key."""
    number = r"(0|[1-9][0-9]{0,19})"  # canonical ASCII decimals, at most 20 digits
    sep = re.escape(separator)
    numbers = sep.join([number] * ndim)
    if ndim == 0:
        body = "0" if kind == "v2" else "c"
    elif kind == "default":
        body = "c" + sep + numbers
    elif kind == "v2":
        body = numbers
    else:
        body = "c" + numbers
    return re.compile(re.escape(prefix) + body)
