"""The pure translations: v2 ``.zarray`` to v3 documents, OME-Zarr 0.4 to 0.5 attributes."""

from __future__ import annotations

from typing import Any

import pytest

from asyncshard.errors import InvalidMetadataError
from asyncshard.formats import ome
from asyncshard.formats.zarr2 import data_type, fill_value, translate


def _zarray(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 2,
        "shape": [10, 20],
        "chunks": [5, 5],
        "dtype": "<u2",
        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": -1, "blocksize": 0},
        "fill_value": 0,
        "filters": None,
        "order": "C",
    }
    doc.update(changes)
    return doc


def test_blosc_autoshuffle_and_order_f() -> None:
    out = translate(_zarray(order="F"), {"a": 1})
    assert out.moved and out.recode is None
    assert out.doc["codecs"] == [
        {"name": "transpose", "configuration": {"order": [1, 0]}},
        {"name": "bytes", "configuration": {"endian": "little"}},
        {
            "name": "blosc",
            "configuration": {
                "cname": "lz4",
                "clevel": 5,
                "shuffle": "shuffle",  # AUTOSHUFFLE on 2-byte items
                "typesize": 2,
                "blocksize": 0,
            },
        },
    ]
    assert out.doc["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "."}}
    assert out.doc["attributes"] == {"a": 1}
    one_byte = translate(_zarray(dtype="|u1"))
    assert one_byte.doc["codecs"][0] == {"name": "bytes"}
    assert one_byte.doc["codecs"][1]["configuration"]["shuffle"] == "bitshuffle"


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("|b1", ("bool", None)),
        ("|i1", ("int8", None)),
        (">u4", ("uint32", "big")),
        ("<f2", ("float16", "little")),
        ("<c16", ("complex128", "little")),
    ],
)
def test_data_types(dtype: str, expected: tuple[str, str | None]) -> None:
    assert data_type(dtype) == expected


@pytest.mark.parametrize("dtype", ["<U4", "|S3", "|O", "<M8[ns]", "<i3", "u2", 5, "|V8"])
def test_other_data_types_are_refused(dtype: Any) -> None:
    with pytest.raises(InvalidMetadataError):
        data_type(dtype)


@pytest.mark.parametrize(
    ("value", "v3_type", "expected"),
    [
        (None, "float32", 0),
        (None, "bool", False),
        (None, "complex64", [0.0, 0.0]),
        ("NaN", "float64", "NaN"),
        (float("nan"), "float32", "NaN"),  # json.loads reads a bare NaN token
        (float("-inf"), "float32", "-Infinity"),
        (float("inf"), "float64", "Infinity"),
        (3.0, "int16", 3),
        (1, "bool", True),
        ([1.0, 2.0], "complex64", [1.0, 2.0]),
    ],
)
def test_fill_values(value: Any, v3_type: str, expected: Any) -> None:
    assert fill_value(value, v3_type) == expected


@pytest.mark.parametrize(
    "changes",
    [
        {"zarr_format": 3},
        {"shape": [10]},
        {"chunks": [0, 5]},
        {"order": "K"},
        {"dimension_separator": "-"},
        {"fill_value": "NaN"},  # on an integer array
        {"fill_value": 2.5},
        {"compressor": "zstd"},
        {"shape": [True, 3]},
    ],
)
def test_invalid_zarray(changes: dict[str, Any]) -> None:
    with pytest.raises(InvalidMetadataError):
        translate(_zarray(**changes))


def test_ome_0_4_to_0_5() -> None:
    attrs = {
        "multiscales": [
            {"version": "0.4", "axes": [{"name": "y"}, {"name": "x"}], "datasets": [{"path": "0"}]}
        ],
        "omero": {"channels": []},
        "image-label": {"version": "0.4", "colors": []},
        "other": 1,
    }
    out = ome.to_v05(attrs)
    assert out == {
        "other": 1,
        "ome": {
            "version": "0.5",
            "multiscales": [{"axes": [{"name": "y"}, {"name": "x"}], "datasets": [{"path": "0"}]}],
            "omero": {"channels": []},
            "image-label": {"colors": []},
        },
    }
    assert attrs["multiscales"][0]["version"] == "0.4"  # the input is not changed
    assert ome.to_v05(out) == out  # 0.5 stays as it is
    assert ome.dimension_names(attrs, "a/b") == {"a/b/0": ["y", "x"]}
    assert ome.dimension_names(out, "") == {"0": ["y", "x"]}
    assert ome.to_v05({"x": 1}) == {"x": 1}


@pytest.mark.parametrize(
    "attrs",
    [
        {"multiscales": [{"version": "0.3", "axes": ["y", "x"], "datasets": []}]},
        {"multiscales": {"version": "0.4"}},
        {"plate": [], "multiscales": [{"version": "0.4", "axes": [], "datasets": []}]},
        {"well": {"version": "0.4", "images": []}, "ome": "mine"},
    ],
)
def test_ome_refused(attrs: dict[str, Any]) -> None:
    with pytest.raises(InvalidMetadataError):
        ome.to_v05(attrs, "img")


def test_plain_attributes_with_ome_names_are_left_alone() -> None:
    for attrs in ({"labels": ["cat", "dog"]}, {"well": "A1"}, {"multiscales": [], "ome": 3}):
        assert not ome.is_ome(attrs)
        assert ome.to_v05(attrs, "g") == attrs


def test_roles_under_ome_parents() -> None:
    image = {"multiscales": [{"version": "0.4", "axes": [], "datasets": []}]}
    assert ome.role_of("labels", image) == "labels"
    assert ome.role_of("labels", {"labels": ["x"]}) is None  # the parent is no image
    labels = ome.to_v05({"labels": ["cells"]}, "img/labels", "labels")
    assert labels == {"ome": {"version": "0.5", "labels": ["cells"]}}
    layout = {"bioformats2raw.layout": 3}
    assert ome.role_of("OME", layout) == "series" and ome.role_of("0", layout) is None
    assert ome.to_v05(layout) == {"ome": {"version": "0.5", "bioformats2raw.layout": 3}}
    series = ome.to_v05({"series": ["0"]}, "OME", "series")
    assert series == {"ome": {"version": "0.5", "series": ["0"]}}
    assert ome.to_v05({"series": ["0"]}, "elsewhere") == {"series": ["0"]}
