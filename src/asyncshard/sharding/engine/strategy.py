"""The seam between the sharding engine and a sharded format.

A format (``sharding/zarr.py``, ``sharding/precomputed.py``) implements
:class:`ShardFormat`: which keys are chunks and where they live, how its indexes are
looked up through an :class:`IndexIO`, how whole shards are split and built, and how
chunk bytes are stored. The engine calls nothing else of a format, and a format sees of
the engine only the :class:`IndexIO` it is handed. Both are generic in the format's chunk
identity ``C`` (a position tuple for Zarr, an ``int`` id for precomputed) and its decoded
top-level index ``I``.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from asyncshard.cache import CacheEntry
from asyncshard.errors import FormatError
from asyncshard.formats.health import ShardHealth
from asyncshard.ranges import ByteRange
from asyncshard.store import BytesLike, Data, Store

__all__ = [
    "MISS",
    "C",
    "Change",
    "ChunkRead",
    "Current",
    "Found",
    "I",
    "IndexIO",
    "Location",
    "Miss",
    "ShardFormat",
]

#: A format's chunk identity within its shard (hashable).
C = TypeVar("C", bound=Hashable)
#: A format's decoded top-level shard index, as cached.
I = TypeVar("I")  # noqa: E741 - the conventional short name, next to C


class Miss(enum.Enum):
    """The type of :data:`MISS`."""

    MISS = "miss"


#: "Cannot tell without I/O": the lean read path steps aside for the batch path.
MISS = Miss.MISS


@dataclass(frozen=True, slots=True)
class Location(Generic[C]):
    """Where a chunk key lives: the shard's key in the wrapped store and the chunk's
    identity in it. ``inside=False``: the key has a chunk's form but lies outside the
    dataset (reads find nothing there, writes are refused)."""

    shard_key: str
    chunk: C
    inside: bool = True


@dataclass(frozen=True, slots=True)
class Found(Generic[C]):
    """What a shard's cached indexes say about some chunks.

    ``entries`` maps each present chunk to its absolute ``[start, end)`` in the shard;
    ``loaded_at`` is when the index behind the answer was loaded or last confirmed.
    """

    exists: bool
    version: str | None
    entries: Mapping[C, tuple[int, int]]
    loaded_at: float


@dataclass(frozen=True, slots=True)
class ChunkRead(Generic[C]):
    """One chunk read: the key it is reported under, its location, range and condition."""

    key: str
    shard_key: str
    chunk: C
    rng: ByteRange | None
    if_match: str | None


class Current(Generic[C]):
    """A chunk's stored value during a read-merge-write; decoded only when asked."""

    __slots__ = ("_chunk", "_format", "_shard_key", "stored", "version")

    def __init__(
        self,
        stored: BytesLike | None,
        version: str | None,
        fmt: ShardFormat[C, Any] | None,
        shard_key: str,
        chunk: C | None,
    ) -> None:
        self.stored = stored
        self.version = version
        self._format = fmt
        self._shard_key = shard_key
        self._chunk = chunk

    @property
    def exists(self) -> bool:
        return self.stored is not None

    def value(self) -> Data | None:
        """The chunk's raw bytes (decoded), ``None`` when it does not exist."""
        if self.stored is None or self._format is None or self._chunk is None:
            return None
        return self._format.decode(self.stored, self._shard_key, self._chunk)


#: A change to one chunk: its current value -> new raw bytes, or ``None`` to erase it.
#: Raising ``ConflictError`` (a caller's condition) fails this change alone.
Change = Callable[[Current[Any]], BytesLike | None]


class IndexIO(Protocol):
    """What a format's index code may use: the wrapped store and the adapter's slice of
    the index cache (names are tuples; the engine prefixes its namespace)."""

    @property
    def store(self) -> Store:
        """The store holding the shards."""
        ...

    async def cached(
        self, name: tuple[Hashable, ...], load: Callable[[], Awaitable[CacheEntry]]
    ) -> CacheEntry:
        """The cache entry ``name``, loaded once by ``load`` on a miss."""
        ...

    def put(
        self, name: tuple[Hashable, ...], value: object, version: str | None, nbytes: int
    ) -> None:
        """Cache ``value`` under ``name`` (an index decoded from bytes already at hand)."""
        ...

    def peek(self, name: tuple[Hashable, ...]) -> CacheEntry | None:
        """The cache entry ``name`` if it is cached (no I/O)."""
        ...


class ShardFormat(ABC, Generic[C, I]):
    """A sharded format's strategy: keys, index lookups, shard codecs.

    Subclasses implement the abstract methods; the rest have pass-through defaults.
    Index lookups go through the :class:`IndexIO` the engine passes in.
    """

    #: Name of the format (cache namespaces, messages).
    kind: ClassVar[str]
    #: Whether stored chunk bytes are an encoding of the raw bytes (``decode`` needed;
    #: byte ranges of a chunk are then cut from the decoded bytes).
    encoded: bool = False

    # -- keys -------------------------------------------------------------------------

    @abstractmethod
    def locate(self, key: str) -> Location[C] | None:
        """The chunk ``key`` names, or ``None`` when it is not a chunk key (pass-through)."""

    def locate_many(self, keys: Sequence[str]) -> list[Location[C] | None]:
        """:meth:`locate` for many keys (formats may vectorise)."""
        return [self.locate(k) for k in keys]

    def inner_key(self, key: str) -> str:
        """The wrapped store's key of a pass-through key (or of a listing prefix)."""
        return key

    def outer_key(self, inner_key: str) -> str | None:
        """The adapter's key of a wrapped store's key, ``None`` if it is not visible."""
        return inner_key

    @abstractmethod
    def is_shard(self, inner_key: str) -> bool:
        """Whether a key of the wrapped store is one of this dataset's shards."""

    def shadows(self, key: str) -> bool:
        """Whether a pass-through object at ``key`` is hidden by a chunk of that name."""
        return self.locate(key) is not None

    def is_whole(self, shard_key: str, chunks: Collection[C]) -> bool:
        """Whether ``chunks`` are every chunk the shard can hold (write it without reading)."""
        return False

    def whole_count(self, shard_key: str) -> int | None:
        """How many chunks make the shard whole for :meth:`is_whole` (``None``: it never
        is), so that callers counting arriving writes test only when enough arrived."""
        return None

    # -- indexes ----------------------------------------------------------------------

    def index_name(self, shard_key: str) -> tuple[Hashable, ...]:
        """Cache name of the shard's top-level index (dropped when the shard changes)."""
        return ("index", shard_key)

    def lookup(
        self, io: IndexIO, shard_key: str, index: I, chunk: C
    ) -> tuple[int, int] | Miss | None:
        """Where ``chunk`` lies according to the shard's cached indexes alone (``index`` is
        the top-level one), without I/O: ``(start, end)``, ``None`` when absent, or
        :data:`MISS` when an index level is not cached (the engine's lean single-read path
        then steps aside for the batch path)."""
        return MISS

    @abstractmethod
    async def find(self, io: IndexIO, shard_key: str, chunks: Sequence[C]) -> Found[C]:
        """Look ``chunks`` up in the shard's indexes (cached through ``io``).

        Reads of deeper index levels are conditioned on the top-level index's version; a
        changed shard raises ``ConflictError`` whose ``key`` is ``shard_key``.
        """

    @abstractmethod
    def remember(self, io: IndexIO, shard_key: str, shard: memoryview, version: str) -> None:
        """Cache the index of a shard whose bytes are at hand (just read or written)."""

    @abstractmethod
    async def chunks_in(self, io: IndexIO, shard_key: str) -> list[C]:
        """Every chunk stored in the shard (indexes through ``io``); ``[]`` if it is gone."""

    # -- shards -----------------------------------------------------------------------

    @abstractmethod
    def split(self, shard_key: str, shard: memoryview) -> dict[C, memoryview]:
        """Every chunk of a whole shard (still encoded), validated."""

    def inspect(self, shard_key: str, shard: memoryview) -> ShardHealth[C]:
        """What a whole shard still holds, fault by fault (``verify``/``repair``). This
        default keeps all or nothing: :meth:`split`, or one fault when that fails."""
        try:
            return ShardHealth(intact=self.split(shard_key, shard))
        except FormatError as exc:
            return ShardHealth(faults=[str(exc)])

    @abstractmethod
    def build(self, shard_key: str, chunks: Mapping[C, BytesLike]) -> bytes:
        """A whole shard from stored (encoded) chunk bytes; ``chunks`` is not empty."""

    @abstractmethod
    def empty_shard(self) -> bytes:
        """A shard holding no chunks (written where a conditional delete is impossible)."""

    def encode(self, raw: BytesLike) -> BytesLike:
        """A chunk's stored bytes from its raw bytes."""
        return raw

    def decode(self, stored: BytesLike, shard_key: str, chunk: C) -> Data:
        """A chunk's raw bytes from its stored bytes (bounded by :meth:`decoded_limit`)."""
        return stored if isinstance(stored, bytes | memoryview) else bytes(stored)

    def decoded_limit(self, chunk: C) -> int:
        """The largest raw size a stored chunk may decode to."""
        return 1 << 62

    # -- listing ----------------------------------------------------------------------

    @abstractmethod
    def chunk_key(self, shard_key: str, chunk: C) -> str | None:
        """The adapter's key of a stored chunk, ``None`` when it is no chunk of the dataset."""

    def list_source(self, prefix: str) -> str:
        """The wrapped store's prefix to list for the adapter's keys starting with ``prefix``."""
        return self.inner_key(prefix)

    def walks(self, folder: str) -> bool:
        """Whether chunk keys lie in sub-folders of ``folder`` through shards elsewhere, so
        that ``list_dir(folder)`` must walk; otherwise one listing of the folder serves."""
        return False

    def holds_every_chunk(self, prefix: str) -> bool:
        """Whether every chunk key starts with ``prefix`` (``erase_prefix`` deletes shards)."""
        return prefix == ""

    def is_chunk_folder(self, folder: str) -> bool:
        """Whether ``folder`` (``""`` or ending in ``/``) is a folder of chunk keys, which
        exists while the dataset does (for listings that do not enumerate chunks)."""
        return folder == ""
