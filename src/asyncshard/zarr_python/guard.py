"""Conditional pass-through writes: zarr-python's shard rewrites lose no concurrent write.

zarr-python's sharding codec writes part of a shard by reading the whole shard (one
un-ranged ``get``), changing some inner chunks and writing the whole shard back (``set``,
or ``delete`` when no chunk is left), all in one asyncio task; the inner chunks it did
not change keep their encoded bytes. Written back unconditionally, the shard would undo
every change another writer made to it in between.

:class:`ShardGuard` makes those writes conditional. An un-ranged read of a data key (not
a metadata document) remembers the version and bytes read, for the task that read them
(a ``ContextVar`` holding the task's latest such read: sibling tasks, threads and
processes each see only their own). The task's next ``set`` or ``delete`` of that key is
written only if the object is still at that version (``if_absent`` when zarr-python read
nothing); a shard left without chunks is removed as
:func:`~asyncshard.sharding.common.replace_shard` says. On a conflict, the inner
chunks zarr-python changed (its new shard against what it read: chunks added, changed or
removed) are applied onto the current shard, which is read, merged and written
conditionally until it lands (:func:`~asyncshard.sharding.common.read_merge_write`); the
writers of one event loop merge one at a time per shard, so they wait their turn instead
of conflicting with each other. The shard layout comes from the array's ``zarr.json``,
read afresh then (the folder it was found in last is tried first). Writes without a
read before them (zarr-python writing a whole shard) stay plain writes.

Concurrent writers of distinct inner chunks thus lose nothing; writers of one inner chunk
(or of parts of it) end with one writer's chunk, as with any zarr store. Stores without
conditional writes get zarr-python's plain writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

from asyncshard.errors import ConflictError, InvalidMetadataError
from asyncshard.formats.zarr3.grid import ShardingLayout
from asyncshard.formats.zarr3.metadata import is_sharded, parse_zarr3_array
from asyncshard.formats.zarr3.shard import (
    IndexLayout,
    decode_shard,
    empty_index,
    encode_index,
    encode_shard,
)
from asyncshard.limits import PerLoop
from asyncshard.sharding.common import (
    UNCHANGED,
    Unchanged,
    read_json,
    read_merge_write,
    replace_shard,
)
from asyncshard.store import BytesLike, Data, GetResult, ObjectMeta, Store

__all__ = ["ShardGuard", "array_layout"]

#: Keys never guarded: metadata documents (zarr v3 and v2), which are no shards.
METADATA_NAMES: Final = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
#: Folders above a key searched for its array's ``zarr.json`` (32 dimensions + 2).
MAX_DEPTH: Final = 34
#: Folders whose array's folder a guard remembers (forgotten all at once beyond).
MAX_FOLDERS: Final = 4096

Chunks = dict[tuple[int, ...], memoryview | None]


@dataclass(frozen=True, slots=True)
class _Read:
    """What one task read whole of ``key`` through ``guard``: ``meta`` and ``data`` are
    ``None`` when nothing was there."""

    guard: ShardGuard
    key: str
    task: weakref.ref[asyncio.Task[object]]
    meta: ObjectMeta | None
    data: Data | None


#: The running task's latest guarded read (zarr-python writes a shard right after reading
#: it, with no other read between). A task started meanwhile inherits it but does not
#: own it (``task``), so it is never taken for that task's write.
_LAST_READ: ContextVar[_Read | None] = ContextVar("asyncshard_zarr_last_read", default=None)


def _guarded(key: str) -> bool:
    return key.rpartition("/")[2] not in METADATA_NAMES


class ShardGuard:
    """The conditional writes of a pass-through ZarrStore over ``store`` (see the module
    docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: per event loop: the merge running per shard key, and how many want a turn
        self._turns: PerLoop[dict[str, tuple[asyncio.Lock, int]]] = PerLoop(dict)
        #: a key's folder -> the folder its array's ``zarr.json`` was last found in
        self._arrays: dict[str, str] = {}

    @property
    def active(self) -> bool:
        """Whether writes can be conditional here."""
        return self.store.supports_writes and self.store.supports_conditional_writes

    async def get(self, key: str) -> Data | None:
        """The whole object at ``key``, remembered for this task's next write of it."""
        task = asyncio.current_task()
        if task is None or not _guarded(key) or not self.active:
            return await self.store.get(key)
        result = await self.store.get_object(key)
        meta, data = (None, None) if result is None else (result.meta, result.data)
        _LAST_READ.set(_Read(self, key, weakref.ref(task), meta, data))
        return data

    def _take(self, key: str) -> _Read | None:
        """This task's remembered read of ``key``, if any; forgotten now."""
        read = _LAST_READ.get()
        if read is None or read.guard is not self:
            return None
        _LAST_READ.set(None)
        mine = read.key == key and read.task() is asyncio.current_task()
        return read if mine else None

    async def set(self, key: str, data: BytesLike) -> None:
        """Write ``data`` at ``key``: conditionally when this task read ``key`` whole."""
        read = self._take(key)
        if read is None:
            await self.store.set(key, data)
        else:
            await self._write(key, data, read)

    async def delete(self, key: str) -> None:
        """Delete ``key``; when this task read it whole, only the chunks it held then."""
        read = self._take(key)
        if read is None:
            await self.store.erase_values([key])
        else:
            await self._write(key, None, read)

    @contextlib.asynccontextmanager
    async def _turn(self, key: str) -> AsyncIterator[None]:
        """This event loop's merges of ``key``, one at a time."""
        turns = self._turns.get()
        lock, users = turns.get(key, (asyncio.Lock(), 0))
        turns[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = turns[key]
            if users == 1:
                del turns[key]
            else:
                turns[key] = (lock, users - 1)

    async def _layout(self, key: str) -> ShardingLayout | None:
        """:func:`array_layout`, its refusals said as the conflict they leave unresolved."""
        if len(self._arrays) > MAX_FOLDERS:
            self._arrays.clear()
        try:
            return await array_layout(self.store, key, self._arrays)
        except InvalidMetadataError as exc:
            raise ConflictError(
                f"{key}: written by another writer since zarr-python read it, and its "
                f"array's shards cannot be merged here: {exc}",
                key=key,
            ) from exc

    async def _write(self, key: str, new: BytesLike | None, read: _Read) -> None:
        """Put ``new`` (``None``: no chunk left) in place of the object ``read`` saw; if it
        changed meanwhile, apply the inner chunks ``new`` changes onto its current shard."""
        layout: ShardingLayout | None = None
        if new is None:
            if read.meta is None:  # nothing was there, nothing is to be: keep what came
                return
            layout = await self._layout(key)
            if layout is None:  # a plain zarr chunk, emptied
                await self.store.erase_values([key])
                return
        try:
            await replace_shard(self.store, key, new, read.meta, _empty_shard(layout))
            return
        except ConflictError:
            pass
        async with self._turn(key):
            await self._merge(key, new, read, layout)

    async def _merge(
        self, key: str, new: BytesLike | None, read: _Read, layout: ShardingLayout | None
    ) -> None:
        """Apply the inner chunks ``new`` changes from ``read`` onto the current shard."""
        if layout is None:
            layout = await self._layout(key)
        if layout is None:  # a plain zarr chunk: the last writer's wins, as in zarr
            assert new is not None
            await self.store.set(key, new)
            return
        index = layout.index
        changes = _changes(read.data, new, index, key)

        def rebuild(current: GetResult | None) -> BytesLike | Unchanged | None:
            chunks: Chunks = {}
            if current is not None:
                chunks.update(decode_shard(current.data, index, key=key))
            if all(chunks.get(pos) == value for pos, value in changes.items()):
                return UNCHANGED
            chunks.update(changes)
            present = {pos: value for pos, value in chunks.items() if value is not None}
            return encode_shard(present, index) if present else None

        await read_merge_write(
            self.store, key, rebuild, lambda _new, _version: None, _empty_shard(layout)
        )


def _changes(before: Data | None, after: BytesLike | None, index: IndexLayout, key: str) -> Chunks:
    """The inner chunks ``after`` holds differently from ``before`` (``None``: removed)."""
    old = {} if before is None else decode_shard(before, index, key=key)
    new = {} if after is None else decode_shard(after, index, key=key)
    changes: Chunks = {pos: value for pos, value in new.items() if old.get(pos) != value}
    changes.update(dict.fromkeys(old.keys() - new.keys()))
    return changes


def _empty_shard(layout: ShardingLayout | None) -> Callable[[], bytes]:
    """A shard of ``layout`` without chunks (an index with every entry empty)."""

    def empty() -> bytes:
        assert layout is not None, "a shard is emptied only once its layout is known"
        return encode_index(empty_index(layout.index), layout.index)

    return empty


async def array_layout(
    store: Store, key: str, known: dict[str, str] | None = None
) -> ShardingLayout | None:
    """The layout of the sharded Zarr v3 array whose shard ``key`` is, read afresh from
    the nearest ``zarr.json`` above it; ``None`` when ``key`` is no such shard.

    ``known`` maps a key's folder to the folder its array was found in, tried first and
    updated here.
    """
    parent = key.rpartition("/")[0]
    hint = None if known is None else known.get(parent)
    if hint is not None:
        doc = await read_json(store, hint + "zarr.json")
        layout = None if doc is None else _layout_in(doc, hint, key)
        if layout is not None:
            return layout
    folder = key
    for _ in range(MAX_DEPTH):
        if not folder:
            return None
        folder = folder.rstrip("/").rpartition("/")[0]
        folder = folder + "/" if folder else ""
        doc = await read_json(store, folder + "zarr.json")
        if doc is None:
            continue
        layout = _layout_in(doc, folder, key)
        if layout is not None and known is not None:
            known[parent] = folder
        return layout
    return None


def _layout_in(doc: dict[str, Any], folder: str, key: str) -> ShardingLayout | None:
    """The layout of the array ``doc`` in ``folder`` if ``key`` is one of its shards."""
    if doc.get("node_type") != "array" or not is_sharded(doc):
        return None
    layout = parse_zarr3_array(doc, key_prefix=folder)
    return layout if layout.parse_shard_key(key) is not None else None
