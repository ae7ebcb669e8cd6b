"""Neuroglancer precomputed ``neuroglancer_uint64_sharded_v1``: pure spec, format and volume code.

- :mod:`.spec`: the sharding JSON, chunk-id hashing, shard/minishard mapping, Morton codes.
- :mod:`.shard`: shard index, minishard index and chunk data codecs; whole-shard split
  (with the placement check) and shard building.
- :mod:`.volume`: the volume ``info`` file, chunk names and chunk ids of a scale.
"""

from asyncshard.formats.precomputed.shard import (
    MinishardIndex,
    build_shard,
    build_shards,
    decode_chunk_data,
    decode_minishard_index,
    decode_shard_index,
    find_chunks,
    minishard_index_range,
    shard_index_nbytes,
    split_shard,
)
from asyncshard.formats.precomputed.spec import (
    ShardingSpec,
    compressed_morton_code,
    decode_compressed_morton,
)
from asyncshard.formats.precomputed.volume import Scale, VolumeInfo

__all__ = [
    "MinishardIndex",
    "Scale",
    "ShardingSpec",
    "VolumeInfo",
    "build_shard",
    "build_shards",
    "compressed_morton_code",
    "decode_chunk_data",
    "decode_compressed_morton",
    "decode_minishard_index",
    "decode_shard_index",
    "find_chunks",
    "minishard_index_range",
    "shard_index_nbytes",
    "split_shard",
]
