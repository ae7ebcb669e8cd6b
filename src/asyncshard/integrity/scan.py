"""``verify`` and ``repair``: every shard of every sharded dataset of a store, inspected.

Datasets are found as conversions find them: the sharded scales of the precomputed
volume when the store holds an ``info`` file, else the sharded Zarr v3 arrays (all of
them, or the ``datasets`` paths). Each dataset is opened as its sharded store, whose
format lists its shards (``is_shard``), inspects them (``inspect``) and builds the
repaired ones (``build``): the checks and the shard layout are the formats', never a
second copy. ``max_in_flight`` workers inspect a shard each at a time, so memory is
bounded by that many whole shards, and nothing is left running when a scan ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from asyncshard.backends.registry import StoreLocation, opened
from asyncshard.convert.api import blocking
from asyncshard.convert.zarr_array import find_arrays
from asyncshard.errors import (
    ConflictError,
    FormatError,
    InvalidMetadataError,
    NoShardedDataError,
    UnsupportedOperationError,
)
from asyncshard.fanout import gather_settled
from asyncshard.formats.health import ShardHealth
from asyncshard.formats.zarr3.metadata import is_sharded
from asyncshard.integrity.report import DamagedShard, IntegrityReport
from asyncshard.sharding.common import read_json, replace_shard
from asyncshard.sharding.engine import ShardedAdapter
from asyncshard.sharding.volume import PrecomputedVolume
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import ObjectMeta, Store

__all__ = ["repair", "repair_async", "verify", "verify_async"]

DEFAULT_IN_FLIGHT = 4
#: Called with each shard key once it is inspected (a progress bar).
OnShard = Callable[[str], None]


async def sharded_datasets(
    store: Store, datasets: Sequence[str] | None = None
) -> list[tuple[str, ShardedAdapter[Any]]]:
    """``(name, sharded store)`` of every sharded dataset of ``store`` (see the module)."""
    try:
        info = await read_json(store, "info")
    except InvalidMetadataError:
        info = None
    if isinstance(info, dict) and "scales" in info:
        volume = PrecomputedVolume(store, info)
        keys = volume.sharded_scale_keys if datasets is None else list(datasets)
        unknown = [k for k in keys if k not in volume.sharded_scale_keys]
        if unknown:
            raise InvalidMetadataError(
                f"info: no sharded scale {unknown[0]!r} (sharded: {volume.sharded_scale_keys})"
            )
        return [(key, volume.scale(key).store) for key in keys]
    found: list[tuple[str, ShardedAdapter[Any]]] = []
    for path in await find_arrays(store) if datasets is None else datasets:
        path = path.strip("/")
        doc = await read_json(store, f"{path}/zarr.json" if path else "zarr.json")
        if doc is not None and is_sharded(doc):
            found.append((path or "/", await ZarrShardedStore.open(store, path)))
        elif datasets is not None:
            raise InvalidMetadataError(f"{path or '/'}: not a sharded Zarr v3 array")
    return found


async def _shard_keys(adapter: ShardedAdapter[Any]) -> list[str]:
    fmt = adapter.format
    return sorted(
        [k async for k in adapter.inner.list_prefix(fmt.list_source("")) if fmt.is_shard(k)]
    )


def _damage(
    name: str, adapter: ShardedAdapter[Any], key: str, health: ShardHealth[Any]
) -> DamagedShard:
    fmt = adapter.format
    lost = {(fmt.chunk_key(key, c) or f"{key}#{c}"): why for c, why in health.lost.items()}
    return DamagedShard(name, key, list(health.faults), lost, len(health.intact))


async def _inspect(
    adapter: ShardedAdapter[Any], key: str, decode: bool
) -> tuple[ShardHealth[Any], ObjectMeta] | None:
    """The health of one shard and what it was when read (``None``: gone)."""
    got = await adapter.inner.get_object(key)
    if got is None:
        return None
    fmt = adapter.format
    health = fmt.inspect(key, memoryview(got.data))
    if decode and fmt.encoded:
        for chunk, stored in list(health.intact.items()):
            try:
                await asyncio.to_thread(fmt.decode, stored, key, chunk)
            except FormatError as exc:
                del health.intact[chunk]
                health.lost[chunk] = str(exc)
    return health, got.meta


async def _fix(
    adapter: ShardedAdapter[Any], key: str, health: ShardHealth[Any], current: ObjectMeta
) -> str:
    """Replace the damaged shard by its intact chunks, only over the version inspected."""
    fmt = adapter.format
    if current.version is None:
        return "left alone: the store gives no version to write over conditionally"
    new = fmt.build(key, health.intact) if health.intact else None
    try:
        kept, _ = await replace_shard(adapter.inner, key, new, current, fmt.empty_shard)
    except ConflictError:
        return "left alone: the shard changed since it was inspected; verify it again"
    if new is not None:
        return f"rewritten with {len(health.intact)} intact chunks"
    return "emptied: no chunk was intact" if kept else "deleted: no chunk was intact"


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
) -> IntegrityReport:
    started = time.perf_counter()
    report = IntegrityReport(decoded=decode)
    async with opened(location, storage_options) as store:
        if fix and not dry_run and not store.supports_conditional_writes:
            raise UnsupportedOperationError(
                f"{store!r} cannot write conditionally: a repair could overwrite a "
                "concurrent writer's shard, so it is refused (verify still works)"
            )
        found = await sharded_datasets(store, datasets)
        if not found:
            where = store.url or repr(store)
            raise NoShardedDataError(f"no sharded Zarr v3 array or precomputed scale at {where}")

        async def one(name: str, adapter: ShardedAdapter[Any], key: str) -> None:
            inspected = await _inspect(adapter, key, decode)
            if inspected is not None:
                health, meta = inspected
                report.shards += 1
                report.chunks += len(health.intact)
                if health.damaged:
                    damaged = _damage(name, adapter, key, health)
                    if fix:
                        damaged.action = (
                            "would be rewritten (dry run)"
                            if dry_run
                            else await _fix(adapter, key, health, meta)
                        )
                    report.damaged.append(damaged)
            if on_shard is not None:
                on_shard(key)

        async def worker(name: str, adapter: ShardedAdapter[Any], keys: Iterator[str]) -> None:
            for key in keys:  # the workers share one iterator: a shard each at a time
                await one(name, adapter, key)

        for name, adapter in found:
            report.datasets.append(name)
            keys = iter(await _shard_keys(adapter))
            await gather_settled(worker(name, adapter, keys) for _ in range(max_in_flight))
    report.damaged.sort(key=lambda d: d.key)
    report.seconds = time.perf_counter() - started
    return report


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

    ``datasets``: Zarr array paths or precomputed scale keys (default: all). Changes
    nothing; ``report.ok`` says whether everything is intact.
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
) -> IntegrityReport:
    """:func:`verify_async`, then rewrite each damaged shard from its intact chunks
    (deleted when none is), conditionally on the version inspected; a shard that changed
    meanwhile is left alone. The report lists every chunk lost (which then reads as the
    fill value) and what was done; ``dry_run`` changes nothing."""
    return await _scan(
        location,
        datasets,
        decode=decode,
        fix=True,
        dry_run=dry_run,
        max_in_flight=max_in_flight,
        on_shard=on_shard,
        storage_options=storage_options,
    )


verify = blocking(verify_async)
repair = blocking(repair_async)
