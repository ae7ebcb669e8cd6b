"""Deletes and server-side copies of a cloud store: one ``DELETE`` per key, S3's bulk
``DeleteObjects`` (one request per :data:`BULK_DELETE_KEYS` keys), and copies that the
server makes without the bytes passing through the client (S3 ``CopyObject``, GCS's
copy-source ``PUT``)."""

from __future__ import annotations

from typing import Any, Protocol

import obstore

from asyncshard.backends.cloud.calls import Caller, call
from asyncshard.backends.cloud.errors import OBSTORE_ERRORS, Failure, classify
from asyncshard.errors import AsyncShardError

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
