"""asyncshard: an asyncio key-value store layer for sharded chunk data on object storage."""

try:  # first: Ctrl-C while the asyncshard command starts is one line, not a traceback
    from asyncshard import startup  # noqa: F401
except KeyboardInterrupt:  # pragma: no cover - Ctrl-C while that very module loads
    from asyncshard.startup import exit_if_the_command

    exit_if_the_command()
    raise

from importlib.metadata import PackageNotFoundError, version

from asyncshard.backends import LocalStore, MemoryStore, open_store
from asyncshard.errors import (
    AsyncShardError,
    BucketNotFoundError,
    ChecksumError,
    ConflictError,
    CopyError,
    CorruptResponseError,
    CorruptShardError,
    EventLoopError,
    FormatError,
    InvalidKeyError,
    InvalidMetadataError,
    InvalidRangeError,
    NothingToConvertError,
    NothingToCopyError,
    OverlappingStoresError,
    PartialWriteError,
    ReadOnlyError,
    ShardShapeError,
    StoreAuthenticationError,
    StoreBackendError,
    StoreConfigError,
    StoreConnectionError,
    StorePermissionError,
    UnknownOptionError,
    UnknownSchemeError,
    UnsupportedOperationError,
)
from asyncshard.ranges import ByteRange, Offset, Range, Suffix
from asyncshard.sharding import (
    PrecomputedVolume,
    ShardedAdapter,
    Uint64ShardedStore,
    ZarrShardedStore,
    open_sharded,
)
from asyncshard.store import GetResult, ObjectMeta, Store, StoreStats
from asyncshard.transfer import CopySummary, copy_tree, copy_tree_async
from asyncshard.views import UnshardedView

try:
    __version__ = version("asyncshard")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = [
    "AsyncShardError",
    "BucketNotFoundError",
    "ByteRange",
    "ChecksumError",
    "ConflictError",
    "CopyError",
    "CopySummary",
    "CorruptResponseError",
    "CorruptShardError",
    "EventLoopError",
    "FormatError",
    "GetResult",
    "InvalidKeyError",
    "InvalidMetadataError",
    "InvalidRangeError",
    "LocalStore",
    "MemoryStore",
    "NothingToConvertError",
    "NothingToCopyError",
    "ObjectMeta",
    "Offset",
    "OverlappingStoresError",
    "PartialWriteError",
    "PrecomputedVolume",
    "Range",
    "ReadOnlyError",
    "ShardShapeError",
    "ShardedAdapter",
    "Store",
    "StoreAuthenticationError",
    "StoreBackendError",
    "StoreConfigError",
    "StoreConnectionError",
    "StorePermissionError",
    "StoreStats",
    "Suffix",
    "Uint64ShardedStore",
    "UnknownOptionError",
    "UnknownSchemeError",
    "UnshardedView",
    "UnsupportedOperationError",
    "ZarrShardedStore",
    "__version__",
    "copy_tree",
    "copy_tree_async",
    "open_sharded",
    "open_store",
]
