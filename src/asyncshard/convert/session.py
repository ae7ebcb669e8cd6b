"""Plumbing shared by the Zarr and precomputed conversions: stores, runners, JSON, deletes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from asyncshard.backends.local import LocalStore
from asyncshard.backends.registry import open_store
from asyncshard.convert.runner import DEFAULT_IN_FLIGHT, AsyncioRunner, DaskRunner, Runner
from asyncshard.errors import ConflictError, ConversionError
from asyncshard.store import Store

__all__ = [
    "DELETE_BATCH",
    "delete_keys",
    "make_runner",
    "opened",
    "read_json",
    "run_sync",
    "write_json",
]

T = TypeVar("T")
DELETE_BATCH = 1000


@asynccontextmanager
async def opened(
    url_or_store: str | Store, storage_options: Mapping[str, Any] | None
) -> AsyncIterator[Store]:
    """The store itself, or one opened from a URL (and closed afterwards)."""
    if isinstance(url_or_store, Store):
        yield url_or_store
        return
    async with open_store(url_or_store, **dict(storage_options or {})) as store:
        yield store


def store_url(url_or_store: str | Store) -> str:
    """A URL workers can open: the URL given, or a local store's folder."""
    if isinstance(url_or_store, str):
        return url_or_store
    if isinstance(url_or_store, LocalStore):
        return str(url_or_store.root)
    raise TypeError(
        f"Dask workers open the store from its URL; pass a URL instead of {url_or_store!r}"
    )


def make_runner(
    url_or_store: str | Store,
    *,
    runner: Runner | None,
    client: Any,
    storage_options: Mapping[str, Any] | None,
    max_in_flight: int | None,
) -> Runner:
    """The runner asked for: explicit, Dask (``client``), or asyncio in this process."""
    if runner is not None:
        if client is not None:
            raise ValueError("pass either runner or client, not both")
        return runner
    in_flight = DEFAULT_IN_FLIGHT if max_in_flight is None else max_in_flight
    if client is not None:
        return DaskRunner(client, store_url(url_or_store), storage_options, max_in_flight=in_flight)
    return AsyncioRunner(in_flight)


async def read_json(store: Store, key: str) -> tuple[Any, str | None] | None:
    """``(document, version)`` of a JSON object, ``None`` if missing or not JSON."""
    got = await store.get_object(key)
    if got is None:
        return None
    try:
        return json.loads(bytes(got.data)), got.meta.version
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


async def write_json(store: Store, key: str, doc: Any, version: str | None) -> str | None:
    """Replace a JSON object, only if it is still at ``version`` (when the store can tell).

    Returns the new version. ``ConversionError`` if someone else changed it meanwhile.
    """
    data = json.dumps(doc, indent=2).encode()
    conditional = store.supports_conditional_writes and version is not None
    try:
        return await store.set(key, data, if_match=version if conditional else None)
    except ConflictError:
        raise ConversionError(
            f"{key} changed while the conversion ran; run it again (nothing was lost)"
        ) from None


async def delete_keys(store: Store, keys: Sequence[str]) -> None:
    """Delete ``keys`` in batches (a huge list does not become a huge ``gather``)."""
    for i in range(0, len(keys), DELETE_BATCH):
        await store.erase_values(keys[i : i + DELETE_BATCH])


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a conversion coroutine from synchronous code."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(
        "an event loop is running: await the *_async variant of this function instead"
    )
