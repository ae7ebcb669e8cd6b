"""The one sharding engine, whatever the format.

``strategy``  the seam: :class:`ShardFormat` (a format's keys, indexes and shard codecs),
              :class:`IndexIO` (what its index code may use), the value types
``indexes``   :class:`ShardIndexes`: an adapter's cached indexes, revalidation, the one
              stale-index retry loop
``reads``     :class:`ShardReads`: the lean single read, per-shard batches, snapshots
``writes``    :class:`ShardWrites`: read-merge-write per shard, merged per tick
``listing``   :class:`ShardListing`: chunk keys from the shard indexes
``adapter``   :class:`ShardedAdapter`: the Store routing each key to the above or
              through to the wrapped store
"""

from asyncshard.sharding.engine.adapter import DEFAULT_RECHECK_AFTER, Routed, ShardedAdapter
from asyncshard.sharding.engine.indexes import STALE_RETRIES, ShardIndexes
from asyncshard.sharding.engine.listing import ShardListing
from asyncshard.sharding.engine.reads import ShardReads
from asyncshard.sharding.engine.strategy import (
    MISS,
    Change,
    ChunkRead,
    Current,
    Found,
    IndexIO,
    Location,
    Miss,
    ShardFormat,
)
from asyncshard.sharding.engine.writes import ShardWrites

__all__ = [
    "DEFAULT_RECHECK_AFTER",
    "MISS",
    "STALE_RETRIES",
    "Change",
    "ChunkRead",
    "Current",
    "Found",
    "IndexIO",
    "Location",
    "Miss",
    "Routed",
    "ShardFormat",
    "ShardIndexes",
    "ShardListing",
    "ShardReads",
    "ShardWrites",
    "ShardedAdapter",
]
