"""``verify`` and ``repair``: every shard of every sharded dataset of a store, inspected.

Each dataset (:mod:`asyncshard.integrity.datasets`) is opened as its sharded store, whose
format lists its shards (``is_shard``), inspects them (``inspect``) and builds the
repaired ones (``build``): the checks and the shard layout are the formats', never a
second copy. ``max_in_flight`` workers inspect a shard each at a time, so memory is
bounded by that many whole shards, and nothing is left running when a scan ends.

The workers take their shards from the listing as it streams (:func:`~asyncshard.walk.
iter_keys`, which holds a few batches of keys): no list of shard keys is built, so memory
does not grow with the number of shards. The report is ordered after the scan (damaged
shards by key), so the order the store lists in changes nothing in it. A listing that
names a shard again after ``repair`` rewrote it (a file system may list a file renamed
over again) does not inspect it twice: the keys of the damaged shards, which the report
holds anyway, are skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import Any

from asyncshard.backends.registry import StoreLocation, opened
from asyncshard.buffers import BytesLike
from asyncshard.convert.api import blocking
from asyncshard.errors import (
    AsyncShardError,
    ConflictError,
    FormatError,
    InvalidMetadataError,
    NoShardedDataError,
    UnsupportedOperationError,
)
from asyncshard.fanout import gather_settled
from asyncshard.formats.health import ShardHealth
from asyncshard.integrity.datasets import (
    Dataset,
    DecodeCheck,
    Restore,
    restore_source,
    sharded_datasets,
)
from asyncshard.integrity.report import DamagedShard, IntegrityReport
from asyncshard.sharding.common import replace_shard
from asyncshard.sharding.engine import ShardedAdapter
from asyncshard.store import ObjectMeta, Store
from asyncshard.walk import iter_keys

__all__ = ["repair", "repair_async", "verify", "verify_async"]

DEFAULT_IN_FLIGHT = 4
#: Called with each shard key once it is inspected (a progress bar).
OnShard = Callable[[str], None]


async def _shard_keys(adapter: ShardedAdapter[Any]) -> AsyncGenerator[str]:
    """The shard keys of ``adapter`` as its store lists them (in no particular order)."""
    fmt = adapter.format
    async for key in iter_keys(adapter.inner, fmt.list_source("")):
        if fmt.is_shard(key):
            yield key


def _damage(
    name: str, adapter: ShardedAdapter[Any], key: str, health: ShardHealth[Any]
) -> DamagedShard:
    fmt = adapter.format
    lost = {(fmt.chunk_key(key, c) or f"{key}#{c}"): why for c, why in health.lost.items()}
    return DamagedShard(name, key, list(health.faults), lost, len(health.intact))


async def _inspect(
    adapter: ShardedAdapter[Any], key: str, check: DecodeCheck | None
) -> tuple[ShardHealth[Any], ObjectMeta] | None:
    """The health of one shard and what it was when read (``None``: gone); ``check``
    decodes every intact chunk (``--decode``)."""
    got = await adapter.inner.get_object(key)
    if got is None:
        return None
    health = adapter.format.inspect(key, memoryview(got.data))
    if check is not None:
        for chunk, stored in list(health.intact.items()):
            try:
                await asyncio.to_thread(check, stored, key, chunk)
            except FormatError as exc:
                del health.intact[chunk]
                health.lost[chunk] = str(exc)
    return health, got.meta


async def _restore(
    dataset: Dataset,
    restore: Restore,
    check: DecodeCheck | None,
    key: str,
    health: ShardHealth[Any],
    damaged: DamagedShard,
) -> dict[Any, BytesLike]:
    """Stored bytes of the lost chunks that ``restore`` has and that pass the checks
    ``verify`` applies (and ``check``): those named lost, or every chunk not intact when
    a fault hides which were there. A copy that fails them, or that the source cannot
    read (its own shard damaged), is named in ``damaged.not_restored``."""
    fmt = dataset.adapter.format
    lost = list(health.lost)
    if health.faults:
        lost = [c for c in dataset.possible_chunks(key) if c not in health.intact]
    found: dict[Any, BytesLike] = {}
    for chunk in lost:
        name = fmt.chunk_key(key, chunk) or f"{key}#{chunk}"
        try:
            stored = await restore(key, chunk)
        except (AsyncShardError, OSError) as exc:  # the source's copy is damaged too
            damaged.not_restored[name] = f"SOURCE unreadable: {type(exc).__name__}: {exc}"
            continue
        if stored is None:
            continue
        fault = await asyncio.to_thread(dataset.chunk_fault, key, chunk, stored, check)
        if fault is not None:
            damaged.not_restored[name] = f"corrupt in SOURCE: {fault}"
            continue
        found[chunk] = stored
    return found


async def _fix(
    adapter: ShardedAdapter[Any],
    key: str,
    health: ShardHealth[Any],
    current: ObjectMeta,
    restored: Mapping[Any, BytesLike],
) -> tuple[str, bool]:
    """Replace the damaged shard by its intact and ``restored`` chunks, only over the
    version inspected; return what was done and whether the shard was replaced. A write
    that fails is reported, not raised: the run goes on, and its report still lists the
    shards rewritten."""
    fmt = adapter.format
    if current.version is None:
        return "left alone: the store gives no version to write over conditionally", False
    chunks = {**health.intact, **restored}
    new = fmt.build(key, chunks) if chunks else None
    try:
        kept, _ = await replace_shard(adapter.inner, key, new, current, fmt.empty_shard)
    except ConflictError:
        return "left alone: the shard changed since it was inspected; verify it again", False
    except (AsyncShardError, OSError) as exc:  # reported; the other shards go on
        return f"not rewritten: {type(exc).__name__}: {exc}; verify it again", False
    if new is not None:
        extra = f" and {len(restored)} restored from the source" if restored else ""
        return f"rewritten with {len(health.intact)} intact chunks{extra}", True
    return ("emptied: no chunk was intact" if kept else "deleted: no chunk was intact"), True


async def _scan(
    location: StoreLocation,
    datasets: Sequence[str] | None,
    *,
    decode: bool,
    fix: bool,
    dry_run: bool,
    max_in_flight: int,
    on_shard: OnShard | None,
    storage_options: dict[str, Any] | None,
    source: StoreLocation | None = None,
    source_storage_options: dict[str, Any] | None = None,
) -> IntegrityReport:
    started = time.perf_counter()
    report = IntegrityReport(decoded=decode)
    async with (
        opened(location, storage_options) as store,
        _maybe_opened(source, source_storage_options) as backup,
    ):
        if fix and not dry_run and not store.supports_conditional_writes:
            raise UnsupportedOperationError(
                f"{store!r} cannot write conditionally: a repair could overwrite a "
                "concurrent writer's shard, so it is refused (verify still works)"
            )
        found = await sharded_datasets(store, datasets)
        if not found:
            where = store.url or repr(store)
            raise NoShardedDataError(f"no sharded Zarr v3 array or precomputed scale at {where}")
        checks = [d.decode_check() if decode else None for d in found]  # before any read
        restores = [None if backup is None else await restore_source(backup, d) for d in found]
        if backup is not None:  # restored chunks are decoded too, where that is possible
            checks = [c or _restore_check(d) for c, d in zip(checks, found, strict=True)]

        async def one(
            dataset: Dataset,
            check: DecodeCheck | None,
            restore: Restore | None,
            key: str,
            seen: set[str],
        ) -> None:
            if key in seen:  # damaged, and listed again (after its rewrite)
                return
            adapter = dataset.adapter
            inspected = await _inspect(adapter, key, check if decode else None)
            if inspected is not None:
                health, meta = inspected
                report.shards += 1
                report.chunks += len(health.intact)
                if unverified := dataset.unverified(decode):
                    report.unverified[unverified] += len(health.intact)
                if health.damaged:
                    seen.add(key)
                    damaged = _damage(dataset.name, adapter, key, health)
                    if fix:
                        restored = {}
                        if restore is not None:
                            restored = await _restore(dataset, restore, check, key, health, damaged)
                        if dry_run:
                            damaged.action = "would be rewritten (dry run)"
                            wrote = True
                        else:
                            damaged.action, wrote = await _fix(adapter, key, health, meta, restored)
                        if wrote:  # restored only once they are in place (or would be)
                            damaged.restore(adapter.format, key, restored)
                        # nothing known lost remains, and a fault's chunks came from SOURCE
                        damaged.repaired = (
                            wrote
                            and not dry_run
                            and not damaged.lost
                            and not damaged.not_restored
                            and (not health.faults or restore is not None)
                        )
                    report.damaged.append(damaged)
            if on_shard is not None:
                on_shard(key)

        async def worker(
            dataset: Dataset,
            check: DecodeCheck | None,
            restore: Restore | None,
            keys: AsyncIterator[str],
            turn: asyncio.Lock,
            seen: set[str],
        ) -> None:
            while True:  # the workers share one listing: a shard each at a time
                async with turn:
                    key = await anext(keys, None)
                if key is None:
                    return
                await one(dataset, check, restore, key, seen)

        for dataset, check, restore in zip(found, checks, restores, strict=True):
            report.datasets.append(dataset.name)
            turn, seen = asyncio.Lock(), set[str]()
            async with aclosing(_shard_keys(dataset.adapter)) as keys:
                await gather_settled(
                    worker(dataset, check, restore, keys, turn, seen) for _ in range(max_in_flight)
                )
    report.damaged.sort(key=lambda d: d.key)
    report.seconds = time.perf_counter() - started
    return report


def _restore_check(dataset: Dataset) -> DecodeCheck | None:
    """The decode check of restored chunks without ``--decode``: where the codecs allow."""
    try:
        return dataset.decode_check()
    except InvalidMetadataError:
        return None


@asynccontextmanager
async def _maybe_opened(
    location: StoreLocation | None, storage_options: dict[str, Any] | None
) -> AsyncIterator[Store | None]:
    if location is None:
        yield None
        return
    async with opened(location, storage_options) as store:
        yield store


async def verify_async(
    location: StoreLocation,
    datasets: Sequence[str] | None = None,
    *,
    decode: bool = False,
    max_in_flight: int = DEFAULT_IN_FLIGHT,
    on_shard: OnShard | None = None,
    storage_options: dict[str, Any] | None = None,
) -> IntegrityReport:
    """Inspect every shard of the sharded datasets at ``location`` (see the package).

    Changes nothing; ``report.ok`` says whether everything is intact.

    Args:
        location: The store (a Store, a URL or a path).
        datasets: Zarr array paths or precomputed scale keys (default: all).
        decode: Also decode every chunk through its codecs (slower; finds damage no
            checksum covers).
        max_in_flight: Whole shards in memory at once.
        on_shard: Called with each shard key once it is inspected (a progress bar).
        storage_options: Options to open ``location`` with (a URL only).
    """
    return await _scan(
        location,
        datasets,
        decode=decode,
        fix=False,
        dry_run=False,
        max_in_flight=max_in_flight,
        on_shard=on_shard,
        storage_options=storage_options,
    )


async def repair_async(
    location: StoreLocation,
    datasets: Sequence[str] | None = None,
    *,
    decode: bool = False,
    dry_run: bool = False,
    max_in_flight: int = DEFAULT_IN_FLIGHT,
    on_shard: OnShard | None = None,
    storage_options: dict[str, Any] | None = None,
    source: StoreLocation | None = None,
    source_storage_options: dict[str, Any] | None = None,
) -> IntegrityReport:
    """:func:`verify_async`, then rewrite each damaged shard from its intact chunks
    (deleted when none is), conditionally on the version inspected; a shard that changed
    meanwhile is left alone. ``source`` (opened with ``source_storage_options``) holds
    the same datasets in any layout: lost chunks it has are put back (see
    :mod:`~asyncshard.integrity.datasets`). The report lists every chunk restored and
    every chunk lost (which then reads as the fill value) and what was done.

    Args:
        location: The store (a Store, a URL or a path).
        datasets: Zarr array paths or precomputed scale keys (default: all).
        decode: Also decode every chunk through its codecs; a chunk that fails is lost.
        dry_run: Report what would be rewritten; change nothing.
        max_in_flight: Whole shards in memory at once.
        on_shard: Called with each shard key once it is inspected (a progress bar).
        storage_options: Options to open ``location`` with (a URL only).
        source: A store with the same datasets in any layout, to put lost chunks back
            from (``None``: lost chunks stay lost).
        source_storage_options: Options to open ``source`` with (a URL only).
    """
    return await _scan(
        location,
        datasets,
        decode=decode,
        fix=True,
        dry_run=dry_run,
        max_in_flight=max_in_flight,
        on_shard=on_shard,
        storage_options=storage_options,
        source=source,
        source_storage_options=source_storage_options,
    )


verify = blocking(verify_async)
repair = blocking(repair_async)
