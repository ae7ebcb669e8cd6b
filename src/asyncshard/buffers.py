"""The byte types every layer speaks (defined once; formats and stores import them)."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["BytesLike", "Data"]

#: What writes and decoders accept.
BytesLike: TypeAlias = bytes | bytearray | memoryview
#: What reads return: ``bytes`` or a zero-copy ``memoryview`` of the fetched buffer.
Data: TypeAlias = bytes | memoryview
