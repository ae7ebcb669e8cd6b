"""Listing a large folder by its subfolders, several listings at a time.

An object store lists a prefix one page after another (1,000 keys a page on S3), each
page asked for once the last one arrived: a million chunk keys are a thousand round
trips in a row. Chunk keys usually nest in folders (``c/0/1/2``), so :func:`walk_keys`
first walks the top folders with ``list_dir``, breadth first, until it holds ``width``
folders (or finds none below, or has gone ``MAX_LEVELS`` down), then lists the keys
below each of them with ``list_prefix``, ``width`` listings at a time. Keys stored flat
in one folder (``c.0.1.2``, precomputed chunk names) take a single ``list_dir``.

It lists what ``list_prefix`` lists, through the same two Store verbs, so it holds on
every store that keeps the Store contract (the conformance suite checks it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from asyncshard.fanout import gather_settled
from asyncshard.keys import validate_prefix
from asyncshard.store import Store

__all__ = ["MAX_LEVELS", "WIDTH", "walk_keys"]

#: Listings at a time, and the number of folders the walk looks for before it lists.
WIDTH = 16
#: Folder levels walked with ``list_dir`` at most (a 3-d array's ``c/i/j/``).
MAX_LEVELS = 3

T = TypeVar("T")


async def walk_keys(store: Store, prefix: str, *, width: int = WIDTH) -> list[str]:
    """Every key that ``store.list_prefix(prefix)`` lists, in no particular order.

    ``prefix`` is a folder (``""`` or ending in ``/``) to walk; any other string prefix
    is listed with one ``list_prefix``.
    """
    if width < 1:
        raise ValueError("width must be >= 1")
    prefix = validate_prefix(prefix)
    if prefix and not prefix.endswith("/"):
        return [k async for k in store.list_prefix(prefix)]
    keys: list[str] = []
    folders = [prefix]
    for _ in range(MAX_LEVELS):
        below: list[str] = []
        for found, subfolders in await _each(folders, store.list_dir, width):
            keys.extend(found)
            below.extend(subfolders)
        folders = below
        if len(folders) >= width:
            break

    async def listed(folder: str) -> list[str]:
        return [k async for k in store.list_prefix(folder)]

    for part in await _each(folders, listed, width):
        keys.extend(part)
    return keys


async def _each(items: Sequence[str], call: Callable[[str], Awaitable[T]], width: int) -> list[T]:
    """``call`` on every item, at most ``width`` at once; the results in order."""
    limit = asyncio.Semaphore(width)

    async def one(item: str) -> T:
        async with limit:
            return await call(item)

    return await gather_settled(one(item) for item in items)
