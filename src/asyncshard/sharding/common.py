"""Helpers shared by the sharded stores (Zarr ``ShardedStore``, precomputed ``Uint64ShardedStore``).

Both stores follow one design: decoded indexes live in the shared :class:`IndexCache`,
data reads are conditioned on the version of the cached index (a ``ConflictError`` whose
``key`` is a shard key means "that cached index is stale"), and partial updates are a
read-merge-write of the whole shard under a conditional write. The pieces of that design
that do not depend on the format are here.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

from asyncshard.errors import ConflictError, InvalidMetadataError
from asyncshard.store import (
    BytesLike,
    GetResult,
    ObjectMeta,
    Store,
    check_condition,
    retry_on_conflict,
)

T = TypeVar("T")

__all__ = [
    "ConditionFailed",
    "check_caller_condition",
    "new_namespace",
    "read_json",
    "read_merge_write",
    "retry_stale",
]

_namespaces = itertools.count()


def new_namespace(kind: str) -> tuple[str, int]:
    """A cache namespace unique in the process: ``(kind, n)``.

    Every key a sharded store puts in the shared :class:`~asyncshard.cache.IndexCache` is a
    tuple starting with its namespace, so ``invalidate_namespace`` drops exactly its entries.
    """
    return kind, next(_namespaces)


class ConditionFailed(Exception):
    """Carries a caller's failed chunk condition past the shard-write retry loop.

    A ``ConflictError`` inside :func:`read_merge_write` means "the shard changed under
    us, try again"; a caller's own ``if_match``/``if_absent`` on a chunk failing is
    final, so it travels as this exception and is unwrapped with ``.error``.
    """

    def __init__(self, error: ConflictError) -> None:
        super().__init__(str(error))
        self.error = error


def check_caller_condition(
    key: str, current: ObjectMeta | None, if_match: str | None, if_absent: bool
) -> None:
    """:func:`check_condition` for a caller's chunk condition: raises :class:`ConditionFailed`."""
    try:
        check_condition(key, current, if_match, if_absent)
    except ConflictError as exc:
        raise ConditionFailed(exc) from None


async def retry_stale(
    read: Callable[[], Awaitable[T]],
    shard_keys: Collection[str],
    forget: Callable[[str], None],
) -> T:
    """Run ``read``; when it fails because a cached shard index is stale, drop it and rerun.

    A ``ConflictError`` naming one of ``shard_keys`` (a data read conditioned on a cached
    version found the shard rewritten or gone) drops that shard's cached index with
    ``forget`` and runs ``read`` again, at most once per shard. Any other
    ``ConflictError`` (a caller's own condition) is raised at once.
    """
    forgotten: set[str] = set()
    while True:
        try:
            return await read()
        except ConflictError as exc:
            if exc.key is None or exc.key not in shard_keys or exc.key in forgotten:
                raise
            forgotten.add(exc.key)
            forget(exc.key)


async def read_merge_write(
    inner: Store,
    shard_key: str,
    rebuild: Callable[[GetResult | None], BytesLike | None],
    written: Callable[[BytesLike | None, str | None], None],
    empty_shard: Callable[[], bytes],
) -> str | None:
    """Update one shard: read it whole, ``rebuild`` it, write it back conditionally.

    ``rebuild(current)`` (``None`` when the shard does not exist) returns the new shard
    bytes, or ``None`` when no chunk is left. The write is conditional on the version read
    (``if_absent`` for a new shard) when ``inner`` supports conditional writes, and the
    whole attempt is retried on conflict (:func:`retry_on_conflict`). ``written(new,
    version)`` runs after a successful write or delete (``new`` is ``None`` then).
    Returns the new version. :class:`ConditionFailed` from ``rebuild`` is not retried.

    A shard left without chunks is deleted only if that cannot lose a concurrent write:
    conditionally where the store can (``delete_if_match``); where it can write but not
    delete conditionally, ``empty_shard()`` (an index with every entry empty, which
    readers see as no chunks) is written conditionally instead of deleting. Stores with
    no conditions at all are last-writer-wins anyway and get a plain delete.
    """
    conditional = inner.supports_conditional_writes

    async def attempt() -> str | None:
        current = await inner.get_object(shard_key)
        new = rebuild(current)
        if new is None:
            if current is None:
                written(None, None)
                return None
            if inner.supports_conditional_deletes and current.meta.version:
                await inner.delete_if_match(shard_key, current.meta.version)
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


async def read_json(store: Store, key: str) -> dict[str, Any] | None:
    """The JSON object stored at ``key``, ``None`` if missing; ``InvalidMetadataError`` if bad."""
    raw = await store.get(key)
    if raw is None:
        return None
    try:
        doc = json.loads(bytes(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidMetadataError(f"{key}: not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidMetadataError(f"{key}: expected a JSON object")
    return doc
