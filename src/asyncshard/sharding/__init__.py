"""Sharded formats as Stores wrapping any Store: inner chunks as keys.

One engine (:class:`ShardedAdapter`) with a strategy per format: Zarr v3
``sharding_indexed`` and the draft storage transformer (:class:`ZarrShardedStore`),
Neuroglancer ``neuroglancer_uint64_sharded_v1`` (:class:`Uint64ShardedStore`, and volume
scales by chunk name: :class:`PrecomputedVolume`). :func:`open_sharded` detects the format.
"""

from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER, ShardedAdapter, ShardFormat
from asyncshard.sharding.open import open_sharded
from asyncshard.sharding.precomputed import PrecomputedFormat, Uint64ShardedStore
from asyncshard.sharding.volume import PrecomputedVolume, ShardedScale
from asyncshard.sharding.zarr import ZarrFormat, ZarrShardedStore

__all__ = [
    "DEFAULT_RECHECK_AFTER",
    "PrecomputedFormat",
    "PrecomputedVolume",
    "ShardFormat",
    "ShardedAdapter",
    "ShardedScale",
    "Uint64ShardedStore",
    "ZarrFormat",
    "ZarrShardedStore",
    "open_sharded",
]
