"""Zarr v3 array documents rewritten between layouts (pure).

:func:`sharded_metadata` and :func:`unsharded_metadata` turn a flat array's ``zarr.json``
into the sharded one and back without touching chunk bytes (the flat codecs become the
inner codecs). :func:`map_back_metadata` and :func:`map_back_consolidated` carry a
document written through an unsharded view back onto the sharded original, refusing
members that cannot map.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.zarr3.keys import Coords
from asyncshard.formats.zarr3.metadata import (
    SHARDING_CODEC,
    as_list,
    as_mapping,
    int_tuple,
    is_sharded,
    key_encoding,
    parse_zarr3_array,
    regular_grid,
    required,
    sharding_codec,
    zarr3_array,
)

__all__ = [
    "MAPPED_MEMBERS",
    "consolidated_arrays",
    "map_back_consolidated",
    "map_back_metadata",
    "sharded_metadata",
    "unsharded_consolidated",
    "unsharded_metadata",
]


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
    out["codecs"] = copy.deepcopy(list(sharding_codec(doc)["codecs"]))
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
    meta, shape = zarr3_array(doc)
    chunk_shape = regular_grid(meta, len(shape))
    key_encoding(meta, "")
    if is_sharded(meta):
        raise InvalidMetadataError("codecs: the array is already sharded")
    codecs = as_list(required(meta, "codecs", ""), "codecs")
    cps = tuple(int(n) for n in chunks_per_shard)
    if len(cps) != len(shape) or any(n < 1 for n in cps):
        raise ValueError(f"chunks_per_shard {cps} must be {len(shape)} positive ints")
    if index_location not in ("start", "end"):
        raise ValueError(f"index_location must be 'start' or 'end', got {index_location!r}")
    index_codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if checksum:
        index_codecs.append({"name": "crc32c"})
    sharding = {
        "name": SHARDING_CODEC,
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
        int_tuple(value, "shape", minimum=0, ndim=ndim)
    elif name == "dimension_names" and value is not None:
        names = as_list(value, "dimension_names")
        if len(names) != ndim or not all(n is None or isinstance(n, str) for n in names):
            raise InvalidMetadataError(
                f"dimension_names: expected {ndim} names (strings or null), got {value!r}"
            )
    elif name == "attributes":
        as_mapping(value, "attributes")


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
    doc = as_mapping(written, "metadata")
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
