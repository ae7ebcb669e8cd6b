"""Plumbing of every conversion: opening the store, choosing the runner, JSON writes,
deletes, and the synchronous twins of the ``*_async`` functions."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from asyncshard.backends.registry import merge_options, opened, split_options
from asyncshard.convert.runner import DEFAULT_IN_FLIGHT, AsyncioRunner, DaskRunner, Runner
from asyncshard.errors import ConflictError, ConversionError
from asyncshard.store import Store

__all__ = [
    "DELETE_BATCH",
    "DELETE_BATCHES_IN_FLIGHT",
    "blocking",
    "delete_keys",
    "fold_storage_options",
    "make_runner",
    "opened",
    "run_sync",
    "write_json",
]

T = TypeVar("T")
P = ParamSpec("P")
#: Keys per ``erase_values`` call at most: S3 deletes up to 1,000 keys per request.
DELETE_BATCH = 1000
#: ``erase_values`` calls running at once.
DELETE_BATCHES_IN_FLIGHT = 8
_MIN_DELETE_BATCH = 64


def fold_storage_options(options: Mapping[str, Any], own: Collection[str]) -> dict[str, Any]:
    """``options`` with every key not in ``own`` (and ``storage_options``) folded into one
    ``storage_options`` dict: keywords and the dict are the same thing (docs/cloud.md)."""
    mine, rest = split_options(options, {*own, "storage_options"})
    mine["storage_options"] = merge_options(mine.get("storage_options"), rest)
    return mine


def make_runner(
    store: Store,
    *,
    runner: Runner | None,
    client: Any,
    max_in_flight: int | None,
) -> Runner:
    """The runner asked for: explicit, Dask (``client``), or asyncio in this process.

    Dask workers reopen ``store`` from its :attr:`~Store.url` and
    :attr:`~Store.open_options`, so they reach the same place with the same options.
    """
    if runner is not None:
        if client is not None:
            raise ValueError("pass either runner or client, not both")
        return runner
    in_flight = DEFAULT_IN_FLIGHT if max_in_flight is None else max_in_flight
    if client is not None:
        if store.url is None:
            raise TypeError(f"Dask workers open the store from its URL; {store!r} has none")
        return DaskRunner(client, store.url, store.open_options, max_in_flight=in_flight)
    return AsyncioRunner(in_flight)


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
    """Delete ``keys`` in batches of at most :data:`DELETE_BATCH` keys, up to
    :data:`DELETE_BATCHES_IN_FLIGHT` batches at once.

    A batch is one bulk request where the backend has one (S3 DeleteObjects) or one
    worker thread on local files, so lists are cut into several batches even when they
    are short: unlinking a file that holds data costs the kernel 0.1-0.4 ms on ext4, and
    batches in parallel overlap that. Every batch runs to its end; the first failure is
    raised afterwards (the journal makes a later run delete what is left).
    """
    if not keys:
        return
    size = min(DELETE_BATCH, max(_MIN_DELETE_BATCH, -(-len(keys) // DELETE_BATCHES_IN_FLIGHT)))
    limit = asyncio.Semaphore(DELETE_BATCHES_IN_FLIGHT)

    async def delete(batch: Sequence[str]) -> None:
        async with limit:
            await store.erase_values(batch)

    batches = [keys[i : i + size] for i in range(0, len(keys), size)]
    outcomes = await asyncio.gather(*(delete(b) for b in batches), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


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


def blocking(func: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The synchronous twin of a ``*_async`` function: same arguments, same result."""

    @functools.wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(func(*args, **kwargs))

    run.__name__ = run.__qualname__ = func.__name__.removesuffix("_async")
    run.__doc__ = f"Synchronous :func:`{func.__name__}`.\n\n{func.__doc__ or ''}"
    return run
