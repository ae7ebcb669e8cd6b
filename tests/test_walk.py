"""walk_keys: a folder listed by its subfolders, several listings at a time; list_keys:
one listing for a folder that its first page holds, else the walk."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest

from asyncshard.backends import MemoryStore
from asyncshard.keys import split_dir
from asyncshard.walk import MAX_LEVELS, MAX_PARTS, PAGE, WIDTH, iter_keys, list_keys, walk_keys

CHUNKS = [f"a/c/{i}/{j}/{k}" for i in range(4) for j in range(4) for k in range(4)]


class SlowListings(MemoryStore):
    """A memory store whose listings take a moment, counting how many run at once, and
    come in pages as an object store's do; the listing of ``fail_at`` fails."""

    fail_at: str | None = None

    @property
    def lists_in_pages(self) -> bool:
        return True

    def __init__(self) -> None:
        super().__init__()
        self.running = self.most = 0

    async def _pause(self) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(0.002)
        finally:
            self.running -= 1

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        await self._pause()
        return await super()._list_dir(prefix)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        if prefix == self.fail_at:
            raise OSError(f"the listing of {prefix} failed")
        await self._pause()
        async for key in super()._list(prefix):
            yield key


async def seeded(keys: list[str]) -> SlowListings:
    store = SlowListings()
    await store.set_many([(k, b"x") for k in [*keys, "a/zarr.json"]])
    store.stats.reset()
    return store


async def test_nested_keys_cost_the_folders_walked_and_one_listing_each() -> None:
    """A 3-d array's ``c/i/j/k`` keys (4^3): list_dir of ``a/``, ``c/`` and the four
    ``c/i/``, then sixteen ``c/i/j/`` listings, at most WIDTH at once."""
    store = await seeded(CHUNKS)
    assert sorted(await walk_keys(store, "a/")) == sorted([*CHUNKS, "a/zarr.json"])
    assert MAX_LEVELS == 3 and WIDTH == 16
    assert store.stats.requests["list"] == 1 + 1 + 4 + 16
    assert 1 < store.most <= WIDTH


async def test_width_bounds_the_listings_at_once() -> None:
    store = await seeded(CHUNKS)
    assert sorted(await walk_keys(store, "a/", width=3)) == sorted([*CHUNKS, "a/zarr.json"])
    assert store.most == 3
    # two levels walked (a/, then c/: four folders, >= 3), then the four listed
    assert store.stats.requests["list"] == 1 + 1 + 4


async def test_keys_in_one_folder_cost_one_listing() -> None:
    flat = [f"a/c.{i}.{j}" for i in range(10) for j in range(10)]
    store = await seeded(flat)
    assert sorted(await walk_keys(store, "a/")) == sorted([*flat, "a/zarr.json"])
    assert store.stats.requests["list"] == 1


async def test_a_string_prefix_is_one_plain_listing() -> None:
    store = await seeded(CHUNKS)
    assert sorted(await walk_keys(store, "a/c/1")) == [k for k in CHUNKS if k.startswith("a/c/1")]
    assert store.stats.requests["list"] == 1


async def test_width_must_be_positive() -> None:
    with pytest.raises(ValueError, match="width"):
        await walk_keys(MemoryStore(), "", width=0)


async def test_many_small_folders_cost_few_listings() -> None:
    """2,000 folders of one key each (a 2-d grid of 2,000 x 1 chunks): listed by the
    first two characters of their names, 100 listings, not one per folder."""
    keys = [f"a/c/{i}/0" for i in range(2_000)]
    store = await seeded(keys)
    walked = await walk_keys(store, "a/")
    assert sorted(walked) == sorted([*keys, "a/zarr.json"]) and len(walked) == len(set(walked))
    assert store.stats.requests["list"] == 1 + 1 + 100 <= 2 + MAX_PARTS


async def test_keys_beside_folders_of_the_same_name_are_listed_once() -> None:
    keys = ["a/c/1", "a/c/10", "a/c/1/0", *[f"a/c/{i}/{j}" for i in range(300) for j in (0, 1)]]
    store = await seeded(sorted(set(keys)))
    walked = await walk_keys(store, "a/")
    assert sorted(walked) == sorted({*keys, "a/zarr.json"}) and len(walked) == len(set(walked))


async def test_a_failed_listing_stops_the_others_and_is_raised() -> None:
    store = SlowListings()
    store.fail_at = "a/c/1/"
    await store.set_many([(k, b"x") for k in CHUNKS])
    with pytest.raises(OSError, match="a/c/1/ failed"):
        await walk_keys(store, "a/", width=2)
    assert store.running == 0  # a/c/0/ was cancelled: nothing left running
    assert store.stats.requests["list"] < 2 + 4  # a/c/3/ was never listed


async def test_a_cancelled_walk_leaves_nothing_running() -> None:
    store = await seeded(CHUNKS)
    walk = asyncio.ensure_future(walk_keys(store, "a/", width=2))
    await asyncio.sleep(0.005)
    walk.cancel()
    with pytest.raises(asyncio.CancelledError):
        await walk
    assert store.running == 0


class SlowFolders(SlowListings):
    """Folder listings slower than plain ones: a walk is still at its first level when
    one plain listing has answered."""

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        await asyncio.sleep(0.05)
        return await super()._list_dir(prefix)


async def test_list_keys_of_a_small_folder_is_one_listing() -> None:
    store = SlowFolders()
    await store.set_many([(k, b"x") for k in [*CHUNKS, "a/zarr.json"]])
    store.stats.reset()
    assert sorted(await list_keys(store, "a/")) == sorted([*CHUNKS, "a/zarr.json"])
    # the listing, and the walk's first list_dir, stopped when the listing answered
    assert store.stats.requests["list"] == 2
    assert store.running == 0


async def test_list_keys_of_a_large_folder_is_the_walk() -> None:
    keys = [f"a/c/{i}/{j}/{k}" for i in range(11) for j in range(10) for k in range(10)]
    assert len(keys) > PAGE
    store = await seeded(keys)
    listed = await list_keys(store, "a/")
    assert sorted(listed) == sorted([*keys, "a/zarr.json"]) and len(listed) == len(set(listed))
    # the plain listing stopped at its first page; the walk: a/, c/, the 11 c/i/ (11 <
    # 16 folders after two levels, so a third), then the 110 c/i/j/ listings
    assert store.stats.requests["list"] == 1 + 1 + 1 + 11 + 110
    assert store.running == 0


async def test_list_keys_of_a_string_prefix_is_one_listing() -> None:
    store = await seeded(CHUNKS)
    assert sorted(await list_keys(store, "a/c/1")) == [k for k in CHUNKS if k.startswith("a/c/1")]
    assert store.stats.requests["list"] == 1
    with pytest.raises(ValueError, match="width"):
        await list_keys(store, "", width=0)


async def test_a_failed_first_page_stops_the_walk_and_is_raised() -> None:
    store = SlowFolders()
    store.fail_at = "a/"
    await store.set_many([(k, b"x") for k in CHUNKS])
    with pytest.raises(OSError, match="a/ failed"):
        await list_keys(store, "a/")
    assert store.running == 0


class SlowWholeListings(SlowListings):
    """Plain listings slower than folder listings (a server that keeps folders lists
    a nested prefix whole by walking them itself)."""

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        await asyncio.sleep(0.2 if prefix == "a/" else 0)
        async for key in super()._list(prefix):
            yield key

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        await self._pause()  # from the stored keys, not through the slow _list
        return split_dir(prefix, [k for k in await self.keys() if k.startswith(prefix)])

    async def keys(self) -> list[str]:
        return [k async for k in MemoryStore._list(self, "")]


async def test_list_keys_takes_the_walk_when_it_answers_first() -> None:
    store = SlowWholeListings()
    await store.set_many([(k, b"x") for k in [*CHUNKS, "a/zarr.json"]])
    store.stats.reset()
    started = asyncio.get_running_loop().time()
    assert sorted(await list_keys(store, "a/")) == sorted([*CHUNKS, "a/zarr.json"])
    assert asyncio.get_running_loop().time() - started < 0.2  # the listing was not awaited
    assert store.stats.requests["list"] == 1 + (1 + 1 + 4 + 16)
    assert store.running == 0


class Unpaged(SlowListings):
    """Listings with no pages (local files): no first page to race."""

    @property
    def lists_in_pages(self) -> bool:
        return False


async def test_list_keys_walks_stores_that_do_not_list_in_pages() -> None:
    store = Unpaged()
    await store.set_many([(k, b"x") for k in CHUNKS])
    store.stats.reset()
    assert sorted(await list_keys(store, "a/")) == sorted(CHUNKS)
    assert store.stats.requests["list"] == 1 + 1 + 4 + 16  # the walk alone
    assert not MemoryStore().lists_in_pages


class NoListing(SlowListings):
    """Every listing refused at once (plain HTTP)."""

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        raise OSError("no listing here")

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        raise OSError("no listing here")
        yield prefix  # an async generator


async def test_a_refused_listing_leaves_no_unretrieved_failure() -> None:
    """The first page and the walk's first list_dir fail in one tick: the walk is
    cancelled with its failed listing done, whose failure must still be retrieved
    (an unretrieved one is logged when collected)."""
    loop = asyncio.get_running_loop()
    logged: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: logged.append(context))
    try:
        for call in (list_keys, walk_keys):
            with pytest.raises(OSError, match="no listing"):
                await call(NoListing(), "a/")
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert logged == []


@pytest.mark.parametrize(
    "keys",
    [
        CHUNKS,  # less than a page: the page or the walk
        [f"a/c/{i}/{j}" for i in range(40) for j in range(60)],  # pages: the walk, queued
        [f"a/c.{i}" for i in range(2500)],  # flat: one list_dir
    ],
)
async def test_iter_keys_streams_what_list_keys_lists(keys: list[str]) -> None:
    store = await seeded(keys)
    streamed = [k async for k in iter_keys(store, "a/")]
    assert sorted(streamed) == sorted(await list_keys(store, "a/"))
    assert len(streamed) == len(set(streamed)) == len(keys) + 1
    assert store.running == 0


async def test_iter_keys_holds_a_bounded_queue_and_stops_with_its_reader() -> None:
    """A reader that stops early leaves no listing running; the walk waited for it."""
    store = await seeded([f"a/c/{i}/{j}" for i in range(20) for j in range(2000)])
    listing = iter_keys(store, "a/")
    seen = [await anext(listing) for _ in range(10)]
    await asyncio.sleep(0.05)  # the walk fills its queue, then waits
    assert len(seen) == 10
    await listing.aclose()  # type: ignore[attr-defined]
    assert store.running == 0


async def test_iter_keys_raises_a_failed_listing() -> None:
    store = await seeded([f"a/c/{i}/{j}" for i in range(40) for j in range(60)])
    store.fail_at = "a/c/3/"
    with pytest.raises(OSError, match="a/c/3/"):
        async for _ in iter_keys(store, "a/"):
            pass
    assert store.running == 0
