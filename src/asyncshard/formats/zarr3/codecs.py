"""Checking that a stored Zarr v3 chunk decodes through its codecs (``verify --decode``).

The codecs run backwards: ``crc32c`` (checked and stripped), ``gzip`` (stdlib zlib),
``zstd`` and ``blosc`` (numcodecs, which zarr-python brings); then the array-to-bytes
``bytes`` codec must be left with exactly the chunk's size (``transpose`` keeps it).
Decompression never goes far past that size: gzip stops one byte beyond it, and a
blosc header or zstd frame header declaring more is refused before decoding (a zstd
frame that declares no size, which numcodecs never writes, is decoded unbounded).
A codec outside that list is an ``InvalidMetadataError`` when the checker is built,
before any chunk is read: a check that cannot be made is not reported as passed.
"""

from __future__ import annotations

import importlib
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import crc32c

from asyncshard.buffers import BytesLike
from asyncshard.errors import ChecksumError, CorruptShardError, InvalidMetadataError

__all__ = ["ChunkCheck", "chunk_check", "decoded_size"]

#: Raises a typed :class:`~asyncshard.errors.CorruptShardError` if a chunk does not decode.
ChunkCheck = Callable[[BytesLike], None]
#: Bytes per element of the v3 data types whose chunks have a fixed decoded size.
ITEM_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
}
_BLOSC_HEADER = 16
_ZSTD_MAGIC = 0xFD2FB528


def decoded_size(data_type: object, chunk_shape: Sequence[int]) -> int:
    """Bytes of a decoded chunk; ``InvalidMetadataError`` for a data type outside
    :data:`ITEM_SIZES` (a size the check cannot know is not guessed)."""
    size = ITEM_SIZES.get(data_type) if isinstance(data_type, str) else None
    if size is None:
        raise InvalidMetadataError(
            f"data_type {data_type!r}: --decode checks {', '.join(ITEM_SIZES)}"
        )
    return size * math.prod(chunk_shape)


def _name(codec: object) -> tuple[str, Mapping[str, Any]]:
    if isinstance(codec, str):
        return codec, {}
    if isinstance(codec, Mapping) and isinstance(codec.get("name"), str):
        config = codec.get("configuration") or {}
        return codec["name"], config if isinstance(config, Mapping) else {}
    raise InvalidMetadataError(f"codec {codec!r} has no name")


def _numcodecs(name: str) -> Any:
    try:
        return importlib.import_module("numcodecs")  # untyped: used through Any
    except ImportError:
        raise InvalidMetadataError(
            f"--decode of {name} chunks needs numcodecs: pip install 'asyncshard[zarr]'"
        ) from None


def _crc32c(data: bytes, limit: int) -> bytes:
    if len(data) < 4:
        raise CorruptShardError("shorter than its crc32c")
    if crc32c.crc32c(data[:-4]) != int.from_bytes(data[-4:], "little"):
        raise ChecksumError("crc32c mismatch")
    return data[:-4]


def _gzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise CorruptShardError(f"gzip: {exc}") from None
    if not inflater.eof and len(out) <= limit:
        raise CorruptShardError("gzip: truncated stream")
    return out


def _declared_size(name: str, data: bytes) -> int | None:
    """The decoded size a blosc header or a zstd frame header declares (``None``: none),
    read before decoding so that a chunk claiming more than its size is never inflated."""
    if name == "blosc":
        if len(data) < _BLOSC_HEADER:
            raise CorruptShardError("blosc: shorter than its header")
        return int.from_bytes(data[4:8], "little")
    if len(data) < 6 or int.from_bytes(data[:4], "little") != _ZSTD_MAGIC:
        raise CorruptShardError("zstd: no frame magic")
    descriptor = data[4]
    single = bool(descriptor & 0x20)
    field = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[descriptor >> 6]
    if field == 0:
        return None
    start = 5 + (0 if single else 1) + {0: 0, 1: 1, 2: 2, 3: 4}[descriptor & 3]
    raw = data[start : start + field]
    if len(raw) < field:
        raise CorruptShardError("zstd: frame header cut short")
    return int.from_bytes(raw, "little") + (256 if field == 2 else 0)


def _library(name: str) -> Callable[[bytes, int], bytes]:
    codec = getattr(_numcodecs(name), "Zstd" if name == "zstd" else "Blosc")()

    def run(data: bytes, limit: int) -> bytes:
        declared = _declared_size(name, data)
        if declared is not None and declared > limit:
            raise CorruptShardError(f"{name}: declares {declared} bytes, more than {limit}")
        try:
            return bytes(codec.decode(data))
        except Exception as exc:  # numcodecs raises RuntimeError, ValueError, ...
            raise CorruptShardError(f"{name}: {exc}") from None

    return run


def chunk_check(codecs: Sequence[object], size: int) -> ChunkCheck:
    """A check that stored chunk bytes decode through ``codecs`` (the inner codecs of a
    sharded array) to ``size`` bytes; see the module docstring."""
    steps: list[Callable[[bytes, int], bytes]] = []
    seen_bytes = False
    for codec in codecs:
        name, _ = _name(codec)
        if name == "transpose" and not seen_bytes:
            continue
        if name == "bytes" and not seen_bytes:
            seen_bytes = True
            continue
        if not seen_bytes:
            raise InvalidMetadataError(f"--decode cannot check the {name!r} codec")
        if name == "crc32c":
            steps.append(_crc32c)
        elif name == "gzip":
            steps.append(_gzip)
        elif name in ("zstd", "blosc"):
            steps.append(_library(name))
        else:
            raise InvalidMetadataError(f"--decode cannot check the {name!r} codec")
    if not seen_bytes:
        raise InvalidMetadataError("--decode needs the 'bytes' codec")

    def check(stored: BytesLike) -> None:
        data = bytes(stored)
        for step in reversed(steps):
            data = step(data, size)
        if len(data) != size:
            raise CorruptShardError(f"decodes to {len(data)} bytes, not {size}")

    return check
