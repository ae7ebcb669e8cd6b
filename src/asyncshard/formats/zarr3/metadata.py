"""Zarr array metadata -> :class:`ShardingLayout`: shard grid, key encoding and index codecs.

Two sources are understood:

* Zarr v3 ``zarr.json`` with the ``sharding_indexed`` codec (:func:`parse_zarr3_array`);
  keys are relative to the array folder (``c/0/1``), shard and inner-chunk keys share the
  chunk key encoding.
* The draft sharding storage transformer (:func:`parse_draft_transformer`); keys are
  ``data/root/<array_path>/c0/1``, the index sits at the end, little-endian, no checksum.

A :class:`ShardingLayout` translates inner-chunk keys (the array's chunk key encoding over
the inner-chunk grid) to shard keys (the same encoding over ``coords // chunks_per_shard``)
and positions within the shard. Everything here is pure.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, SupportsIndex

import numpy as np
import numpy.typing as npt

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.zarr3.shard import IndexLayout

__all__ = [
    "DRAFT_SHARDING_URI",
    "ChunkKeyEncoding",
    "ShardingLayout",
    "consolidated_arrays",
    "is_sharded",
    "map_back_consolidated",
    "map_back_metadata",
    "parse_draft_transformer",
    "parse_zarr3_array",
    "sharded_metadata",
    "unsharded_consolidated",
    "unsharded_metadata",
]

DRAFT_SHARDING_URI = "https://purl.org/zarr/spec/storage_transformers/sharding/1.0"
_DRAFT_NAMES = frozenset(
    {"sharding", "indexed", DRAFT_SHARDING_URI, DRAFT_SHARDING_URI.replace("https:", "http:")}
)
_DRAFT_NAME_FIELDS = ("name", "type", "storage_transformer", "extension")
_SHARDING = "sharding_indexed"
# Canonical non-negative decimals small enough to be real coordinates (< 10**20); longer
# digit strings are "not a chunk key" rather than a huge int (or a ValueError past 4300).
#: More inner chunks per shard than this is refused: its index alone would be 256 MiB.
MAX_CHUNKS_PER_SHARD = 2**24
#: Array dimensions are int64, as in zarr-python and tensorstore.
_INT64_END = 2**63

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
        parts = [str(operator.index(c)) for c in coords]
        sep = self.separator
        if self.kind == "default":
            body = sep.join(["c", *parts])
        elif self.kind == "v2":
            body = sep.join(parts) or "0"
        else:
            body = "c" + sep.join(parts)
        return self.prefix + body

    def decode(self, key: str, ndim: int) -> Coords | None:
        """Coordinates named by ``key``, or ``None`` if it is not a key of this encoding.

        Strict: exactly ``ndim`` canonical non-negative decimal integers (no sign, spaces,
        leading zeros or non-ASCII digits), so ``encode(decode(key)) == key``.
        """
        match = _key_pattern(self.kind, self.separator, self.prefix, ndim).fullmatch(key)
        return None if match is None else tuple(map(int, match.groups()))


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


@dataclass(frozen=True)
class ShardingLayout:
    """A sharded array's geometry and key translation (inner-chunk keys <-> shard keys)."""

    shape: Coords
    shard_shape: Coords
    chunk_shape: Coords
    chunks_per_shard: Coords
    index: IndexLayout
    key_encoding: ChunkKeyEncoding = field(default_factory=ChunkKeyEncoding)

    def __post_init__(self) -> None:
        ndim = len(self.shape)
        shapes = (self.shard_shape, self.chunk_shape, self.chunks_per_shard)
        if any(v >= _INT64_END for dims in (self.shape, *shapes) for v in dims):
            raise InvalidMetadataError("array dimensions must be below 2**63 (int64)")
        if any(len(s) != ndim for s in shapes):
            raise InvalidMetadataError(
                f"shape, shard_shape, chunk_shape and chunks_per_shard must all have "
                f"{ndim} dimensions"
            )
        if any(s < 0 for s in self.shape) or any(c <= 0 for c in self.chunk_shape):
            raise InvalidMetadataError("shape must be >= 0 and chunk_shape > 0")
        product = tuple(c * n for c, n in zip(self.chunk_shape, self.chunks_per_shard, strict=True))
        if product != self.shard_shape:
            raise InvalidMetadataError(
                f"shard_shape {self.shard_shape} != chunk_shape {self.chunk_shape} * "
                f"chunks_per_shard {self.chunks_per_shard}"
            )
        n_chunks = math.prod(self.chunks_per_shard)
        if n_chunks > MAX_CHUNKS_PER_SHARD:
            raise InvalidMetadataError(
                f"chunks_per_shard {list(self.chunks_per_shard)}: {n_chunks} inner chunks per "
                f"shard exceeds the supported {MAX_CHUNKS_PER_SHARD}"
            )
        if self.index.chunks_per_shard != self.chunks_per_shard:
            raise InvalidMetadataError("index.chunks_per_shard differs from chunks_per_shard")

    @property
    def ndim(self) -> int:
        """Number of array dimensions."""
        return len(self.shape)

    @functools.cached_property
    def chunk_grid_shape(self) -> Coords:
        """Number of inner chunks along each dimension (ceil division)."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape, strict=True))

    @functools.cached_property
    def shard_grid_shape(self) -> Coords:
        """Number of shards along each dimension (ceil division)."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.shard_shape, strict=True))

    def _checked(self, coords: CoordsLike, what: str) -> Coords:
        try:
            out = tuple(operator.index(c) for c in coords)
        except TypeError:
            raise ValueError(f"{what} {tuple(coords)} are not integers") from None
        if len(out) != self.ndim or any(c < 0 for c in out):
            raise ValueError(f"{what} {tuple(coords)} is not {self.ndim} non-negative ints")
        return out

    def chunk_key(self, coords: CoordsLike) -> str:
        """Key of the inner chunk at ``coords`` (inner-chunk grid)."""
        return self.key_encoding.encode(self._checked(coords, "chunk coords"))

    def parse_chunk_key(self, key: str) -> Coords | None:
        """Inner-chunk coords of ``key``, or ``None`` if it is not a chunk key of this array.

        Syntax only: coords past the current array bounds are returned (arrays can be
        resized); use :meth:`chunk_in_bounds` to check them.
        """
        return self.key_encoding.decode(key, self.ndim)

    def shard_key(self, shard_coords: CoordsLike) -> str:
        """Key of the shard at ``shard_coords`` (shard grid)."""
        return self.key_encoding.encode(self._checked(shard_coords, "shard coords"))

    def parse_shard_key(self, key: str) -> Coords | None:
        """Shard coords of ``key``, or ``None`` (shard keys share the chunk key syntax)."""
        return self.key_encoding.decode(key, self.ndim)

    def shard_of(self, coords: CoordsLike) -> tuple[Coords, Coords]:
        """``(shard_coords, position_in_shard)`` of the inner chunk at ``coords``."""
        c = self._checked(coords, "chunk coords")
        pairs = [divmod(x, n) for x, n in zip(c, self.chunks_per_shard, strict=True)]
        return tuple(q for q, _ in pairs), tuple(r for _, r in pairs)

    def chunk_coords(self, shard_coords: CoordsLike, position: CoordsLike) -> Coords:
        """Inverse of :meth:`shard_of`: inner-chunk coords from shard coords and position."""
        s = self._checked(shard_coords, "shard coords")
        p = self._checked(position, "position")
        cps = self.chunks_per_shard
        if any(x >= n for x, n in zip(p, cps, strict=True)):
            raise ValueError(f"position {p} is outside chunks_per_shard {cps}")
        return tuple(a * n + b for a, n, b in zip(s, cps, p, strict=True))

    def locate(self, chunk_key: str) -> tuple[str, Coords] | None:
        """``(shard_key, position_in_shard)`` for an inner-chunk key, ``None`` otherwise."""
        coords = self.parse_chunk_key(chunk_key)
        if coords is None:
            return None
        shard, position = self.shard_of(coords)
        return self.key_encoding.encode(shard), position

    def chunk_in_bounds(self, coords: CoordsLike) -> bool:
        """Whether the inner chunk at ``coords`` overlaps the array."""
        return _inside(coords, self.chunk_grid_shape)

    def shard_in_bounds(self, shard_coords: CoordsLike) -> bool:
        """Whether the shard at ``shard_coords`` overlaps the array."""
        return _inside(shard_coords, self.shard_grid_shape)

    def chunks_in_shard(self, shard_coords: CoordsLike) -> list[Coords]:
        """Inner-chunk coords (C order) of a shard that lie inside the array.

        Edge shards hold fewer real chunks than ``chunks_per_shard`` (their index is still
        full); a shard outside the array holds none.
        """
        s = self._checked(shard_coords, "shard coords")
        grid = self.chunk_grid_shape
        start = [a * n for a, n in zip(s, self.chunks_per_shard, strict=True)]
        counts = [
            max(0, min(n, g - b))
            for b, n, g in zip(start, self.chunks_per_shard, grid, strict=True)
        ]
        if self.ndim == 0:
            return [()]
        cells = np.indices(counts).reshape(self.ndim, -1).T + np.asarray(start)
        return [tuple(row) for row in cells.tolist()]

    def split_chunk_coords(
        self, coords: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Vectorised :meth:`shard_of`: ``(n, ndim)`` coords -> shard coords and positions."""
        arr = np.asarray(coords, dtype=np.int64)
        if arr.ndim != 2 or arr.shape[1] != self.ndim:
            raise ValueError(f"expected chunk coords of shape (n, {self.ndim}), got {arr.shape}")
        if (arr < 0).any():
            raise ValueError("chunk coords must be non-negative")
        cps = np.asarray(self.chunks_per_shard, dtype=np.int64)
        shards, positions = np.divmod(arr, cps)
        return shards, positions


# --------------------------------------------------------------------------- helpers


def _inside(coords: CoordsLike, grid: Coords) -> bool:
    return len(coords) == len(grid) and all(
        0 <= operator.index(c) < g for c, g in zip(coords, grid, strict=True)
    )


def _get(doc: Mapping[str, Any], name: str, path: str) -> Any:
    if name not in doc:
        raise InvalidMetadataError(f"{path}{name}: missing")
    return doc[name]


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidMetadataError(f"{path}: expected a JSON object, got {value!r}")
    return value


def _list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise InvalidMetadataError(f"{path}: expected a list, got {value!r}")
    return list(value)


def _int_tuple(value: object, path: str, *, minimum: int, ndim: int | None = None) -> Coords:
    items = _list(value, path)
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and minimum <= v < _INT64_END for v in items
    ):
        raise InvalidMetadataError(
            f"{path}: expected integers in [{minimum}, 2**63), got {str(value)[:200]}"
        )
    if ndim is not None and len(items) != ndim:
        raise InvalidMetadataError(f"{path}: expected {ndim} dimensions, got {len(items)}")
    return tuple(items)


def _codec(entry: object, path: str) -> tuple[str, Mapping[str, Any]]:
    """``(name, configuration)`` of a codec given as an object or a bare name string."""
    if isinstance(entry, str):
        return entry, {}
    obj = _mapping(entry, path)
    name = _get(obj, "name", f"{path}.")
    if not isinstance(name, str):
        raise InvalidMetadataError(f"{path}.name: expected a string, got {name!r}")
    config = obj.get("configuration", {})
    return name, _mapping(config, f"{path}.configuration")


def _separator(value: object, path: str) -> Separator:
    if value == "/":
        return "/"
    if value == ".":
        return "."
    raise InvalidMetadataError(f"{path}: separator must be '/' or '.', got {value!r}")


def _zarr3_array(doc: object) -> tuple[Mapping[str, Any], Coords]:
    """Check the v3 array basics; return the doc and its shape."""
    meta = _mapping(doc, "metadata")
    if _get(meta, "zarr_format", "") != 3:
        raise InvalidMetadataError(f"zarr_format: expected 3, got {meta['zarr_format']!r}")
    if _get(meta, "node_type", "") != "array":
        raise InvalidMetadataError(f"node_type: expected 'array', got {meta['node_type']!r}")
    if meta.get("storage_transformers"):
        raise InvalidMetadataError("storage_transformers: not supported in a zarr.json")
    return meta, _int_tuple(_get(meta, "shape", ""), "shape", minimum=0)


def _regular_grid(meta: Mapping[str, Any], ndim: int) -> Coords:
    grid = _mapping(_get(meta, "chunk_grid", ""), "chunk_grid")
    name, config = _codec(grid, "chunk_grid")
    if name != "regular":
        raise InvalidMetadataError(f"chunk_grid.name: only 'regular' is supported, got {name!r}")
    path = "chunk_grid.configuration.chunk_shape"
    return _int_tuple(
        _get(config, "chunk_shape", "chunk_grid.configuration."), path, minimum=1, ndim=ndim
    )


def _key_encoding(meta: Mapping[str, Any], prefix: str) -> ChunkKeyEncoding:
    name, config = _codec(_get(meta, "chunk_key_encoding", ""), "chunk_key_encoding")
    path = "chunk_key_encoding.configuration.separator"
    if name == "default":
        return ChunkKeyEncoding("default", _separator(config.get("separator", "/"), path), prefix)
    if name == "v2":
        return ChunkKeyEncoding("v2", _separator(config.get("separator", "."), path), prefix)
    raise InvalidMetadataError(f"chunk_key_encoding.name: expected 'default' or 'v2', got {name!r}")


def _sharding_codec(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """The sharding codec's configuration; it must be the only codec."""
    codecs = _list(_get(meta, "codecs", ""), "codecs")
    names = [_codec(c, f"codecs[{i}]")[0] for i, c in enumerate(codecs)]
    if _SHARDING not in names:
        raise InvalidMetadataError(f"codecs: no {_SHARDING} codec, the array is not sharded")
    where = names.index(_SHARDING)
    if where > 0:
        raise InvalidMetadataError(
            f"codecs[0]: array->array codec {names[0]!r} before {_SHARDING} is not supported"
        )
    if len(names) > 1:
        raise InvalidMetadataError(
            f"codecs[1]: codec {names[1]!r} after {_SHARDING} would encode whole shards; "
            "not supported"
        )
    return _codec(codecs[0], "codecs[0]")[1]


def _index_layout(config: Mapping[str, Any], cps: Coords, path: str) -> IndexLayout:
    codecs_path = f"{path}index_codecs"
    codecs = _list(_get(config, "index_codecs", path), codecs_path)
    parsed = [_codec(c, f"{codecs_path}[{i}]") for i, c in enumerate(codecs)]
    if not parsed or parsed[0][0] != "bytes":
        raise InvalidMetadataError(f"{codecs_path}: must start with the 'bytes' codec")
    endian = parsed[0][1].get("endian", "little")
    if endian not in ("little", "big"):
        raise InvalidMetadataError(f"{codecs_path}[0].configuration.endian: got {endian!r}")
    for i, (name, _) in enumerate(parsed[1:], start=1):
        if name != "crc32c" or i != 1:
            raise InvalidMetadataError(
                f"{codecs_path}[{i}]: codec {name!r} is not supported "
                "(only 'bytes' optionally followed by 'crc32c')"
            )
    location = config.get("index_location", "end")
    if location not in ("start", "end"):
        raise InvalidMetadataError(f"{path}index_location: expected 'start' or 'end'")
    return IndexLayout(cps, endian=endian, checksum=len(parsed) == 2, location=location)


def _divide(shard_shape: Coords, chunk_shape: Coords, path: str) -> Coords:
    if any(s % c for s, c in zip(shard_shape, chunk_shape, strict=True)):
        raise InvalidMetadataError(
            f"{path}: inner chunk shape {list(chunk_shape)} does not divide the shard shape "
            f"{list(shard_shape)}"
        )
    return tuple(s // c for s, c in zip(shard_shape, chunk_shape, strict=True))


# --------------------------------------------------------------------------- public API


def is_sharded(doc: Mapping[str, Any]) -> bool:
    """Whether a zarr.json names the ``sharding_indexed`` codec (no further validation)."""
    codecs = doc.get("codecs") if isinstance(doc, Mapping) else None
    if not isinstance(codecs, list):
        return False
    return any(
        c == _SHARDING or (isinstance(c, Mapping) and c.get("name") == _SHARDING) for c in codecs
    )


def parse_zarr3_array(doc: Mapping[str, Any], *, key_prefix: str = "") -> ShardingLayout:
    """Layout of a sharded Zarr v3 array from its ``zarr.json`` document.

    Keys are relative to the array folder unless ``key_prefix`` (e.g. ``"path/to/array/"``)
    is given. Raises ``InvalidMetadataError`` naming the offending field, including when the
    array is not sharded (check :func:`is_sharded` first to tell that case apart).
    """
    meta, shape = _zarr3_array(doc)
    ndim = len(shape)
    shard_shape = _regular_grid(meta, ndim)
    encoding = _key_encoding(meta, key_prefix)
    config = _sharding_codec(meta)
    path = "codecs[0].configuration."
    chunk_shape = _int_tuple(
        _get(config, "chunk_shape", path), f"{path}chunk_shape", minimum=1, ndim=ndim
    )
    cps = _divide(shard_shape, chunk_shape, f"{path}chunk_shape")
    if not _list(_get(config, "codecs", path), f"{path}codecs"):
        raise InvalidMetadataError(f"{path}codecs: must not be empty")
    index = _index_layout(config, cps, path)
    return ShardingLayout(shape, shard_shape, chunk_shape, cps, index, encoding)


def _draft_transformer(meta: Mapping[str, Any], ndim: int) -> Coords:
    """``chunks_per_shard`` from the single sharding storage transformer."""
    transformers = _list(_get(meta, "storage_transformers", ""), "storage_transformers")
    if len(transformers) != 1:
        raise InvalidMetadataError(
            f"storage_transformers: expected exactly one sharding transformer, "
            f"got {len(transformers)}"
        )
    path = "storage_transformers[0]"
    entry = _mapping(transformers[0], path)
    names = [entry[k] for k in _DRAFT_NAME_FIELDS if k in entry]
    if not names or not all(isinstance(n, str) and n in _DRAFT_NAMES for n in names):
        raise InvalidMetadataError(f"{path}: not the sharding transformer: {names!r}")
    config = _mapping(_get(entry, "configuration", f"{path}."), f"{path}.configuration")
    if config.get("format", "indexed") != "indexed":
        raise InvalidMetadataError(f"{path}.configuration.format: only 'indexed' is supported")
    return _int_tuple(
        _get(config, "chunks_per_shard", f"{path}.configuration."),
        f"{path}.configuration.chunks_per_shard",
        minimum=1,
        ndim=ndim,
    )


def parse_draft_transformer(doc: Mapping[str, Any], array_path: str) -> ShardingLayout:
    """Layout of an array using the draft sharding storage transformer (specs 003/004).

    ``chunk_grid.chunk_shape`` is the inner chunk shape; keys look like
    ``data/root/<array_path>/c<i><sep><j>``; the index is at the end, little-endian,
    without checksum.
    """
    meta = _mapping(doc, "metadata")
    shape = _int_tuple(_get(meta, "shape", ""), "shape", minimum=0)
    ndim = len(shape)
    grid = _mapping(_get(meta, "chunk_grid", ""), "chunk_grid")
    kind = grid.get("type", grid.get("name", "regular"))
    if kind != "regular":
        raise InvalidMetadataError(f"chunk_grid.type: only 'regular' is supported, got {kind!r}")
    chunk_shape = _int_tuple(
        _get(grid, "chunk_shape", "chunk_grid."), "chunk_grid.chunk_shape", minimum=1, ndim=ndim
    )
    separator = _separator(grid.get("separator", "/"), "chunk_grid.separator")
    cps = _draft_transformer(meta, ndim)
    shard_shape = tuple(c * n for c, n in zip(chunk_shape, cps, strict=True))
    path = array_path.strip("/")
    prefix = f"data/root/{path}/" if path else "data/root/"
    index = IndexLayout(cps, endian="little", checksum=False, location="end")
    encoding = ChunkKeyEncoding("draft", separator, prefix)
    return ShardingLayout(shape, shard_shape, chunk_shape, cps, index, encoding)


def _with_chunk_shape(meta: Mapping[str, Any], chunk_shape: Coords) -> dict[str, Any]:
    out = copy.deepcopy(dict(meta))
    grid = dict(out["chunk_grid"])
    grid["configuration"] = {**grid.get("configuration", {}), "chunk_shape": list(chunk_shape)}
    out["chunk_grid"] = grid
    return out


def unsharded_metadata(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The same zarr.json describing the flat layout: inner chunks become the chunks.

    ``chunk_grid`` gets the inner chunk shape and ``codecs`` the sharding codec's inner
    codecs; every other member is kept.
    """
    layout = parse_zarr3_array(doc)
    out = _with_chunk_shape(doc, layout.chunk_shape)
    out["codecs"] = copy.deepcopy(list(_sharding_codec(doc)["codecs"]))
    return out


def sharded_metadata(
    doc: Mapping[str, Any],
    chunks_per_shard: Sequence[int],
    *,
    index_location: Literal["start", "end"] = "end",
    checksum: bool = True,
) -> dict[str, Any]:
    """Inverse of :func:`unsharded_metadata`: wrap a flat array's codecs into sharding.

    The flat chunk shape becomes the inner chunk shape; shards are
    ``chunk_shape * chunks_per_shard``; the index is little-endian, with crc32c if
    ``checksum``.
    """
    meta, shape = _zarr3_array(doc)
    chunk_shape = _regular_grid(meta, len(shape))
    _key_encoding(meta, "")
    if is_sharded(meta):
        raise InvalidMetadataError("codecs: the array is already sharded")
    codecs = _list(_get(meta, "codecs", ""), "codecs")
    cps = tuple(int(n) for n in chunks_per_shard)
    if len(cps) != len(shape) or any(n < 1 for n in cps):
        raise ValueError(f"chunks_per_shard {cps} must be {len(shape)} positive ints")
    if index_location not in ("start", "end"):
        raise ValueError(f"index_location must be 'start' or 'end', got {index_location!r}")
    index_codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if checksum:
        index_codecs.append({"name": "crc32c"})
    sharding = {
        "name": _SHARDING,
        "configuration": {
            "chunk_shape": list(chunk_shape),
            "codecs": copy.deepcopy(codecs),
            "index_codecs": index_codecs,
            "index_location": index_location,
        },
    }
    out = _with_chunk_shape(meta, tuple(c * n for c, n in zip(chunk_shape, cps, strict=True)))
    out["codecs"] = [sharding]
    parse_zarr3_array(out)
    return out


#: Members of a ``zarr.json`` written through an unsharded view that map back onto the
#: sharded document; every other member must stay what the view presented.
MAPPED_MEMBERS = ("shape", "attributes", "dimension_names", "fill_value")
#: Values of optional members when they are absent.
_DEFAULTS: dict[str, Any] = {"attributes": {}, "storage_transformers": [], "dimension_names": None}
_KEY_SEPARATORS = {"default": "/", "v2": "."}


def _named(value: Any) -> Any:
    """A named configuration (codec, grid, key encoding) spelled canonically: a bare name
    becomes ``{"name": ...}`` and an empty ``configuration`` is dropped."""
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if not (k == "configuration" and v == {})}
    return value


def _member(doc: Mapping[str, Any], name: str) -> Any:
    """Member ``name`` of a zarr.json, spelled canonically, defaults filled in."""
    value = doc.get(name, _DEFAULTS.get(name))
    if name in ("codecs", "storage_transformers") and isinstance(value, list | tuple):
        return [_named(v) for v in value]
    if name == "chunk_grid":
        return _named(value)
    if name == "chunk_key_encoding":
        value = _named(value)
        if isinstance(value, Mapping) and value.get("name") in _KEY_SEPARATORS:
            config = value.get("configuration") or {}
            config = {"separator": _KEY_SEPARATORS[value["name"]], **config}
            value = {**value, "configuration": config}
    return value


def _check_mapped(name: str, value: Any, ndim: int) -> None:
    """A mapped member's new value must keep the array's dimensionality."""
    if name == "shape":
        _int_tuple(value, "shape", minimum=0, ndim=ndim)
    elif name == "dimension_names" and value is not None:
        names = _list(value, "dimension_names")
        if len(names) != ndim or not all(n is None or isinstance(n, str) for n in names):
            raise InvalidMetadataError(
                f"dimension_names: expected {ndim} names (strings or null), got {value!r}"
            )
    elif name == "attributes":
        _mapping(value, "attributes")


def map_back_metadata(real: Mapping[str, Any], written: Mapping[str, Any]) -> dict[str, Any]:
    """The sharded ``zarr.json`` to store when ``written`` is written through a view that
    presents ``real`` as :func:`unsharded_metadata` (``real``).

    ``written`` may differ from what the view presents only in :data:`MAPPED_MEMBERS`
    (``shape`` with the same number of dimensions, ``attributes``, ``dimension_names``,
    ``fill_value``); the result is ``real`` with those members replaced and keeps its
    chunk grid (the shard shape) and sharding codec. Other members are compared after the
    spellings the spec allows are normalised (bare codec names, empty configurations,
    default key separators, absent optional members), and members ``written`` omits keep
    ``real``'s value. Anything else (chunk shape, codecs, data type, key encoding, node
    type...) raises :class:`~asyncshard.errors.InvalidMetadataError` naming the member.
    """
    layout = parse_zarr3_array(real)
    presented = unsharded_metadata(real)
    doc = _mapping(written, "metadata")
    out = copy.deepcopy(dict(real))
    for name in sorted(set(presented) | set(doc) | set(_DEFAULTS)):
        if _member(doc, name) == _member(presented, name):
            continue
        if name in MAPPED_MEMBERS:
            value = doc.get(name, _DEFAULTS.get(name))
            _check_mapped(name, value, layout.ndim)
            if value is None and name not in doc:
                out.pop(name, None)
            else:
                out[name] = copy.deepcopy(value)
        elif name not in doc:
            continue  # omitted by the writer: the stored value stays
        else:
            raise InvalidMetadataError(_unmappable(name, presented.get(name), doc[name]))
    parse_zarr3_array(out)
    return out


def _unmappable(name: str, presented: Any, written: Any) -> str:
    what = {
        "chunk_grid": "the chunk shape is the inner chunk shape of the shards; reshard with "
        "asyncshard.convert.reshard or rewrite the array",
        "codecs": "the codecs are the inner codecs of the sharding codec; rewrite the array "
        "to change them",
    }.get(
        name,
        "only shape, attributes, dimension_names and fill_value map back onto the sharded metadata",
    )
    return (
        f"{name}: cannot be changed through the unsharded view ({what}): presented "
        f"{json.dumps(presented)[:200]}, written {json.dumps(written)[:200]}"
    )


def _consolidated_entries(doc: Mapping[str, Any], path: str = "") -> list[tuple[str, Any, Any]]:
    """``(path, entries, name)`` of every member of a group's consolidated metadata, nested
    groups' consolidated metadata included (``entries[name]`` is the member's document)."""
    consolidated = doc.get("consolidated_metadata")
    if not isinstance(consolidated, Mapping):
        return []
    entries = consolidated.get("metadata")
    if not isinstance(entries, Mapping):
        return []
    out: list[tuple[str, Any, Any]] = []
    for name, member in entries.items():
        out.append((path + name, entries, name))
        if isinstance(member, Mapping) and member.get("node_type") == "group":
            out.extend(_consolidated_entries(member, f"{path}{name}/"))
    return out


def _is_sharded_array(doc: object) -> bool:
    if not isinstance(doc, Mapping) or doc.get("node_type") != "array" or not is_sharded(doc):
        return False
    try:
        parse_zarr3_array(doc)
    except InvalidMetadataError:
        return False
    return True


def consolidated_arrays(doc: Mapping[str, Any]) -> list[str]:
    """Paths (relative to the group) of the arrays in a group's consolidated metadata."""
    return [
        path
        for path, entries, name in _consolidated_entries(doc)
        if isinstance(entries[name], Mapping) and entries[name].get("node_type") == "array"
    ]


def unsharded_consolidated(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A group ``zarr.json`` whose consolidated metadata shows every sharded array as
    :func:`unsharded_metadata` does (what readers of an unsharded view must see instead
    of the arrays' own documents); ``None`` when it names no sharded array."""
    out = copy.deepcopy(dict(doc))
    changed = False
    for _, entries, name in _consolidated_entries(out):
        if _is_sharded_array(entries[name]):
            entries[name] = unsharded_metadata(entries[name])
            changed = True
    return out if changed else None


def map_back_consolidated(
    written: Mapping[str, Any], real: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """A group ``zarr.json`` written through an unsharded view, with the consolidated
    entry of every sharded array (``real``: path -> its stored sharded document) mapped
    back by :func:`map_back_metadata`; other entries are kept as written."""
    out = copy.deepcopy(dict(written))
    for path, entries, name in _consolidated_entries(out):
        stored = real.get(path)
        if stored is not None and isinstance(entries[name], Mapping) and entries[name] != stored:
            try:
                entries[name] = map_back_metadata(stored, entries[name])
            except InvalidMetadataError as exc:
                raise InvalidMetadataError(f"consolidated metadata of {path!r}: {exc}") from None
    return out
