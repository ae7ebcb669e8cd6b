"""Translation between zarr-python's byte requests and buffers and asyncshard's types.

No copies: asyncshard reads return ``bytes`` or a ``memoryview`` (a slice of a coalesced
request), and ``prototype.buffer.from_bytes`` wraps it with ``numpy.frombuffer`` for
host buffers, so the zarr Buffer shares the memory asyncshard read into. Device buffers
(GPU prototypes) copy to the device, which cannot be avoided. Writes hand asyncshard the
Buffer's own memory (``as_buffer_like``: a ``memoryview`` of its array).
"""

from __future__ import annotations

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from asyncshard.ranges import ByteRange, Offset, Range, Suffix
from asyncshard.store import BytesLike, Data


def to_range(byte_range: ByteRequest | None) -> ByteRange | None:
    """The asyncshard range of a zarr byte request (``None``: the whole object)."""
    if byte_range is None:
        return None
    if isinstance(byte_range, RangeByteRequest):
        return Range(byte_range.start, byte_range.end)
    if isinstance(byte_range, OffsetByteRequest):
        return Offset(byte_range.offset)
    if isinstance(byte_range, SuffixByteRequest):
        return Suffix(byte_range.suffix)
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}")


def to_buffer(data: Data | None, prototype: BufferPrototype) -> Buffer | None:
    """``data`` as a Buffer of ``prototype``, sharing its memory on the host."""
    return None if data is None else prototype.buffer.from_bytes(data)


def to_bytes_like(value: Buffer) -> BytesLike:
    """The bytes of a Buffer for a write, without a copy for host buffers."""
    if not isinstance(value, Buffer):
        raise TypeError(f"value must be a zarr Buffer, got {type(value).__name__}")
    view = value.as_buffer_like()
    return view if isinstance(view, bytes | bytearray | memoryview) else memoryview(view)
