"""Format-independent pieces of the sharding engine: cache namespaces, read-merge-write,
metadata reads."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from asyncshard.backends.registry import StoreLocation, open_store
from asyncshard.formats.jsondoc import parse_json_object
from asyncshard.store import BytesLike, GetResult, ObjectMeta, Store, retry_on_conflict

__all__ = [
    "UNCHANGED",
    "Opened",
    "Unchanged",
    "folder_key",
    "new_namespace",
    "open_document",
    "read_json",
    "read_json_versioned",
    "read_merge_write",
]

_namespaces = itertools.count()


class Unchanged(enum.Enum):
    """The type of :data:`UNCHANGED`."""

    UNCHANGED = "unchanged"


#: Returned by a ``rebuild`` function of :func:`read_merge_write`: nothing to write.
UNCHANGED = Unchanged.UNCHANGED


def new_namespace(kind: str) -> tuple[str, int]:
    """A cache namespace unique in the process: ``(kind, n)``.

    Every key a sharded store puts in the shared :class:`~asyncshard.cache.LoadingCache` is a
    tuple starting with its namespace, so ``invalidate_namespace`` drops exactly its entries.
    """
    return kind, next(_namespaces)


async def read_merge_write(
    inner: Store,
    shard_key: str,
    rebuild: Callable[[GetResult | None], BytesLike | Unchanged | None],
    written: Callable[[BytesLike | None, str | None], None],
    empty_shard: Callable[[], bytes],
    known: GetResult | None = None,
    stale: Callable[[], None] = lambda: None,
) -> str | None:
    """Update one shard: read it whole, ``rebuild`` it, write it back conditionally.

    ``known``: the shard as the caller last wrote it, used by the first attempt instead
    of a read. The write is conditional on its version, so a change by anyone else
    meanwhile fails it (``stale()`` is called) and the next attempt reads; when
    ``rebuild`` changes nothing (the callers' own conditions failed), they are judged
    again on a read.

    ``rebuild(current)`` (``None`` when the shard does not exist) returns the new shard
    bytes, ``None`` when no chunk is left, or :data:`UNCHANGED` to write nothing. The
    write is conditional on the version read (``if_absent`` for a new shard) when
    ``inner`` supports conditional writes, and the whole attempt is retried on conflict
    (:func:`~asyncshard.store.retry_on_conflict`). ``written(new, version)`` runs after a
    successful write or delete (``new`` is ``None`` then). Returns the new version (the
    version read when nothing was written). A shard left without chunks is removed as
    :func:`replace_shard` says.
    """

    from_known = False

    async def attempt() -> str | None:
        nonlocal known, from_known
        if from_known:  # the attempt from the kept copy conflicted
            stale()
        current, known = known, None
        read = current is None
        from_known = not read
        if read:
            current = await inner.get_object(shard_key)
        new = rebuild(current)
        if isinstance(new, Unchanged) and not read:
            current = await inner.get_object(shard_key)
            new = rebuild(current)
        if isinstance(new, Unchanged):
            return None if current is None else current.meta.version
        kept, version = await replace_shard(
            inner, shard_key, new, None if current is None else current.meta, empty_shard
        )
        written(kept, version)
        return version

    return await retry_on_conflict(attempt, shard_key)


async def replace_shard(
    inner: Store,
    shard_key: str,
    new: BytesLike | None,
    current: ObjectMeta | None,
    empty_shard: Callable[[], bytes],
) -> tuple[BytesLike | None, str | None]:
    """Put ``new`` (``None``: no chunk left) in place of the shard ``current`` (``None``:
    absent), conditionally on its version where ``inner`` can; ``(what was written, its
    version)``, ``(None, None)`` when the shard was deleted or stays absent.

    A shard left without chunks is deleted only if that cannot lose a concurrent write:
    conditionally where the store can (``erase_if_match``); where it can write but not
    delete conditionally, ``empty_shard()`` (an index with every entry empty, which
    readers see as no chunks) is written conditionally instead. Stores with no
    conditions at all are last-writer-wins anyway and get a plain delete.
    """
    conditional = inner.supports_conditional_writes
    if new is None:
        if current is None:
            return None, None
        if inner.supports_conditional_deletes and current.version:
            await inner.erase_if_match(shard_key, current.version)
            return None, None
        if not conditional:
            await inner.erase_values([shard_key])
            return None, None
        new = empty_shard()
    version = await inner.set(
        shard_key,
        new,
        if_match=current.version if conditional and current is not None else None,
        if_absent=conditional and current is None,
    )
    return new, version


async def read_json_versioned(store: Store, key: str) -> tuple[dict[str, Any], str | None] | None:
    """The JSON object stored at ``key`` and its version (for a conditional rewrite),
    ``None`` if missing; ``InvalidMetadataError`` if it is not a JSON object."""
    got = await store.get_object(key)
    return None if got is None else (parse_json_object(got.data, key), got.meta.version)


async def read_json(store: Store, key: str) -> dict[str, Any] | None:
    """The JSON object stored at ``key`` (:func:`read_json_versioned` without the version:
    the bytes alone, one completion on cloud stores)."""
    data = await store.get(key)
    return None if data is None else parse_json_object(data, key)


def folder_key(path: str, name: str) -> str:
    """The key of ``name`` in the folder ``path`` (no slash at either end; ``""``: the
    root). ``name`` ``""`` gives the folder's prefix (``""`` or ending in ``/``)."""
    return f"{path}/{name}" if path else name


class Opened(NamedTuple):
    """A dataset's folder opened, and its metadata document read (:func:`open_document`)."""

    store: Store
    path: str
    key: str
    doc: dict[str, Any] | None


async def open_document(
    location: StoreLocation,
    storage_options: Mapping[str, Any] | None,
    storage: Mapping[str, Any],
    path: str,
    name: str,
) -> Opened:
    """Open ``location`` (:func:`~asyncshard.open_store` with ``storage_options`` and the
    storage keywords ``storage``) and read the JSON document ``name`` of its folder
    ``path``: the store, ``path`` without slashes at its ends, the document's key and
    the document (``None`` if missing)."""
    store = open_store(location, storage_options, **storage)
    path = path.strip("/")
    key = folder_key(path, name)
    return Opened(store, path, key, await read_json(store, key))
