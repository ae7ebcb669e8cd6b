"""Neuroglancer precomputed volumes: the ``info`` file and the chunk name / chunk id mapping.

Pure: frozen dataclasses parsed from JSON, and grid arithmetic. Unsharded chunks are named
``x0-x1_y0-y1_z0-z1`` (voxel coordinates offset by ``voxel_offset``, clipped at the volume
edge); sharded chunks are identified by the compressed Morton code of their grid position.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.morton import decode_morton, morton_code_inside
from asyncshard.formats.precomputed.spec import (
    ShardingSpec,
    U64Array,
    compressed_morton_bits,
    compressed_morton_code,
    decode_compressed_morton,
)

__all__ = [
    "DATA_TYPES",
    "ENCODINGS",
    "VOLUME_TYPE",
    "GridPos",
    "Scale",
    "VolumeInfo",
    "unsharded_info",
    "unsharded_info_bytes",
]

VOLUME_TYPE = "neuroglancer_multiscale_volume"
"""The optional ``@type`` of a precomputed volume ``info`` file."""
DATA_TYPES: tuple[str, ...] = (
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32",
)  # fmt: skip
ENCODINGS: tuple[str, ...] = ("raw", "jpeg", "png", "compressed_segmentation", "compresso", "jxl")

GridPos = tuple[int, int, int]
_Vec3 = tuple[int, int, int]
_INDEX_LIMIT = 2**62  # tensorstore's finite index range
# Voxel coordinates lie within ±2**62 (19 digits): a longer number is no chunk name (and
# would make ``int()`` fail past 4300 digits), so the digit counts are bounded.
_COORD = r"(-?[0-9]{1,19})"
_CHUNK_NAME = re.compile(rf"{_COORD}-{_COORD}_{_COORD}-{_COORD}_{_COORD}-{_COORD}")
_SCALE_FIELDS = frozenset(
    {"key", "size", "voxel_offset", "chunk_sizes", "encoding", "resolution", "sharding",
     "compressed_segmentation_block_size"}
)  # fmt: skip
_INFO_FIELDS = frozenset({"@type", "type", "data_type", "num_channels", "scales"})


# --------------------------------------------------------------------------- JSON helpers


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_vec3(value: object, where: str, minimum: int | None) -> _Vec3:
    bound = "" if minimum is None else f" >= {minimum}"
    ok = isinstance(value, list | tuple) and len(value) == 3 and all(_is_int(v) for v in value)
    if not ok or (minimum is not None and min(cast(Sequence[int], value)) < minimum):
        raise InvalidMetadataError(f"{where} must be a list of 3 integers{bound}, got {value!r}")
    x, y, z = cast(Sequence[int], value)
    return x, y, z


def _finite(v: object) -> bool:
    """Whether ``v`` is a number a float holds (an int too large for one is not)."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _float_vec3(value: object, where: str) -> tuple[float, float, float]:
    ok = isinstance(value, list | tuple) and len(value) == 3
    ok = ok and all(_finite(v) for v in cast(Sequence[object], value))
    if not ok:
        shown = repr(value)
        shown = shown if len(shown) <= 200 else shown[:200] + "..."
        raise InvalidMetadataError(f"{where} must be a list of 3 finite numbers, got {shown}")
    x, y, z = (float(v) for v in cast(Sequence[float], value))
    return x, y, z


def _require(doc: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in doc:
        raise InvalidMetadataError(
            f"{where}.{name} is required" if where else f"{name} is required"
        )
    return doc[name]


def _choice(value: object, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise InvalidMetadataError(f"{where} must be one of {', '.join(choices)}, got {value!r}")
    return value


# --------------------------------------------------------------------------- scale


@dataclass(frozen=True)
class Scale:
    """One scale (resolution level) of a precomputed volume."""

    key: str
    size: _Vec3
    chunk_sizes: tuple[_Vec3, ...]
    encoding: str
    voxel_offset: _Vec3 = (0, 0, 0)
    resolution: tuple[float, float, float] | None = None
    sharding: ShardingSpec | None = None
    compressed_segmentation_block_size: _Vec3 | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_json(cls, doc: object, where: str = "scale") -> Scale:
        """Parse one entry of ``scales``; ``InvalidMetadataError`` names ``where`` and the field."""
        if not isinstance(doc, Mapping):
            raise InvalidMetadataError(f"{where} must be a JSON object, got {doc!r}")
        key = _require(doc, "key", where)
        if not isinstance(key, str) or not key:
            raise InvalidMetadataError(f"{where}.key must be a non-empty string, got {key!r}")
        chunk_sizes = _require(doc, "chunk_sizes", where)
        if not isinstance(chunk_sizes, list) or not chunk_sizes:
            raise InvalidMetadataError(
                f"{where}.chunk_sizes must be a non-empty list of [x, y, z], got {chunk_sizes!r}"
            )
        encoding = _choice(_require(doc, "encoding", where), ENCODINGS, f"{where}.encoding")
        scale = cls(
            key=key,
            size=_int_vec3(_require(doc, "size", where), f"{where}.size", 1),
            chunk_sizes=tuple(
                _int_vec3(c, f"{where}.chunk_sizes[{i}]", 1) for i, c in enumerate(chunk_sizes)
            ),
            encoding=encoding,
            voxel_offset=_int_vec3(
                doc.get("voxel_offset", [0, 0, 0]), f"{where}.voxel_offset", None
            ),
            resolution=_optional(doc, "resolution", where, _float_vec3),
            sharding=_parse_sharding(doc.get("sharding"), f"{where}.sharding"),
            compressed_segmentation_block_size=_parse_block_size(doc, encoding, where),
            extra={k: v for k, v in doc.items() if k not in _SCALE_FIELDS},
        )
        scale.validate(where)
        return scale

    def validate(self, where: str = "scale") -> None:
        """Check cross-field constraints (bounds, sharded chunk layout)."""
        for d in range(3):
            lo, hi = self.voxel_offset[d], self.voxel_offset[d] + self.size[d]
            if lo <= -_INDEX_LIMIT or hi >= _INDEX_LIMIT:
                raise InvalidMetadataError(
                    f"{where}.voxel_offset and {where}.size leave the index range (±2**62)"
                )
        if self.sharding is None:
            return
        if len(self.chunk_sizes) != 1:
            raise InvalidMetadataError(
                f"{where}.chunk_sizes must hold exactly one chunk size when sharded"
            )
        if sum(self.morton_bits) > 64:
            raise InvalidMetadataError(
                f"{where}.size / {where}.chunk_sizes give a grid {self.grid_shape} whose "
                "chunk ids need more than 64 bits"
            )

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this scale (unknown fields preserved)."""
        doc: dict[str, Any] = dict(self.extra)
        doc.update(
            key=self.key,
            size=list(self.size),
            voxel_offset=list(self.voxel_offset),
            chunk_sizes=[list(c) for c in self.chunk_sizes],
            encoding=self.encoding,
        )
        if self.resolution is not None:
            doc["resolution"] = list(self.resolution)
        if self.sharding is not None:
            doc["sharding"] = self.sharding.to_json()
        if self.compressed_segmentation_block_size is not None:
            doc["compressed_segmentation_block_size"] = list(
                self.compressed_segmentation_block_size
            )
        return doc

    # ------------------------------------------------------------------ grid

    @property
    def chunk_size(self) -> _Vec3:
        """The chunk size used for names and ids: the first of ``chunk_sizes``."""
        return self.chunk_sizes[0]

    @functools.cached_property  # a frozen dataclass: computed once, on every chunk read
    def grid_shape(self) -> _Vec3:
        """Chunks per dimension: ``ceil(size / chunk_size)``."""
        x, y, z = (-(-s // c) for s, c in zip(self.size, self.chunk_size, strict=True))
        return x, y, z

    @functools.cached_property
    def morton_bits(self) -> _Vec3:
        """Bits per dimension of this scale's compressed Morton chunk ids."""
        return compressed_morton_bits(self.grid_shape)

    def _check_pos(self, grid_pos: Sequence[int]) -> GridPos:
        if len(grid_pos) != 3 or not all(_is_int(p) or isinstance(p, np.integer) for p in grid_pos):
            raise ValueError(f"grid position must be 3 integers, got {grid_pos!r}")
        x, y, z = (int(p) for p in grid_pos)
        if not all(0 <= p < g for p, g in zip((x, y, z), self.grid_shape, strict=True)):
            raise ValueError(f"grid position {(x, y, z)} outside the grid {self.grid_shape}")
        return x, y, z

    def chunk_bounds(self, grid_pos: Sequence[int]) -> tuple[_Vec3, _Vec3]:
        """Voxel ``(start, stop)`` of a chunk, offset by ``voxel_offset``, clipped at the edge."""
        pos = self._check_pos(grid_pos)
        start = [o + p * c for o, p, c in zip(self.voxel_offset, pos, self.chunk_size, strict=True)]
        stop = [
            min(b + c, o + s)
            for b, c, o, s in zip(start, self.chunk_size, self.voxel_offset, self.size, strict=True)
        ]
        return (start[0], start[1], start[2]), (stop[0], stop[1], stop[2])

    def chunk_shape(self, grid_pos: Sequence[int]) -> _Vec3:
        """Voxel shape (x, y, z) of a chunk, smaller than ``chunk_size`` at the volume edge."""
        start, stop = self.chunk_bounds(grid_pos)
        x, y, z = (b - a for a, b in zip(start, stop, strict=True))
        return x, y, z

    def chunk_name(self, grid_pos: Sequence[int]) -> str:
        """Unsharded chunk file name ``x0-x1_y0-y1_z0-z1``."""
        start, stop = self.chunk_bounds(grid_pos)
        return "_".join(f"{a}-{b}" for a, b in zip(start, stop, strict=True))

    def parse_chunk_name(self, name: str) -> GridPos | None:
        """Grid position named by ``name``, or ``None`` unless it is exactly a chunk name here.

        Never raises: a name with an over-long number (more than 19 digits, beyond the
        ±2**62 index range) is not a chunk name.
        """
        match = _CHUNK_NAME.fullmatch(name)
        if match is None:
            return None
        sx, sy, sz = int(match[1]), int(match[3]), int(match[5])
        ox, oy, oz = self.voxel_offset
        cx, cy, cz = self.chunk_size
        x, rx = divmod(sx - ox, cx)
        y, ry = divmod(sy - oy, cy)
        z, rz = divmod(sz - oz, cz)
        gx, gy, gz = self.grid_shape
        if rx or ry or rz or not (0 <= x < gx and 0 <= y < gy and 0 <= z < gz):
            return None
        # the exact name of that chunk (clipped at the edge; no leading zeros or signs)
        ex, ey, ez = self._ends
        canonical = f"{sx}-{min(sx + cx, ex)}_{sy}-{min(sy + cy, ey)}_{sz}-{min(sz + cz, ez)}"
        return (x, y, z) if canonical == name else None

    def chunk_id_of_name(self, name: str) -> int | None:
        """:meth:`chunk_id` of the chunk ``name`` names; ``None`` unless it is exactly a
        chunk name here (see :meth:`parse_chunk_name`)."""
        pos = self.parse_chunk_name(name)
        return None if pos is None else morton_code_inside(pos, self.grid_shape)

    @functools.cached_property
    def _ends(self) -> _Vec3:
        """The voxel coordinates one past the volume's end."""
        ox, oy, oz = self.voxel_offset
        sx, sy, sz = self.size
        return ox + sx, oy + sy, oz + sz

    def chunk_id(self, grid_pos: Sequence[int]) -> int:
        """Sharded chunk id of a grid position: its compressed Morton code."""
        return morton_code_inside(self._check_pos(grid_pos), self.grid_shape)

    def grid_pos_of(self, chunk_id: int) -> GridPos:
        """Grid position of a chunk id; ``ValueError`` if no chunk of this scale has that id."""
        if not isinstance(chunk_id, int | np.integer):
            raise ValueError(f"chunk id must be an integer, got {chunk_id!r}")
        x, y, z = decode_morton(int(chunk_id), self.grid_shape)
        return x, y, z

    def chunk_ids(self, grid_positions: npt.ArrayLike) -> U64Array:
        """Vectorised :meth:`chunk_id` over an ``(n, 3)`` array of grid positions."""
        return compressed_morton_code(grid_positions, self.grid_shape)

    def grid_positions_of(self, chunk_ids: npt.ArrayLike) -> U64Array:
        """Vectorised :meth:`grid_pos_of`: an ``(n, 3)`` array of grid positions."""
        return decode_compressed_morton(chunk_ids, self.grid_shape)


def _optional(doc: Mapping[str, Any], name: str, where: str, parse: Any) -> Any:
    value = doc.get(name)
    return None if value is None else parse(value, f"{where}.{name}")


def _parse_sharding(value: object, where: str) -> ShardingSpec | None:
    if value is None:
        return None
    try:
        return ShardingSpec.from_json(value)
    except InvalidMetadataError as exc:
        raise InvalidMetadataError(f"{where}: {exc}") from exc


def _parse_block_size(doc: Mapping[str, Any], encoding: str, where: str) -> _Vec3 | None:
    name = "compressed_segmentation_block_size"
    if encoding == "compressed_segmentation" and name not in doc:
        raise InvalidMetadataError(f"{where}.{name} is required by compressed_segmentation")
    return cast(_Vec3 | None, _optional(doc, name, where, lambda v, w: _int_vec3(v, w, 1)))


# --------------------------------------------------------------------------- info


@dataclass(frozen=True)
class VolumeInfo:
    """A precomputed volume ``info`` file."""

    type: str
    data_type: str
    num_channels: int
    scales: tuple[Scale, ...]
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_json(cls, doc: object) -> VolumeInfo:
        """Parse and validate an ``info`` JSON object; ``InvalidMetadataError`` names the field."""
        if not isinstance(doc, Mapping):
            raise InvalidMetadataError(f"info must be a JSON object, got {doc!r}")
        if doc.get("@type", VOLUME_TYPE) != VOLUME_TYPE:
            raise InvalidMetadataError(f"@type must be {VOLUME_TYPE!r}, got {doc['@type']!r}")
        vtype = _require(doc, "type", "")
        if not isinstance(vtype, str) or not vtype:
            raise InvalidMetadataError(f"type must be a non-empty string, got {vtype!r}")
        num_channels = _require(doc, "num_channels", "")
        if not _is_int(num_channels) or num_channels < 1:
            raise InvalidMetadataError(
                f"num_channels must be an integer >= 1, got {num_channels!r}"
            )
        scales = _require(doc, "scales", "")
        if not isinstance(scales, list) or not scales:
            raise InvalidMetadataError(f"scales must be a non-empty list, got {scales!r}")
        return cls(
            type=vtype,
            data_type=_choice(_require(doc, "data_type", ""), DATA_TYPES, "data_type"),
            num_channels=num_channels,
            scales=tuple(Scale.from_json(s, f"scales[{i}]") for i, s in enumerate(scales)),
            extra={k: v for k, v in doc.items() if k not in _INFO_FIELDS},
        )

    def to_json(self) -> dict[str, Any]:
        """The ``info`` JSON object (unknown fields preserved)."""
        doc: dict[str, Any] = dict(self.extra)
        doc.update(
            {
                "@type": VOLUME_TYPE,
                "type": self.type,
                "data_type": self.data_type,
                "num_channels": self.num_channels,
                "scales": [s.to_json() for s in self.scales],
            }
        )
        return doc

    @property
    def dtype(self) -> np.dtype[Any]:
        """The little-endian numpy dtype of one voxel channel."""
        return np.dtype(self.data_type).newbyteorder("<")

    def scale(self, key: str) -> Scale:
        """The scale with this ``key``; ``KeyError`` if there is none."""
        for scale in self.scales:
            if scale.key == key:
                return scale
        raise KeyError(key)

    def max_chunk_nbytes(self, scale: Scale) -> int:
        """The most bytes one stored chunk of ``scale`` may hold once gunzipped.

        A ``raw`` chunk holds exactly its voxels (a full chunk at most); the other
        encodings compress, and twice the raw size plus 64 KiB bounds even worst-case
        compressed segmentation. A gzip bomb in a shard cannot expand past this.
        """
        raw = math.prod(scale.chunk_size) * self.num_channels * self.dtype.itemsize
        return raw if scale.encoding == "raw" else 2 * raw + 65536


def unsharded_info(info_doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a volume ``info`` JSON object with ``sharding`` removed from every scale.

    Unknown members are kept as they are; ``info_doc`` is not modified.
    """
    if not isinstance(info_doc, Mapping):
        raise InvalidMetadataError(f"info must be a JSON object, got {type(info_doc).__name__}")
    doc = copy.deepcopy(dict(info_doc))
    scales = doc.get("scales")
    if isinstance(scales, list):
        for scale in scales:
            if isinstance(scale, dict):
                scale.pop("sharding", None)
    return doc


def unsharded_info_bytes(info_doc: Mapping[str, Any]) -> bytes:
    """The served bytes of :func:`unsharded_info`: the one rendering of an unsharded
    ``info``, so that every entry point serves the same bytes."""
    return json.dumps(unsharded_info(info_doc), indent=2).encode()
