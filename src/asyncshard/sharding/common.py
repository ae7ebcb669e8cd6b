"""Format-independent pieces of the sharding engine: cache namespaces, read-merge-write,
metadata reads."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from typing import Any

from asyncshard.formats.jsondoc import parse_json_object
from asyncshard.store import BytesLike, GetResult, Store, retry_on_conflict

__all__ = [
    "UNCHANGED",
    "Unchanged",
    "new_namespace",
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
) -> str | None:
    """Update one shard: read it whole, ``rebuild`` it, write it back conditionally.

    ``rebuild(current)`` (``None`` when the shard does not exist) returns the new shard
    bytes, ``None`` when no chunk is left, or :data:`UNCHANGED` to write nothing. The
    write is conditional on the version read (``if_absent`` for a new shard) when
    ``inner`` supports conditional writes, and the whole attempt is retried on conflict
    (:func:`~asyncshard.store.retry_on_conflict`). ``written(new, version)`` runs after a
    successful write or delete (``new`` is ``None`` then). Returns the new version (the
    version read when nothing was written).

    A shard left without chunks is deleted only if that cannot lose a concurrent write:
    conditionally where the store can (``erase_if_match``); where it can write but not
    delete conditionally, ``empty_shard()`` (an index with every entry empty, which
    readers see as no chunks) is written conditionally instead of deleting. Stores with
    no conditions at all are last-writer-wins anyway and get a plain delete.
    """
    conditional = inner.supports_conditional_writes

    async def attempt() -> str | None:
        current = await inner.get_object(shard_key)
        new = rebuild(current)
        if isinstance(new, Unchanged):
            return None if current is None else current.meta.version
        if new is None:
            if current is None:
                written(None, None)
                return None
            if inner.supports_conditional_deletes and current.meta.version:
                await inner.erase_if_match(shard_key, current.meta.version)
                written(None, None)
                return None
            if not conditional:
                await inner.erase_values([shard_key])
                written(None, None)
                return None
            new = empty_shard()
        version = await inner.set(
            shard_key,
            new,
            if_match=current.meta.version if conditional and current is not None else None,
            if_absent=conditional and current is None,
        )
        written(new, version)
        return version

    return await retry_on_conflict(attempt, shard_key)


async def read_json_versioned(store: Store, key: str) -> tuple[dict[str, Any], str | None] | None:
    """The JSON object stored at ``key`` and its version (for a conditional rewrite),
    ``None`` if missing; ``InvalidMetadataError`` if it is not a JSON object."""
    got = await store.get_object(key)
    return None if got is None else (parse_json_object(got.data, key), got.meta.version)


async def read_json(store: Store, key: str) -> dict[str, Any] | None:
    """The JSON object stored at ``key`` (:func:`read_json_versioned` without the version)."""
    got = await read_json_versioned(store, key)
    return None if got is None else got[0]
