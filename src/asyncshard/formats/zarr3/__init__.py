"""Zarr v3 ``sharding_indexed`` and the draft sharding storage transformer.

``format`` encodes and decodes shards and indexes (pure, numpy); ``metadata`` turns
``zarr.json`` or draft metadata into a :class:`ShardingLayout` that translates keys.
"""

from asyncshard.formats.zarr3.metadata import (
    ChunkKeyEncoding,
    ShardingLayout,
    is_sharded,
    parse_draft_transformer,
    parse_zarr3_array,
    sharded_metadata,
    unsharded_metadata,
)
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
