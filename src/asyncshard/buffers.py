"""The byte types every layer speaks (defined once; formats and stores import them)."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["BytesLike", "Data", "unwrapped"]

#: What writes and decoders accept.
BytesLike: TypeAlias = bytes | bytearray | memoryview
#: What reads return: ``bytes`` or a zero-copy ``memoryview`` of the fetched buffer.
Data: TypeAlias = bytes | memoryview


def unwrapped(data: Data) -> BytesLike:
    """``data`` as the ``bytes`` or ``bytearray`` it views, when it views all of one (no
    copy); else ``data`` itself. Consumers with a fast path for those (aiohttp's response
    bodies) take it then."""
    if isinstance(data, memoryview):
        whole = data.obj
        if isinstance(whole, bytes | bytearray) and len(whole) == data.nbytes:
            return whole
    return data
