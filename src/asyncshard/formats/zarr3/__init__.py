"""Zarr v3 ``sharding_indexed`` and the draft sharding storage transformer (pure).

``shard``      shard and index codecs (bytes and numpy in and out)
``keys``       chunk key encodings: grid coordinates <-> keys
``grid``       the chunk arithmetic (:class:`ChunkGrid`) and :class:`ShardingLayout`
``metadata``   ``zarr.json`` or draft metadata -> :class:`ShardingLayout`
``documents``  array documents rewritten between flat and sharded layouts
"""

from asyncshard.formats.zarr3.documents import sharded_metadata, unsharded_metadata
from asyncshard.formats.zarr3.grid import ChunkGrid, ShardingLayout
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding
from asyncshard.formats.zarr3.metadata import is_sharded, parse_draft_transformer, parse_zarr3_array
from asyncshard.formats.zarr3.shard import (
    EMPTY,
    IndexLayout,
    IndexRange,
    chunk_slices,
    decode_index,
    decode_shard,
    empty_index,
    encode_index,
    encode_shard,
    index_byte_range,
    morton_order,
    present_mask,
)

__all__ = [
    "EMPTY",
    "ChunkGrid",
    "ChunkKeyEncoding",
    "IndexLayout",
    "IndexRange",
    "ShardingLayout",
    "chunk_slices",
    "decode_index",
    "decode_shard",
    "empty_index",
    "encode_index",
    "encode_shard",
    "index_byte_range",
    "is_sharded",
    "morton_order",
    "parse_draft_transformer",
    "parse_zarr3_array",
    "present_mask",
    "sharded_metadata",
    "unsharded_metadata",
]
