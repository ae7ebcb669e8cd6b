"""A small sharded ``zarr.json`` for the view tests."""

from __future__ import annotations

from typing import Any


def sharded_doc(shape: int = 16, shard: int = 8, chunk: int = 2) -> dict[str, Any]:
    """A 1-d uint8 array: shards of ``shard`` elements, inner chunks of ``chunk``."""
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [shape],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [shard]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 0,
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [chunk],
                    "codecs": [{"name": "bytes"}],
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                },
            }
        ],
    }
