"""Listing of a cloud store: every key below a prefix, page by page (a page that fails
is asked again from the last key seen, through :func:`.calls.call`), and one folder
level at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import obstore

from asyncshard.backends.cloud.calls import Caller, call
from asyncshard.backends.cloud.errors import OBSTORE_ERRORS, Failure, classify
from asyncshard.errors import AsyncShardError, UnsupportedOperationError

#: Keys per page of a listing.
PAGE = 1000


class Lister(Caller, Protocol):
    """What a listing needs of its store (``CloudStore`` has it)."""

    kind: str
    prefix: str
    _os: Any
    _listing: bool

    def _error(
        self, exc: BaseException, failure: Failure, key: str | None, action: str
    ) -> AsyncShardError: ...


def no_listing(store: Lister) -> UnsupportedOperationError:
    """The error of a listing on a store that has none (plain HTTP)."""
    return UnsupportedOperationError(
        f"{store!r} cannot list: plain HTTP has no listing (open it with listing=True "
        "if the server speaks WebDAV PROPFIND)"
    )


async def list_keys(store: Lister, prefix: str) -> AsyncIterator[str]:
    """Every key starting with ``prefix`` (see :func:`list_entries`)."""
    async for key, _ in list_entries(store, prefix):
        yield key


async def list_entries(store: Lister, prefix: str) -> AsyncIterator[tuple[str, Any]]:
    """Every key starting with ``prefix`` with obstore's metadata of its object. obstore
    lists whole path segments and asyncshard prefixes are plain strings: the enclosing
    folder is listed and filtered."""
    if not store._listing:
        raise no_listing(store)
    folder = prefix.rpartition("/")[0] or None
    stream: Any = None
    last: str | None = None

    async def page() -> Any:
        nonlocal stream
        if stream is None:
            stream = obstore.list(store._os, folder, offset=last, chunk_size=PAGE)
        try:
            return await stream.__anext__()
        except BaseException:
            stream = None  # asked again from ``last`` if retried
            raise

    while True:
        try:
            batch = await call(store, page, key=prefix or None)
        except StopAsyncIteration:
            return
        except OBSTORE_ERRORS as exc:
            raise store._error(exc, classify(exc, prefix), prefix or None, "list") from exc
        for meta in batch:
            last = meta["path"]
            key = key_of(store, meta["path"])
            if key is not None and key.startswith(prefix):
                yield key, meta


async def list_dir(store: Lister, prefix: str) -> tuple[list[str], list[str]]:
    """Keys and child prefixes directly below the folder ``prefix``."""
    if not store._listing:
        raise no_listing(store)
    try:
        result = await call(
            store,
            lambda: obstore.list_with_delimiter_async(store._os, prefix[:-1] or None),
            key=prefix or None,
        )
    except OBSTORE_ERRORS as exc:
        failure = classify(exc, prefix)
        if failure is Failure.MISSING:
            return [], []
        raise store._error(exc, failure, prefix or None, "list") from exc
    keys = {key_of(store, meta["path"]) for meta in result["objects"]}
    prefixes = {key_of(store, p.rstrip("/")) for p in result["common_prefixes"]}
    return (
        sorted(k for k in keys if k and k.startswith(prefix)),
        sorted(
            p + "/" for p in prefixes if p and (p + "/").startswith(prefix) and p + "/" != prefix
        ),
    )


def key_of(store: Lister, path: str) -> str | None:
    """The store key of a listed path (obstore's WebDAV listing starts at the host)."""
    if store.kind != "http" or not store.prefix:
        return path
    base = store.prefix + "/"
    return path[len(base) :] if path.startswith(base) else None
