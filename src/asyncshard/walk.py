"""Listing a large folder in parts, several listings at a time.

An object store lists a prefix one page after another (1,000 keys a page on S3), each
page asked for once the last one arrived: a million chunk keys are a thousand round
trips in a row. Chunk keys usually nest in folders (``c/0/1/2``), so :func:`walk_keys`
first walks the top folders with ``list_dir``, breadth first, while it has fewer than
``width`` of them (at most ``MAX_LEVELS`` down), then lists what lies below the folders
found with ``list_prefix``, ``width`` listings at a time.

Those listings are string prefixes that split the folders found into at most
``MAX_PARTS`` parts: each folder's own prefix where there are few folders, else the
first characters of their names (``c/1`` covers ``c/1/`` and ``c/10/`` to ``c/19/``), as
many as keep the parts within ``MAX_PARTS``. So many small folders cost a few listings,
not one each, and the requests stay within the pages of one listing plus
``MAX_PARTS`` and the ``list_dir`` of the levels walked. Keys stored flat in one folder
(``c.0.1.2``, precomputed chunk names) take a single ``list_dir``. A store without a
listing of its own by folder (``list_dir`` computed from a whole listing) is listed
with one ``list_prefix``.

A walk pays a ``list_dir`` per level before it lists: for a folder that one page of one
listing holds, that is two or three round trips instead of one. :func:`list_keys`
starts both on stores that list in pages (object stores), the first page of one
listing and the walk: a folder of fewer than ``PAGE`` keys is known after that one
request (the walk is cancelled, unless it finished first), a larger one is walked (the
listing stops after its first page). ``CloudStore.erase_prefix`` lists with it;
conversions, manifest rebuilds and verification list with its streamed form,
:func:`iter_keys`.

Both list what ``list_prefix`` lists, through the same two Store verbs, so they hold on
every store that keeps the Store contract (the conformance suite checks it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from asyncshard.keys import validate_prefix
from asyncshard.store import Store

__all__ = [
    "MAX_LEVELS",
    "MAX_PARTS",
    "PAGE",
    "QUEUE",
    "WIDTH",
    "iter_keys",
    "list_keys",
    "walk_keys",
]

#: Listings at a time, and the folders the walk looks for before it lists.
WIDTH = 16
#: Folder levels walked with ``list_dir`` at most (a 3-d array's ``c/i/j/``).
MAX_LEVELS = 3
#: Listings the folders found are split into, at most.
MAX_PARTS = 256
#: Keys of a listing's page on S3 and GCS: fewer, and one listing request holds them all.
PAGE = 1000
#: Batches of keys a streamed walk holds ready at most (:func:`iter_keys`).
QUEUE = 8

T = TypeVar("T")


async def walk_keys(store: Store, prefix: str, *, width: int = WIDTH) -> list[str]:
    """Every key that ``store.list_prefix(prefix)`` lists, in no particular order.

    ``prefix`` is a folder (``""`` or ending in ``/``) to walk; any other string prefix
    is listed with one ``list_prefix``, as is every prefix of a store whose
    ``list_dir`` is not its own.
    """
    if width < 1:
        raise ValueError("width must be >= 1")
    prefix = validate_prefix(prefix)
    if not _walkable(store, prefix):
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

    async def listed(part: tuple[str, str]) -> list[str]:
        known, start = part  # the keys directly in ``known`` came with its list_dir
        return [k async for k in store.list_prefix(start) if "/" in k[len(known) :]]

    for found in await _each(_parts(folders), listed, width):
        keys.extend(found)
    return keys


async def list_keys(store: Store, prefix: str, *, width: int = WIDTH) -> list[str]:
    """Every key that ``store.list_prefix(prefix)`` lists, in no particular order: on a
    store that lists in pages (:attr:`~asyncshard.store.Store.lists_in_pages`), one
    listing when its first page holds them all, else :func:`walk_keys`. Both start at
    once; whichever gives the answer first does, and the other is stopped (servers
    that keep folders, such as SeaweedFS, list a nested prefix whole more slowly than
    by folders, and their walk can finish first). Elsewhere (local files, memory: a
    listing is no round trip, and not cut into pages) :func:`walk_keys`."""
    if width < 1:
        raise ValueError("width must be >= 1")
    prefix = validate_prefix(prefix)
    if not _walkable(store, prefix):
        return [k async for k in store.list_prefix(prefix)]
    if not store.lists_in_pages:
        return await walk_keys(store, prefix, width=width)

    page = asyncio.ensure_future(_first_page(store, prefix))
    walk = asyncio.ensure_future(walk_keys(store, prefix, width=width))
    try:
        await asyncio.wait((page, walk), return_when=asyncio.FIRST_COMPLETED)
        if walk.done() and not walk.cancelled() and walk.exception() is None:
            return walk.result()
        keys = await page
        return keys if keys is not None else await walk
    finally:
        for task in (page, walk):
            task.cancel()  # a no-op once done
        await asyncio.gather(page, walk, return_exceptions=True)


async def iter_keys(store: Store, prefix: str, *, width: int = WIDTH) -> AsyncIterator[str]:
    """Every key that ``store.list_prefix(prefix)`` lists, in no particular order, as a
    stream: what conversions list with, holding a few batches of keys whatever the count.

    On a store whose listing is no round trip (local files, memory) the listing itself
    (a ``LocalStore`` reads folder by folder as it goes). On a store that lists in
    pages, :func:`list_keys`' race: the first page of one listing, and the walk, whose
    listings put their keys into a queue of :data:`QUEUE` batches (a listing waits
    while the queue is full); a folder of less than a page is answered by whichever
    finishes first. What a walk still holds is the ``list_dir`` of the folders it walks
    (all the keys of a flat folder: ``c.i.j`` keys gain nothing from the walk anyway).
    """
    prefix = validate_prefix(prefix)
    if not (store.lists_in_pages and _walkable(store, prefix)):
        async for key in store.list_prefix(prefix):
            yield key
        return
    queue: asyncio.Queue[list[str]] = asyncio.Queue(QUEUE)
    page = asyncio.ensure_future(_first_page(store, prefix))
    walk = asyncio.ensure_future(_walk_into(store, prefix, width, queue))
    try:
        await asyncio.wait((page, walk), return_when=asyncio.FIRST_COMPLETED)
        if not (walk.done() and walk.exception() is None):  # running, or failed
            keys = await page
            if keys is not None:  # less than a page: all of it
                for key in keys:
                    yield key
                return
        page.cancel()
        while True:
            batch = asyncio.ensure_future(queue.get())
            await asyncio.wait((batch, walk), return_when=asyncio.FIRST_COMPLETED)
            if not batch.done():  # the walk ended: its failure, or what it left
                batch.cancel()
                walk.result()
                while not queue.empty():
                    for key in queue.get_nowait():
                        yield key
                return
            for key in batch.result():
                yield key
    finally:
        for task in (page, walk):
            task.cancel()  # a no-op once done
        await asyncio.gather(page, walk, return_exceptions=True)


async def _first_page(store: Store, prefix: str) -> list[str] | None:
    """The keys of ``prefix`` if fewer than ``PAGE``, else ``None``."""
    keys: list[str] = []
    listing = store.list_prefix(prefix)
    try:
        async for key in listing:
            keys.append(key)
            if len(keys) >= PAGE:
                return None
    finally:
        if isinstance(listing, AsyncGenerator):
            await listing.aclose()
    return keys


async def _walk_into(
    store: Store, prefix: str, width: int, queue: asyncio.Queue[list[str]]
) -> None:
    """:func:`walk_keys`, its keys put into ``queue`` in batches of at most ``PAGE``."""
    folders = [prefix]
    for _ in range(MAX_LEVELS):
        below: list[str] = []
        for found, subfolders in await _each(folders, store.list_dir, width):
            for i in range(0, len(found), PAGE):
                await queue.put(found[i : i + PAGE])
            below.extend(subfolders)
        folders = below
        if len(folders) >= width:
            break

    async def listed(part: tuple[str, str]) -> None:
        known, start = part  # the keys directly in ``known`` came with its list_dir
        batch: list[str] = []
        async for key in store.list_prefix(start):
            if "/" in key[len(known) :]:
                batch.append(key)
                if len(batch) >= PAGE:
                    await queue.put(batch)
                    batch = []
        if batch:
            await queue.put(batch)

    await _each(_parts(folders), listed, width)


def _walkable(store: Store, prefix: str) -> bool:
    """Whether ``prefix`` is a folder and ``store`` lists folders by themselves."""
    folder = not prefix or prefix.endswith("/")
    return folder and type(store)._list_dir is not Store._list_dir


def _parent(folder: str) -> str:
    """The folder holding ``folder`` (both ``""`` or ending in ``/``)."""
    return folder[: folder[:-1].rfind("/") + 1]


def _parts(folders: Sequence[str]) -> list[tuple[str, str]]:
    """Listings that cover everything below ``folders`` (of one depth, each ending in
    ``/``) exactly once: ``(folder whose own keys are known, string prefix)``.

    Each folder itself while there are at most ``MAX_PARTS``; else the first ``n``
    characters of the names in each parent folder, for the largest ``n`` that keeps
    within ``MAX_PARTS`` (a name shorter than ``n`` is a part of its own, ending in
    ``/``, which no other part starts with; two parts of ``n`` characters cannot start
    one another); else the parent folders whole.
    """
    if len(folders) <= MAX_PARTS:
        return [(_parent(f), f) for f in folders]
    named = [(parent, f[len(parent) :]) for f in folders for parent in (_parent(f),)]
    parts: set[tuple[str, str]] | None = None
    for n in range(1, max(len(name) for _, name in named) + 1):
        wider = {(parent, parent + name[:n]) for parent, name in named}
        if len(wider) > MAX_PARTS:
            break
        parts = wider
    if parts is None:  # even the first characters are too many
        return sorted({(parent, parent) for parent, _ in named})
    return sorted(parts)


R = TypeVar("R")


async def _each(items: Sequence[T], call: Callable[[T], Awaitable[R]], width: int) -> list[R]:
    """``call`` on every item, at most ``width`` at once; the results in order. The
    first failure cancels the calls still running (they only read) and is raised once
    they have ended; a cancellation of the caller cancels them too."""
    limit = asyncio.Semaphore(width)

    async def one(item: T) -> R:
        async with limit:
            return await call(item)

    tasks = [asyncio.ensure_future(one(item)) for item in items]
    if not tasks:
        return []
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # after a failure, or when the caller is cancelled: stop the rest, and
        for task in tasks:  # retrieve every outcome (none is logged as never retrieved)
            task.cancel()  # a no-op once done
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error
    return [task.result() for task in tasks]
