"""Converting stores between flat and sharded layouts (zarr-vectors' conversion API).

Zarr v3 (:mod:`.zarr`)::

    from asyncshard.convert import shard_store, unshard_store, reshard

    shard_store("scan.zv", shard_shape=8)           # 8x8x8 = 512 chunks per shard
    shard_store("scan.zv", shard_shape=(4, 4, 16))  # anisotropic
    unshard_store("scan.zv")                        # back to one object per chunk
    reshard("scan.zv", 4)                           # change the shard shape in place
    reshard("scan.zv", None)                        # same as unshard_store

Each has an ``*_async`` twin. Neuroglancer precomputed scales (:mod:`.precomputed`):
:func:`shard_precomputed` and :func:`unshard_precomputed`. Conversions are idempotent,
resumable after an interruption, keep the data readable throughout, and run on asyncio
or on a Dask cluster (``client=``). See docs/conversion.md.
"""

from asyncshard.convert.layout import MANIFEST_ATTRIBUTE
from asyncshard.convert.manifest import ManifestWarning
from asyncshard.convert.plan import Request
from asyncshard.convert.precomputed import (
    default_sharding,
    shard_precomputed,
    shard_precomputed_async,
    unshard_precomputed,
    unshard_precomputed_async,
)
from asyncshard.convert.report import (
    ArrayReport,
    ConversionSummary,
    PassDone,
    PassStarted,
    ProgressEvent,
    TaskDone,
    TaskResult,
)
from asyncshard.convert.runner import AsyncioRunner, DaskRunner
from asyncshard.convert.zarr import (
    convert_store,
    find_arrays,
    rebuild_manifest,
    rebuild_manifest_async,
    reshard,
    reshard_async,
    shard_store,
    shard_store_async,
    unshard_store,
    unshard_store_async,
)
from asyncshard.errors import ConversionError

__all__ = [
    "MANIFEST_ATTRIBUTE",
    "ArrayReport",
    "AsyncioRunner",
    "ConversionError",
    "ConversionSummary",
    "DaskRunner",
    "ManifestWarning",
    "PassDone",
    "PassStarted",
    "ProgressEvent",
    "Request",
    "TaskDone",
    "TaskResult",
    "convert_store",
    "default_sharding",
    "find_arrays",
    "rebuild_manifest",
    "rebuild_manifest_async",
    "reshard",
    "reshard_async",
    "shard_precomputed",
    "shard_precomputed_async",
    "shard_store",
    "shard_store_async",
    "unshard_precomputed",
    "unshard_precomputed_async",
    "unshard_store",
    "unshard_store_async",
]
