"""Finding and repairing damaged shards: :func:`verify` and :func:`repair`.

Every shard of every sharded dataset under a store's root (Zarr v3 ``sharding_indexed``
arrays, the sharded scales of every precomputed volume) is read whole, one at a time
per slot of ``max_in_flight``, and inspected by its format (``ShardFormat.inspect``): the index
decodes and its checksum holds, every chunk's bytes lie inside the shard and overlap no
other chunk's, a chunk under an inner ``crc32c`` codec matches it, and with
``decode=True`` a chunk the format encodes (precomputed ``gzip``) decodes. ``repair``
rewrites each damaged shard from the chunks that are still intact (and the copies a
``source`` holds that pass the same checks), conditionally on the version it inspected,
and reports the chunks lost. The report counts the intact chunks no check reaches, and
why. See docs/conversion.md.
"""

from asyncshard.integrity.report import DamagedShard, IntegrityReport
from asyncshard.integrity.scan import repair, repair_async, verify, verify_async

__all__ = [
    "DamagedShard",
    "IntegrityReport",
    "repair",
    "repair_async",
    "verify",
    "verify_async",
]
