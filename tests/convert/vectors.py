"""zarr-vectors stores for the conversion tests, and what zarr-vectors reads from them.

zarr-vectors (PyPI ``zarr-vectors``) is the oracle: a store converted by asyncshard is
right when zarr-vectors reads from it exactly what it read before.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("points", "polylines", "graph", "mesh")

#: A box holding part of each store's data.
BOX = {
    "points": ([-50.0, -50.0, -50.0], [60.0, 60.0, 60.0]),
    "polylines": ([100.0, 100.0, 100.0], [230.0, 230.0, 230.0]),
    "graph": ([-200.0, -200.0, -200.0], [-70.0, 40.0, 0.0]),
    "mesh": ([0.0, 0.0, 0.0], [160.0, 160.0, 160.0]),
}
#: The chunk grid origin of each store (``None``: zero, not stored).
ORIGINS = {"points": [-2, -2, -2], "polylines": [1, 1, 1], "graph": [-2, -1, -1], "mesh": None}
#: Objects read by id in each store.
OBJECTS = {"points": [1, 4], "polylines": [0, 2], "graph": [1], "mesh": [0]}

Source = Any  # a path or a zarr Store (what zarr-vectors' readers accept)


def write_store(kind: str, path: Path) -> None:
    """A small zarr-vectors store of ``kind`` at ``path``, written by zarr-vectors.

    * ``points``: two resolution levels, a vertex attribute, six objects;
    * ``polylines`` (streamlines): a vertex attribute;
    * ``graph``: a link attribute, two objects;
    * ``mesh``: triangles;

    with the chunk grid origins :data:`ORIGINS`.
    """
    from zarr_vectors.multiresolution.coarsen import build_pyramid
    from zarr_vectors.types.graphs import write_graph
    from zarr_vectors.types.meshes import write_mesh
    from zarr_vectors.types.points import write_points
    from zarr_vectors.types.polylines import write_polylines

    rng = np.random.default_rng(7)
    chunk = (100.0, 100.0, 100.0)
    if kind == "points":
        pos = rng.uniform(-140, 90, (240, 3)).astype("float32")
        weight = rng.random(len(pos)).astype("float32")
        ids = rng.integers(0, 6, len(pos))
        write_points(
            str(path), pos, chunk_shape=chunk, vertex_attributes={"w": weight}, object_ids=ids
        )
        build_pyramid(str(path), factors=[(2.0, 1.0)], cross_level_storage="none")
    elif kind == "polylines":
        starts = rng.uniform(125, 340, (4, 3))
        lines = [
            (start + np.cumsum(rng.uniform(-10, 18, (n, 3)), axis=0)).astype("float32")
            for start, n in zip(starts, (6, 9, 12, 7), strict=True)
        ]
        fa = [rng.random(len(line)).astype("float32") for line in lines]
        write_polylines(str(path), lines, chunk_shape=chunk, vertex_attributes={"fa": fa})
    elif kind == "graph":
        pos = np.cumsum(rng.uniform(-20, 25, (36, 3)), axis=0).astype("float32") - 60
        edges = np.array([(i, i + 1) for i in range(35) if i != 17] + [(0, 9), (20, 30)])
        weight = rng.random(len(edges)).astype("float32")
        write_graph(
            str(path),
            pos,
            edges,
            chunk_shape=chunk,
            link_attributes={"lw": weight},
            object_ids=np.repeat([0, 1], 18),
        )
    elif kind == "mesh":
        verts = np.sort(rng.uniform(0, 180, (24, 3)), axis=0).astype("float32")
        faces = np.array([(i, i + 1, i + 2) for i in range(22)])
        write_mesh(str(path), verts, faces, chunk_shape=chunk)
    else:
        raise ValueError(kind)


def _reader(kind: str) -> Callable[..., dict[str, Any]]:
    from zarr_vectors.types.graphs import read_graph
    from zarr_vectors.types.meshes import read_mesh
    from zarr_vectors.types.points import read_points
    from zarr_vectors.types.polylines import read_polylines

    readers: dict[str, Callable[..., dict[str, Any]]] = {
        "points": read_points,
        "polylines": read_polylines,
        "graph": read_graph,
        "mesh": read_mesh,
    }
    return readers[kind]


def zv_reads(kind: str, source: Source) -> dict[str, Any]:
    """What zarr-vectors reads from a store, per level: the whole level, the box
    :data:`BOX` of its kind, and the objects :data:`OBJECTS` by id (their vertices
    through the object index; and through the reader's ``object_ids`` where it has it)."""
    from zarr_vectors.core.arrays import read_object_vertices
    from zarr_vectors.core.store import get_resolution_level, list_resolution_levels, open_store

    read = _reader(kind)
    extra: dict[str, Any] = {"attribute_names": ["w"]} if kind == "points" else {}
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = open_store(source)
        for level in list_resolution_levels(root):
            group = get_resolution_level(root, level)
            ids = OBJECTS[kind]
            got = {
                "whole": read(source, level=level, **extra),
                "box": read(source, level=level, bbox=BOX[kind]),
                "objects": {i: read_object_vertices(group, i) for i in ids},
            }
            if kind in ("points", "polylines"):
                got["by_id"] = read(source, level=level, object_ids=ids)
            out[f"level {level}"] = got
    return out


def counts(reads: Mapping[str, Any]) -> dict[str, tuple[int, int, int]]:
    """Vertices per level in the whole level, the box and the objects (to check that the
    reference reads are not empty)."""

    def n(result: Mapping[str, Any]) -> int:
        return int(result.get("vertex_count", result.get("node_count", 0)))

    return {
        level: (
            n(got["whole"]),
            n(got["box"]),
            sum(len(f) for frags in got["objects"].values() for f in frags),
        )
        for level, got in reads.items()
    }


def assert_same(expected: Any, actual: Any, where: str = "") -> None:
    """Deep equality of two zarr-vectors read results (arrays compared exactly)."""
    if isinstance(expected, np.ndarray) or isinstance(actual, np.ndarray):
        np.testing.assert_array_equal(actual, expected, err_msg=where)
    elif isinstance(expected, Mapping):
        assert isinstance(actual, Mapping), where
        assert sorted(map(str, expected)) == sorted(map(str, actual)), where
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}/{key}")
    elif isinstance(expected, list | tuple):
        assert isinstance(actual, list | tuple) and len(actual) == len(expected), where
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_same(e, a, f"{where}[{i}]")
    else:
        assert expected == actual, where


def arrays_of(root: Path) -> dict[str, dict[str, Any]]:
    """``{array path: zarr.json}`` of every array below ``root``."""
    out = {}
    for meta in sorted(root.rglob("zarr.json")):
        doc = json.loads(meta.read_text())
        if doc.get("node_type") == "array":
            out[meta.parent.relative_to(root).as_posix()] = doc
    return out


def is_sharded(doc: Mapping[str, Any]) -> bool:
    """Whether an array document uses the sharding codec."""
    return any(c.get("name") == "sharding_indexed" for c in doc.get("codecs", []))


def spatial_arrays(root: Path) -> list[str]:
    """The arrays zarr-vectors' ``shard_store`` shards (those with a presence manifest)."""
    return [p for p, doc in arrays_of(root).items() if "nonempty_chunks" in doc["attributes"]]
