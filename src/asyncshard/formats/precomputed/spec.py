"""The ``neuroglancer_uint64_sharded_v1`` sharding spec: JSON, hashing, shard mapping, Morton codes.

Pure functions and frozen dataclasses; no I/O. Vectorised helpers take and return
``numpy.uint64`` arrays; scalar helpers take and return Python ints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import mmh3
import numpy as np
import numpy.typing as npt

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.morton import decode_morton_codes, morton_bits, morton_codes

__all__ = [
    "SHARDING_TYPE",
    "Encoding",
    "HashFunction",
    "ShardingSpec",
    "U64Array",
    "as_uint64_array",
    "compressed_morton_bits",
    "compressed_morton_code",
    "decode_compressed_morton",
    "murmurhash3_x86_128_low64",
    "murmurhash3_x86_128_low64_array",
]

SHARDING_TYPE = "neuroglancer_uint64_sharded_v1"
"""The ``@type`` of a sharding spec."""

HashFunction = Literal["identity", "murmurhash3_x86_128"]
Encoding = Literal["raw", "gzip"]
U64Array = npt.NDArray[np.uint64]

_HASHES: tuple[str, ...] = ("identity", "murmurhash3_x86_128")
_ENCODINGS: tuple[str, ...] = ("raw", "gzip")
_MAX_MINISHARD_BITS = 32
_MASK64 = (1 << 64) - 1
_U32 = np.uint32


# --------------------------------------------------------------------------- hashing


def murmurhash3_x86_128_low64(key: int) -> int:
    """Low 64 bits (``h1 | h2 << 32``) of MurmurHash3_x86_128, seed 0, of ``key`` as 8 LE bytes."""
    return mmh3.hash128(key.to_bytes(8, "little"), 0, False) & _MASK64


def _rotl32(x: npt.NDArray[np.uint32], r: int) -> npt.NDArray[np.uint32]:
    return cast(npt.NDArray[np.uint32], (x << _U32(r)) | (x >> _U32(32 - r)))


def _fmix32(h: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    h = h ^ (h >> _U32(16))
    h = h * _U32(0x85EBCA6B)
    h = h ^ (h >> _U32(13))
    h = h * _U32(0xC2B2AE35)
    return cast(npt.NDArray[np.uint32], h ^ (h >> _U32(16)))


def murmurhash3_x86_128_low64_array(keys: U64Array) -> U64Array:
    """Vectorised :func:`murmurhash3_x86_128_low64` over a ``uint64`` array.

    With 8 bytes of input there are no full 16-byte blocks: the low word is the tail ``k1``
    and the high word the tail ``k2``; ``h3`` and ``h4`` only see the length in finalisation.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    k1 = (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    k2 = (keys >> np.uint64(32)).astype(np.uint32)
    h1 = _rotl32(k1 * _U32(0x239B961B), 15) * _U32(0xAB0E9789)
    h2 = _rotl32(k2 * _U32(0xAB0E9789), 16) * _U32(0x38B34AE5)
    length = _U32(8)
    h1 = h1 ^ length
    h2 = h2 ^ length
    h1 = h1 + h2 + length + length  # h1 += h2; h1 += h3; h1 += h4 (h3 = h4 = len)
    h2 = h2 + h1
    h34 = _fmix32(h1 + length)  # h3 and h4 are equal from here on
    h1 = _fmix32(h1)
    h2 = _fmix32(h2)
    h1 = h1 + h2 + h34 + h34
    h2 = h2 + h1
    return cast(U64Array, h1.astype(np.uint64) | (h2.astype(np.uint64) << np.uint64(32)))


def as_uint64_array(values: npt.ArrayLike, what: str = "ids") -> U64Array:
    """``values`` as a ``uint64`` array; ``ValueError`` for non-integers or out-of-range values.

    Python int sequences are converted exactly (numpy alone would turn ``[0, 2**64 - 1]``
    into float64).
    """
    arr = np.asarray(values)
    if arr.dtype == np.uint64:
        return cast(U64Array, arr)
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "i" and arr.size and bool((arr < 0).any()):
            raise ValueError(f"{what} must be integers in [0, 2**64), got a negative value")
        return arr.astype(np.uint64)
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=np.uint64)
    if isinstance(values, np.ndarray) or arr.dtype.kind not in "fO":
        raise ValueError(f"{what} must be integers in [0, 2**64), got dtype {arr.dtype}")
    return _uint64_from_python(np.array(values, dtype=object), what)


def _uint64_from_python(obj: npt.NDArray[np.object_], what: str) -> U64Array:
    # checked here, not left to numpy: numpy 1.x wraps negative Python ints into uint64
    if not all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) and 0 <= v < 2**64
        for v in obj.flat
    ):
        raise ValueError(f"{what} must be integers in [0, 2**64)")
    return np.array(obj.tolist(), dtype=np.uint64)


def _check_u64(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    value = int(value)
    if not 0 <= value <= _MASK64:
        raise ValueError(f"{what} must be in [0, 2**64), got {value}")
    return value


def _low_mask(bits: int) -> int:
    return (1 << bits) - 1


# --------------------------------------------------------------------------- JSON helpers


def _get_int(doc: Mapping[str, Any], field: str, lo: int, hi: int) -> int:
    if field not in doc:
        raise InvalidMetadataError(f"sharding.{field} is required (an integer in [{lo}, {hi}])")
    value = doc[field]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidMetadataError(
            f"sharding.{field} must be an integer in [{lo}, {hi}], got {value!r}"
        )
    return value


def _get_choice(
    doc: Mapping[str, Any], field: str, choices: tuple[str, ...], default: str | None
) -> str:
    allowed = " | ".join(repr(c) for c in choices)
    if field not in doc:
        if default is None:
            raise InvalidMetadataError(f"sharding.{field} is required (one of {allowed})")
        return default
    value = doc[field]
    if value not in choices:
        raise InvalidMetadataError(f"sharding.{field} must be one of {allowed}, got {value!r}")
    return cast(str, value)


def _parse_fields(doc: object) -> dict[str, Any]:
    """Validated constructor arguments of :class:`ShardingSpec` from its JSON object."""
    if not isinstance(doc, Mapping):
        raise InvalidMetadataError(f"sharding must be a JSON object, got {doc!r}")
    if doc.get("@type") != SHARDING_TYPE:
        raise InvalidMetadataError(
            f"sharding.@type must be {SHARDING_TYPE!r}, got {doc.get('@type')!r}"
        )
    minishard_bits = _get_int(doc, "minishard_bits", 0, _MAX_MINISHARD_BITS)
    return {
        "preshift_bits": _get_int(doc, "preshift_bits", 0, 64),
        "hash": _get_choice(doc, "hash", _HASHES, None),
        "minishard_bits": minishard_bits,
        "shard_bits": _get_int(doc, "shard_bits", 0, 64 - minishard_bits),
        "minishard_index_encoding": _get_choice(doc, "minishard_index_encoding", _ENCODINGS, "raw"),
        "data_encoding": _get_choice(doc, "data_encoding", _ENCODINGS, "raw"),
    }


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class ShardingSpec:
    """A validated ``neuroglancer_uint64_sharded_v1`` sharding specification."""

    preshift_bits: int
    hash: HashFunction
    minishard_bits: int
    shard_bits: int
    minishard_index_encoding: Encoding = "raw"
    data_encoding: Encoding = "raw"

    def __post_init__(self) -> None:
        _parse_fields(self.to_json())

    @classmethod
    def from_json(cls, doc: object) -> ShardingSpec:
        """Parse and validate a sharding JSON object; ``InvalidMetadataError`` names the field.

        The two encodings default to ``"raw"`` when absent, as in Neuroglancer and tensorstore.
        """
        return cls(**_parse_fields(doc))

    def to_json(self) -> dict[str, Any]:
        """The sharding JSON object (all fields explicit)."""
        return {
            "@type": SHARDING_TYPE,
            "preshift_bits": self.preshift_bits,
            "hash": self.hash,
            "minishard_bits": self.minishard_bits,
            "shard_bits": self.shard_bits,
            "minishard_index_encoding": self.minishard_index_encoding,
            "data_encoding": self.data_encoding,
        }

    @property
    def num_shards(self) -> int:
        """``2**shard_bits``."""
        return 1 << self.shard_bits

    @property
    def num_minishards(self) -> int:
        """``2**minishard_bits`` (minishards per shard)."""
        return 1 << self.minishard_bits

    # ------------------------------------------------------------------ hashing

    def hash_id(self, chunk_id: int) -> int:
        """Hashed chunk id: the hash of ``chunk_id >> preshift_bits`` (scalar, via ``mmh3``)."""
        if type(chunk_id) is not int or not 0 <= chunk_id <= _MASK64:  # checked when not
            chunk_id = _check_u64(chunk_id, "chunk id")  # plainly a uint64 (fast path)
        shifted = chunk_id >> self.preshift_bits
        if self.hash == "identity":
            return shifted
        return murmurhash3_x86_128_low64(shifted)

    def hash_ids(self, ids: npt.ArrayLike) -> U64Array:
        """Vectorised :meth:`hash_id` over an array of uint64 chunk ids."""
        arr = as_uint64_array(ids)
        if self.preshift_bits >= 64:
            shifted = np.zeros_like(arr)
        else:
            shifted = arr >> np.uint64(self.preshift_bits)
        if self.hash == "identity":
            return shifted
        return murmurhash3_x86_128_low64_array(shifted)

    def shard_and_minishard(self, ids: npt.ArrayLike) -> tuple[U64Array, U64Array]:
        """Vectorised (shard numbers, minishard numbers) of an array of chunk ids."""
        hashed = self.hash_ids(ids)
        minishard = hashed & np.uint64(_low_mask(self.minishard_bits))
        shard = (hashed >> np.uint64(self.minishard_bits)) & np.uint64(_low_mask(self.shard_bits))
        return cast(U64Array, shard), cast(U64Array, minishard)

    def shard_and_minishard_of(self, chunk_id: int) -> tuple[int, int]:
        """(shard number, minishard number) of one chunk id."""
        hashed = self.hash_id(chunk_id)
        bits = self.minishard_bits
        return (hashed >> bits) & ((1 << self.shard_bits) - 1), hashed & ((1 << bits) - 1)

    # ------------------------------------------------------------------ shard files

    @property
    def shard_name_digits(self) -> int:
        """Hex digits of a shard file name: ``ceil(shard_bits / 4)``."""
        return -(-self.shard_bits // 4)

    def shard_filename(self, shard: int) -> str:
        """``<lowercase hex, zero padded to ceil(shard_bits/4)>.shard`` (``0.shard`` if no bits)."""
        if isinstance(shard, bool) or not isinstance(shard, int | np.integer):
            raise TypeError(f"shard must be an int, got {type(shard).__name__}")
        if not 0 <= int(shard) < self.num_shards:
            raise ValueError(f"shard {shard} out of range [0, {self.num_shards})")
        return f"{int(shard):0{self.shard_name_digits}x}.shard"

    def parse_shard_filename(self, name: str) -> int | None:
        """The shard number of ``name``, or ``None`` unless it is exactly a shard file name."""
        digits = max(self.shard_name_digits, 1)
        if not re.fullmatch(f"[0-9a-f]{{{digits}}}\\.shard", name):
            return None
        shard = int(name[:digits], 16)
        return shard if shard < self.num_shards else None


# --------------------------------------------------------------------------- Morton codes


def _grid_shape3(grid_shape: Sequence[int]) -> tuple[int, int, int]:
    if len(grid_shape) != 3 or any(int(s) < 1 for s in grid_shape):
        raise ValueError(f"grid_shape must be 3 positive integers, got {tuple(grid_shape)}")
    return int(grid_shape[0]), int(grid_shape[1]), int(grid_shape[2])


def compressed_morton_bits(grid_shape: Sequence[int]) -> tuple[int, int, int]:
    """Bits per dimension of a compressed Morton code: ``bit_length(grid_shape[d] - 1)``."""
    x, y, z = morton_bits(_grid_shape3(grid_shape))
    return x, y, z


def compressed_morton_code(grid_pos: npt.ArrayLike, grid_shape: Sequence[int]) -> U64Array:
    """Compressed Morton codes (chunk ids) of ``(..., 3)`` x y z grid positions.

    :func:`~asyncshard.formats.morton.morton_codes` on a 3-d grid; ``InvalidMetadataError``
    when the grid needs more than 64 bits, ``ValueError`` for positions outside it.
    """
    return morton_codes(grid_pos, _checked_grid(grid_shape))


def decode_compressed_morton(codes: npt.ArrayLike, grid_shape: Sequence[int]) -> U64Array:
    """Inverse of :func:`compressed_morton_code`: ``(..., 3)`` grid positions."""
    return decode_morton_codes(as_uint64_array(codes, "chunk ids"), _checked_grid(grid_shape))


def _checked_grid(grid_shape: Sequence[int]) -> tuple[int, int, int]:
    shape = _grid_shape3(grid_shape)
    bits = compressed_morton_bits(shape)
    if sum(bits) > 64:
        raise InvalidMetadataError(
            f"grid shape {shape} needs {sum(bits)} bits: chunk ids exceed 64 bits"
        )
    return shape
