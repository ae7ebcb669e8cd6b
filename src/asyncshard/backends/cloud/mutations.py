"""Deletes and server-side copies of a cloud store: one ``DELETE`` per key, S3's bulk
``DeleteObjects`` (one request per :data:`BULK_DELETE_KEYS` keys), and copies that the
server makes without the bytes passing through the client (S3 ``CopyObject``, GCS's
copy-source ``PUT``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import obstore

from asyncshard.backends.cloud.calls import Caller, call
from asyncshard.backends.cloud.errors import OBSTORE_ERRORS, Failure, classify
from asyncshard.errors import AsyncShardError
from asyncshard.fanout import gather_settled
from asyncshard.objects import ObjectMeta

T = TypeVar("T")

#: Keys per request of a bulk delete. S3's DeleteObjects takes up to 1,000 keys and
#: obstore sends one request per 1,000; a missing key is no error there. GCS has no bulk
#: delete (obstore sends one DELETE per object, so asyncshard does, under its own bound
#: and treating 404 per key). Azure's Blob Batch takes 256, but obstore fails the whole
#: call when one blob is missing, and no Azure server runs in the tests: one per key.
BULK_DELETE_KEYS = {"s3": 1000}
#: Kinds whose servers copy an object without its bytes passing through the client (S3
#: CopyObject, GCS's copy-source PUT). Plain HTTP has no copy; WebDAV's COPY is not
#: answered by every HTTP server behind the same kind, and no Azure server runs in the
#: tests: those read and write.
SERVER_SIDE_COPY = frozenset({"s3", "gs"})
#: The largest object S3's CopyObject copies in one request (5 GiB); a larger one is read
#: and written (obstore uploads it in parts).
MAX_SERVER_SIDE_COPY = 5 << 30


class Mutator(Caller, Protocol):
    """What deletes and copies need of their store (``CloudStore`` has it)."""

    _os: Any
    kind: str

    def _check_writable(self) -> None: ...

    def _count_request(self, kind: str, n: int = 1) -> None: ...

    async def _bounded(self, awaitable: Awaitable[T], nbytes: int | None = 0) -> T: ...

    async def _head(self, key: str) -> ObjectMeta | None: ...

    def _missing(self, failure: Failure) -> bool: ...

    def _error(
        self, exc: BaseException, failure: Failure, key: str | None, action: str
    ) -> AsyncShardError: ...


async def delete(store: Mutator, keys: str | list[str]) -> None:
    """Delete one key, or a batch of keys in one bulk request; missing keys are fine."""
    first = keys if isinstance(keys, str) else keys[0]
    try:
        await call(store, lambda: obstore.delete_async(store._os, keys), key=first)
    except OBSTORE_ERRORS as exc:
        failure = classify(exc, first if isinstance(keys, str) else None)
        if failure is not Failure.MISSING:
            more = 0 if isinstance(keys, str) else len(keys) - 1
            where = f"{first} (and {more} more)" if more else first
            raise store._error(exc, failure, where, "delete") from exc


async def server_copy(store: Mutator, source: str, target: str) -> bool:
    """Copy ``source`` to ``target`` on the server; ``False`` if ``source`` is missing."""
    try:
        await call(store, lambda: obstore.copy_async(store._os, source, target), key=source)
    except OBSTORE_ERRORS as exc:
        failure = classify(exc, source)
        if store._missing(failure):  # deleted since the HEAD
            return False
        raise store._error(exc, failure, target, "copy") from exc
    return True


async def delete_many(
    store: Mutator, keys: Sequence[str], one_by_one: Callable[[Sequence[str]], Awaitable[None]]
) -> None:
    """Delete ``keys``: in bulk requests of :data:`BULK_DELETE_KEYS` where the kind has
    them, else through ``one_by_one`` (the store's default, one DELETE per key)."""
    store._check_writable()
    size = BULK_DELETE_KEYS.get(store.kind)
    if size is None:
        await one_by_one(keys)
        return
    batches = [list(keys[i : i + size]) for i in range(0, len(keys), size)]
    store._count_request("delete", len(batches))
    await gather_settled(store._bounded(delete(store, b)) for b in batches)


async def copy(
    store: Mutator,
    source: str,
    target: str,
    read_and_write: Callable[[str, str], Awaitable[int | None]],
) -> int | None:
    """Copy ``source`` to ``target``; its size, ``None`` if missing. On
    :data:`SERVER_SIDE_COPY` kinds a HEAD of the source (its size; a missing source sends
    nothing more), then a server-side copy; elsewhere, or above
    :data:`MAX_SERVER_SIDE_COPY`, through ``read_and_write``."""
    if store.kind not in SERVER_SIDE_COPY:
        return await read_and_write(source, target)
    store._check_writable()
    store._count_request("head")
    meta = await store._bounded(store._head(source))  # a HEAD: no bytes held
    if meta is None:
        store._count_request("copy", -1)  # no copy request sent
        return None
    if meta.size > MAX_SERVER_SIDE_COPY:
        return await read_and_write(source, target)
    copied = await store._bounded(server_copy(store, source, target))
    return meta.size if copied else None
