"""Zarr array metadata -> :class:`~asyncshard.formats.zarr3.grid.ShardingLayout` (pure).

Two sources are understood:

* Zarr v3 ``zarr.json`` with the ``sharding_indexed`` codec (:func:`parse_zarr3_array`);
  keys are relative to the array folder (``c/0/1``), shard and inner-chunk keys share the
  chunk key encoding.
* The draft sharding storage transformer (:func:`parse_draft_transformer`); keys are
  ``data/root/<array_path>/c0/1``, the index sits at the end, little-endian, no checksum.

Untrusted documents get an ``InvalidMetadataError`` naming the member at fault. The
member readers (:func:`member`, :func:`as_list`, ...) serve the document rewrites in
:mod:`~asyncshard.formats.zarr3.documents` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.zarr3.grid import ShardingLayout
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding, Coords, Separator
from asyncshard.formats.zarr3.shard import IndexLayout

__all__ = [
    "DRAFT_SHARDING_URI",
    "SHARDING_CODEC",
    "as_list",
    "as_mapping",
    "int_tuple",
    "is_sharded",
    "key_encoding",
    "parse_draft_transformer",
    "parse_zarr3_array",
    "regular_grid",
    "required",
    "sharding_codec",
    "zarr3_array",
]

DRAFT_SHARDING_URI = "https://purl.org/zarr/spec/storage_transformers/sharding/1.0"
_DRAFT_NAMES = frozenset(
    {"sharding", "indexed", DRAFT_SHARDING_URI, DRAFT_SHARDING_URI.replace("https:", "http:")}
)
_DRAFT_NAME_FIELDS = ("name", "type", "storage_transformer", "extension")
SHARDING_CODEC = "sharding_indexed"
#: Array dimensions are int64, as in zarr-python and tensorstore.
_INT64_END = 2**63


def required(doc: Mapping[str, Any], name: str, path: str) -> Any:
    """``doc[name]``; missing: ``InvalidMetadataError`` naming ``path + name``."""
    if name not in doc:
        raise InvalidMetadataError(f"{path}{name}: missing")
    return doc[name]


def as_mapping(value: object, path: str) -> Mapping[str, Any]:
    """``value`` as a JSON object, else ``InvalidMetadataError`` naming ``path``."""
    if not isinstance(value, Mapping):
        raise InvalidMetadataError(f"{path}: expected a JSON object, got {value!r}")
    return value


def as_list(value: object, path: str) -> list[Any]:
    """``value`` as a JSON list, else ``InvalidMetadataError`` naming ``path``."""
    if not isinstance(value, list | tuple):
        raise InvalidMetadataError(f"{path}: expected a list, got {value!r}")
    return list(value)


def int_tuple(value: object, path: str, *, minimum: int, ndim: int | None = None) -> Coords:
    """``value`` as ``ndim`` ints ``>= minimum`` (below 2**63)."""
    items = as_list(value, path)
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
    obj = as_mapping(entry, path)
    name = required(obj, "name", f"{path}.")
    if not isinstance(name, str):
        raise InvalidMetadataError(f"{path}.name: expected a string, got {name!r}")
    config = obj.get("configuration", {})
    return name, as_mapping(config, f"{path}.configuration")


def _separator(value: object, path: str) -> Separator:
    if value == "/":
        return "/"
    if value == ".":
        return "."
    raise InvalidMetadataError(f"{path}: separator must be '/' or '.', got {value!r}")


def zarr3_array(doc: object) -> tuple[Mapping[str, Any], Coords]:
    """Check the v3 array basics; return the doc and its shape."""
    meta = as_mapping(doc, "metadata")
    if required(meta, "zarr_format", "") != 3:
        raise InvalidMetadataError(f"zarr_format: expected 3, got {meta['zarr_format']!r}")
    if required(meta, "node_type", "") != "array":
        raise InvalidMetadataError(f"node_type: expected 'array', got {meta['node_type']!r}")
    if meta.get("storage_transformers"):
        raise InvalidMetadataError("storage_transformers: not supported in a zarr.json")
    return meta, int_tuple(required(meta, "shape", ""), "shape", minimum=0)


def regular_grid(meta: Mapping[str, Any], ndim: int) -> Coords:
    """The chunk shape of a ``regular`` chunk grid."""
    grid = as_mapping(required(meta, "chunk_grid", ""), "chunk_grid")
    name, config = _codec(grid, "chunk_grid")
    if name != "regular":
        raise InvalidMetadataError(f"chunk_grid.name: only 'regular' is supported, got {name!r}")
    path = "chunk_grid.configuration.chunk_shape"
    return int_tuple(
        required(config, "chunk_shape", "chunk_grid.configuration."), path, minimum=1, ndim=ndim
    )


def key_encoding(meta: Mapping[str, Any], prefix: str) -> ChunkKeyEncoding:
    """The array's chunk key encoding, keys starting with ``prefix``."""
    name, config = _codec(required(meta, "chunk_key_encoding", ""), "chunk_key_encoding")
    path = "chunk_key_encoding.configuration.separator"
    if name == "default":
        return ChunkKeyEncoding("default", _separator(config.get("separator", "/"), path), prefix)
    if name == "v2":
        return ChunkKeyEncoding("v2", _separator(config.get("separator", "."), path), prefix)
    raise InvalidMetadataError(f"chunk_key_encoding.name: expected 'default' or 'v2', got {name!r}")


def sharding_codec(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """The sharding codec's configuration; it must be the only codec."""
    codecs = as_list(required(meta, "codecs", ""), "codecs")
    names = [_codec(c, f"codecs[{i}]")[0] for i, c in enumerate(codecs)]
    if SHARDING_CODEC not in names:
        raise InvalidMetadataError(f"codecs: no {SHARDING_CODEC} codec, the array is not sharded")
    where = names.index(SHARDING_CODEC)
    if where > 0:
        raise InvalidMetadataError(
            f"codecs[0]: array->array codec {names[0]!r} before {SHARDING_CODEC} is not supported"
        )
    if len(names) > 1:
        raise InvalidMetadataError(
            f"codecs[1]: codec {names[1]!r} after {SHARDING_CODEC} would encode whole shards; "
            "not supported"
        )
    return _codec(codecs[0], "codecs[0]")[1]


def _index_layout(config: Mapping[str, Any], cps: Coords, path: str) -> IndexLayout:
    codecs_path = f"{path}index_codecs"
    codecs = as_list(required(config, "index_codecs", path), codecs_path)
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
        c == SHARDING_CODEC or (isinstance(c, Mapping) and c.get("name") == SHARDING_CODEC)
        for c in codecs
    )


def parse_zarr3_array(doc: Mapping[str, Any], *, key_prefix: str = "") -> ShardingLayout:
    """Layout of a sharded Zarr v3 array from its ``zarr.json`` document.

    Keys are relative to the array folder unless ``key_prefix`` (e.g. ``"path/to/array/"``)
    is given. Raises ``InvalidMetadataError`` naming the offending field, including when the
    array is not sharded (check :func:`is_sharded` first to tell that case apart).
    """
    meta, shape = zarr3_array(doc)
    ndim = len(shape)
    shard_shape = regular_grid(meta, ndim)
    encoding = key_encoding(meta, key_prefix)
    config = sharding_codec(meta)
    path = "codecs[0].configuration."
    chunk_shape = int_tuple(
        required(config, "chunk_shape", path), f"{path}chunk_shape", minimum=1, ndim=ndim
    )
    cps = _divide(shard_shape, chunk_shape, f"{path}chunk_shape")
    inner = as_list(required(config, "codecs", path), f"{path}codecs")
    if not inner:
        raise InvalidMetadataError(f"{path}codecs: must not be empty")
    last = _codec(inner[-1], f"{path}codecs[{len(inner) - 1}]")[0]
    index = _index_layout(config, cps, path)
    return ShardingLayout(
        shape, shard_shape, chunk_shape, cps, index, encoding, chunk_checksum=last == "crc32c"
    )


def _draft_transformer(meta: Mapping[str, Any], ndim: int) -> Coords:
    """``chunks_per_shard`` from the single sharding storage transformer."""
    transformers = as_list(required(meta, "storage_transformers", ""), "storage_transformers")
    if len(transformers) != 1:
        raise InvalidMetadataError(
            f"storage_transformers: expected exactly one sharding transformer, "
            f"got {len(transformers)}"
        )
    path = "storage_transformers[0]"
    entry = as_mapping(transformers[0], path)
    names = [entry[k] for k in _DRAFT_NAME_FIELDS if k in entry]
    if not names or not all(isinstance(n, str) and n in _DRAFT_NAMES for n in names):
        raise InvalidMetadataError(f"{path}: not the sharding transformer: {names!r}")
    config = as_mapping(required(entry, "configuration", f"{path}."), f"{path}.configuration")
    if config.get("format", "indexed") != "indexed":
        raise InvalidMetadataError(f"{path}.configuration.format: only 'indexed' is supported")
    return int_tuple(
        required(config, "chunks_per_shard", f"{path}.configuration."),
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
    meta = as_mapping(doc, "metadata")
    shape = int_tuple(required(meta, "shape", ""), "shape", minimum=0)
    ndim = len(shape)
    grid = as_mapping(required(meta, "chunk_grid", ""), "chunk_grid")
    kind = grid.get("type", grid.get("name", "regular"))
    if kind != "regular":
        raise InvalidMetadataError(f"chunk_grid.type: only 'regular' is supported, got {kind!r}")
    chunk_shape = int_tuple(
        required(grid, "chunk_shape", "chunk_grid."), "chunk_grid.chunk_shape", minimum=1, ndim=ndim
    )
    separator = _separator(grid.get("separator", "/"), "chunk_grid.separator")
    cps = _draft_transformer(meta, ndim)
    shard_shape = tuple(c * n for c, n in zip(chunk_shape, cps, strict=True))
    path = array_path.strip("/")
    prefix = f"data/root/{path}/" if path else "data/root/"
    index = IndexLayout(cps, endian="little", checksum=False, location="end")
    encoding = ChunkKeyEncoding("draft", separator, prefix)
    return ShardingLayout(shape, shard_shape, chunk_shape, cps, index, encoding)
