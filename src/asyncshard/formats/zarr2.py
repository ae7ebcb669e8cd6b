"""Zarr v2 array metadata as Zarr v3 documents. Pure: JSON in, JSON out.

A v2 array's chunk objects can be read as a v3 array whenever its compressor and
filters have v3 codecs that decode the same bytes: the keys follow the v3 ``v2`` chunk
key encoding (``0.0.0`` or ``0/0/0``), edge chunks are full-size in both, and

=============================  =================================================
v2 (``.zarray``)               v3 codecs (``zarr.json``)
=============================  =================================================
``order: "C"``                 ``bytes`` (with the dtype's endianness)
``order: "F"``                 ``transpose`` (axes reversed), then ``bytes``
``compressor: null``           nothing more
``compressor: blosc``          ``blosc`` (cname, clevel, shuffle, typesize, blocksize)
``compressor: zstd``           ``zstd`` (level, checksum)
``compressor: gzip``           ``gzip`` (level)
anything else, or ``filters``  re-encoded: ``bytes`` (little endian) + ``zstd``
=============================  =================================================

:func:`translate` gives the v3 document that reads the stored chunks as they are
(:attr:`V2Translation.moved`), or the document of the re-encoded result together with
what decoding the v2 chunks needs (:attr:`V2Translation.recode`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asyncshard.errors import InvalidMetadataError

__all__ = [
    "RECODED_CODECS",
    "V2Translation",
    "data_type",
    "fill_value",
    "translate",
]

#: The codecs of a re-encoded chunk: C order, little endian, zstd.
RECODED_CODECS: list[dict[str, Any]] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
]

_KINDS = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}
_SIZES = {"b": {1}, "i": {1, 2, 4, 8}, "u": {1, 2, 4, 8}, "f": {2, 4, 8}, "c": {8, 16}}
_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}
_FLOAT_WORDS = {"NaN", "Infinity", "-Infinity"}


@dataclass(frozen=True)
class V2Translation:
    """A v2 array as a v3 document.

    ``doc``: the v3 ``zarr.json`` (flat, ``v2`` chunk keys); ``moved``: whether ``doc``
    reads the stored chunk bytes as they are; otherwise ``recode`` holds what decoding a
    stored chunk needs (``dtype``, ``chunks``, ``order``, ``compressor``, ``filters``) and
    ``doc`` has :data:`RECODED_CODECS`. ``reason`` says why chunks are re-encoded.
    """

    doc: dict[str, Any]
    moved: bool
    recode: dict[str, Any] | None = None
    reason: str = ""


def _bad(what: str) -> InvalidMetadataError:
    return InvalidMetadataError(f".zarray: {what}")


def data_type(dtype: object) -> tuple[str, str | None]:
    """The v3 ``data_type`` of a v2 ``dtype`` string and its byte order (``"little"``,
    ``"big"``, or ``None`` for one-byte types); ``InvalidMetadataError`` for dtypes
    without a v3 equivalent (structured, strings, datetimes)."""
    if not isinstance(dtype, str) or len(dtype) < 3 or dtype[0] not in "<>|":
        raise _bad(f"dtype {dtype!r} is not converted (numbers and bools are)")
    kind, size_text = dtype[1], dtype[2:]
    if kind not in _KINDS or not size_text.isdigit() or int(size_text) not in _SIZES[kind]:
        raise _bad(f"dtype {dtype!r} is not converted (numbers and bools are)")
    size = int(size_text)
    name = "bool" if kind == "b" else f"{_KINDS[kind]}{size * 8}"
    if size == 1:
        return name, None
    if dtype[0] == "|":
        raise _bad(f"dtype {dtype!r} has no byte order")
    return name, "little" if dtype[0] == "<" else "big"


def fill_value(value: object, v3_type: str) -> Any:
    """The v3 ``fill_value`` of a v2 one (``null``, which v2 readers fill with zeros,
    becomes zero)."""
    if value is None:
        if v3_type == "bool":
            return False
        return [0.0, 0.0] if v3_type.startswith("complex") else 0
    if v3_type == "bool":
        if not isinstance(value, bool | int):
            raise _bad(f"fill_value {value!r} for a bool array")
        return bool(value)
    if v3_type.startswith("complex"):
        if isinstance(value, list) and len(value) == 2:
            return [_real(v, v3_type) for v in value]
        return [_real(value, v3_type), 0.0]
    return _real(value, v3_type)


def _real(value: object, v3_type: str) -> Any:
    if isinstance(value, str):
        if value in _FLOAT_WORDS and not v3_type.startswith(("int", "uint")):
            return value
        raise _bad(f"fill_value {value!r} for {v3_type}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(f"fill_value {value!r} for {v3_type}")
    if v3_type.startswith(("int", "uint")):
        if isinstance(value, float) and not value.is_integer():
            raise _bad(f"fill_value {value!r} for {v3_type}")
        return int(value)
    if math.isfinite(value):
        return float(value)
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _compressor(config: object, itemsize: int) -> dict[str, Any] | str | None:
    """The v3 codec of a v2 compressor; ``None`` for none; a string: why it is not mapped."""
    if config is None:
        return None
    if not isinstance(config, Mapping) or not isinstance(config.get("id"), str):
        raise _bad(f"compressor {config!r} is not an object with an id")
    name = config["id"]
    if name == "blosc":
        shuffle = int(config.get("shuffle", 1))
        if shuffle == -1:  # numcodecs' AUTOSHUFFLE
            shuffle = 2 if itemsize == 1 else 1
        return {
            "name": "blosc",
            "configuration": {
                "cname": config.get("cname", "lz4"),
                "clevel": int(config.get("clevel", 5)),
                "shuffle": _BLOSC_SHUFFLE.get(shuffle, "shuffle"),
                "typesize": itemsize,
                "blocksize": int(config.get("blocksize", 0)),
            },
        }
    if name == "zstd":
        level = int(config.get("level", 0))
        checksum = bool(config.get("checksum", False))
        return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}
    if name == "gzip":
        return {"name": "gzip", "configuration": {"level": int(config.get("level", 5))}}
    return f"compressor {name!r} has no v3 codec"


def _ints(value: object, what: str) -> list[int]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise _bad(f"{what} {value!r} is not a list")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise _bad(f"{what} {value!r} holds something other than integers >= 0")
    return list(value)


def translate(
    zarray: Mapping[str, Any],
    attributes: Mapping[str, Any] | None = None,
    dimension_names: Sequence[str] | None = None,
) -> V2Translation:
    """The v3 document of a v2 array (``.zarray`` and ``.zattrs``); see the module
    docstring. ``dimension_names`` (e.g. OME-Zarr axes) win over xarray's
    ``_ARRAY_DIMENSIONS`` attribute, which becomes ``dimension_names`` either way."""
    if zarray.get("zarr_format") != 2:
        raise _bad(f"zarr_format is {zarray.get('zarr_format')!r}, not 2")
    shape = _ints(zarray.get("shape"), "shape")
    chunks = _ints(zarray.get("chunks"), "chunks")
    if len(chunks) != len(shape) or (shape and 0 in chunks):
        raise _bad(f"chunks {chunks} do not fit shape {shape}")
    name, endian = data_type(zarray.get("dtype"))
    itemsize = 1 if name == "bool" else int(zarray["dtype"][2:])
    order = zarray.get("order", "C")
    if order not in ("C", "F"):
        raise _bad(f"order {order!r} is neither C nor F")
    separator = zarray.get("dimension_separator") or "."
    if separator not in (".", "/"):
        raise _bad(f"dimension_separator {separator!r} is neither '.' nor '/'")
    attrs = dict(attributes or {})
    names = attrs.pop("_ARRAY_DIMENSIONS", None)
    if dimension_names is not None:
        names = list(dimension_names)
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": separator}},
        "fill_value": fill_value(zarray.get("fill_value"), name),
        "codecs": [],
        "attributes": attrs,
    }
    if isinstance(names, list) and len(names) == len(shape):
        doc["dimension_names"] = names
    filters = zarray.get("filters") or []
    compressor = _compressor(zarray.get("compressor"), itemsize)
    if filters or isinstance(compressor, str):
        doc["codecs"] = [dict(c) for c in RECODED_CODECS]
        recode = {
            "dtype": zarray["dtype"],
            "chunks": chunks,
            "order": order,
            "compressor": zarray.get("compressor"),
            "filters": list(filters),
        }
        why = compressor if isinstance(compressor, str) else "filters have no v3 codecs"
        return V2Translation(doc, False, recode, why)
    codecs: list[dict[str, Any]] = []
    if order == "F" and len(shape) > 1:
        reverse = list(range(len(shape)))[::-1]
        codecs.append({"name": "transpose", "configuration": {"order": reverse}})
    codecs.append({"name": "bytes", **({"configuration": {"endian": endian}} if endian else {})})
    if compressor is not None:
        codecs.append(compressor)
    doc["codecs"] = codecs
    return V2Translation(doc, True)
