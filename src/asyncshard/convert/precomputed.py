"""Converting Neuroglancer precomputed scales between unsharded and sharded.

Unsharded chunk files (``x0-x1_y0-y1_z0-z1``) and shard files (``<hex>.shard``) never
share a name, so one pass suffices and keeps the scale readable throughout: shards are
written next to the chunk files, the ``info`` file is switched (the scale gains or loses
its ``sharding``), then the old files are deleted. The journal
(:mod:`asyncshard.convert.journal`, in the scale folder) makes interrupted runs resume.
Chunk bytes are moved verbatim (gzip applied or removed only if the sharding spec's
``data_encoding`` is ``gzip``). Shards are built with the pure
:func:`~asyncshard.formats.precomputed.shard.build_shard`, one task per shard.

Default sharding (:func:`default_sharding`), following the principles Neuroglancer's
and igneous' guidance gives (few shard files of bounded size, small indexes):

* ``hash = identity``: chunk ids are compressed Morton codes, so with the identity hash
  a shard is a block of ``2**k`` consecutive codes, a compact region of the volume;
* ``k``: the largest power of two such that ``2**k`` uncompressed chunks fit in
  ``target_shard_bytes`` (64 MiB), at most the number of Morton bits of the grid;
* ``minishard_bits = min(k // 2, 9)``: the shard index is at most 8 KiB;
* ``preshift_bits = k - minishard_bits``: ``2**preshift_bits`` consecutive chunks share
  a minishard, whose index is then ``24 * 2**preshift_bits`` bytes;
* ``shard_bits``: the remaining Morton bits, so every chunk id maps to a distinct
  (shard, minishard, position);
* ``minishard_index_encoding = gzip``, ``data_encoding = raw`` (bytes moved unchanged).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from asyncshard.convert.journal import Journal, normalize, read_journal, remove_journal
from asyncshard.convert.report import (
    ArrayReport,
    ConversionSummary,
    PassDone,
    PassStarted,
    ProgressCallback,
    TaskDone,
    TaskResult,
)
from asyncshard.convert.runner import Runner
from asyncshard.convert.session import (
    delete_keys,
    make_runner,
    opened,
    read_json,
    run_sync,
    write_json,
)
from asyncshard.errors import ConversionError, InvalidMetadataError
from asyncshard.formats.precomputed.shard import (
    build_shard,
    decode_chunk_data,
    decode_minishard_index,
    decode_shard_index,
    minishard_index_range,
    shard_index_nbytes,
)
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import Scale, VolumeInfo
from asyncshard.store import Store

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "PrecomputedPass",
    "PrecomputedTask",
    "default_sharding",
    "shard_precomputed",
    "shard_precomputed_async",
    "unshard_precomputed",
    "unshard_precomputed_async",
]

INFO = "info"
DEFAULT_SHARD_BYTES = 64 * 2**20
_MAX_MINISHARD_BITS = 9


def default_sharding(
    scale: Scale,
    info: VolumeInfo,
    *,
    target_shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> ShardingSpec:
    """A sharding spec for ``scale`` from its size (see the module docstring)."""
    grid_bits = sum(scale.morton_bits)
    chunk_bytes = math.prod(scale.chunk_size) * info.num_channels * info.dtype.itemsize
    per_shard = max(1, target_shard_bytes // max(1, chunk_bytes))
    k = min(per_shard.bit_length() - 1, grid_bits)
    minishard_bits = min(k // 2, _MAX_MINISHARD_BITS)
    return ShardingSpec(
        preshift_bits=k - minishard_bits,
        hash="identity",
        minishard_bits=minishard_bits,
        shard_bits=grid_bits - k,
        minishard_index_encoding="gzip",
        data_encoding="raw",
    )


@dataclass(frozen=True)
class PrecomputedTask:
    """``pack``: shard file ``target`` from chunk files ``sources``; ``unpack``: the chunk
    files of shard file ``sources[0]`` (``existing`` already written); ``index``: shard
    ``target`` exists from an interrupted run."""

    kind: Literal["pack", "unpack", "index"]
    target: str | None
    sources: tuple[str, ...]
    existing: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrecomputedPass:
    """One conversion of a scale: its folder prefix and its source and target JSON."""

    prefix: str
    source: dict[str, Any]
    target: dict[str, Any]

    def executor(self, store: Store) -> PrecomputedExecutor:
        """An executor of this pass's tasks on ``store``."""
        return PrecomputedExecutor(store, self)


class PrecomputedExecutor:
    """Runs :class:`PrecomputedTask` objects of one :class:`PrecomputedPass`."""

    def __init__(self, store: Store, spec: PrecomputedPass) -> None:
        self.store = store
        self.prefix = spec.prefix
        self.src = Scale.from_json(spec.source)
        self.dst = Scale.from_json(spec.target)

    async def execute(self, task: PrecomputedTask) -> TaskResult:
        """Do one task."""
        if task.kind == "pack":
            return await self._pack(task)
        if task.kind == "unpack":
            return await self._unpack(task)
        return TaskResult(len(task.sources), 0, 0, 0, resumed=True)

    async def _pack(self, task: PrecomputedTask) -> TaskResult:
        assert self.dst.sharding is not None and task.target is not None
        values = await self.store.get_partial_values(
            [(self.prefix + name, None) for name in task.sources]
        )
        chunks = {}
        for name, value in zip(task.sources, values, strict=True):
            pos = self.src.parse_chunk_name(name)
            if value is not None and pos is not None:
                chunks[self.dst.chunk_id(pos)] = value
        nread = sum(len(v) for v in chunks.values())
        values.clear()
        if not chunks:
            return TaskResult(0, 0, nread, 0)
        shard = build_shard(chunks, self.dst.sharding)
        count = len(chunks)
        chunks.clear()
        await self.store.set(self.prefix + task.target, shard)
        return TaskResult(count, 1, nread, len(shard))

    async def _unpack(self, task: PrecomputedTask) -> TaskResult:
        spec = self.src.sharding
        assert spec is not None
        (name,) = task.sources
        key = self.prefix + name
        buf = await self.store.get(key)
        if buf is None:
            return TaskResult(0, 0, 0, 0)
        view = memoryview(buf)
        size = len(view)
        index = decode_shard_index(view[: shard_index_nbytes(spec)], spec, key=key, shard_size=size)
        existing = set(task.existing)
        writes: list[tuple[str, bytes]] = []
        count = 0
        for minishard in range(spec.num_minishards):
            start, end = minishard_index_range(index, minishard)
            if start == end:
                continue
            entries = decode_minishard_index(view[start:end], spec, key=key, shard_size=size)
            for chunk_id, lo, hi in zip(
                entries.ids.tolist(), entries.starts.tolist(), entries.ends.tolist(), strict=True
            ):
                try:
                    chunk = self.dst.chunk_name(self.src.grid_pos_of(chunk_id))
                except ValueError:
                    continue  # an id outside the grid: no reader can ask for it
                count += 1
                if chunk not in existing:
                    writes.append((chunk, decode_chunk_data(view[lo:hi], spec, key=key)))
        await asyncio.gather(*(self.store.set(self.prefix + n, d) for n, d in writes))
        written = sum(len(d) for _, d in writes)
        return TaskResult(count, len(writes), size, written, resumed=bool(existing))


# --------------------------------------------------------------------------- planning


def _objects(scale: Scale, names: Sequence[str]) -> list[str]:
    """The names that are objects of ``scale``: shard files or chunk files."""
    if scale.sharding is not None:
        spec = scale.sharding
        return [n for n in names if spec.parse_shard_filename(n) is not None]
    return [n for n in names if scale.parse_chunk_name(n) is not None]


def _shards_of(scale: Scale, spec: ShardingSpec, names: Sequence[str]) -> list[int]:
    """Shard number (under ``spec``) of each unsharded chunk name of ``scale``."""
    if not names:
        return []
    positions = np.array([scale.parse_chunk_name(n) for n in names], dtype=np.int64)
    shards, _ = spec.shard_and_minishard(scale.chunk_ids(positions))
    return [int(s) for s in shards.tolist()]


def plan_scale(src: Scale, dst: Scale, names: Sequence[str], resume: bool) -> list[PrecomputedTask]:
    """Tasks converting the objects ``names`` (relative to the scale folder) of ``src``."""
    src_names = sorted(_objects(src, names))
    dst_names = set(_objects(dst, names)) if resume else set()
    if dst.sharding is not None:
        spec = dst.sharding
        groups: dict[int, list[str]] = {}
        for name, shard in zip(src_names, _shards_of(src, spec, src_names), strict=True):
            groups.setdefault(shard, []).append(name)
        tasks = []
        for shard, members in sorted(groups.items()):
            target = spec.shard_filename(shard)
            kind: Literal["pack", "index"] = "index" if target in dst_names else "pack"
            tasks.append(PrecomputedTask(kind, target, tuple(members)))
        return tasks
    assert src.sharding is not None
    by_shard: dict[int, list[str]] = {}
    done = sorted(dst_names)
    for name, shard in zip(done, _shards_of(dst, src.sharding, done), strict=True):
        by_shard.setdefault(shard, []).append(name)
    return [
        PrecomputedTask(
            "unpack",
            None,
            (name,),
            tuple(by_shard.get(src.sharding.parse_shard_filename(name) or 0, ())),
        )
        for name in src_names
    ]


# --------------------------------------------------------------------------- running


@dataclass
class _Volume:
    info: dict[str, Any]
    version: str | None
    index: int

    @property
    def scale_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.info["scales"][self.index]
        return doc


async def _read_volume(store: Store, key: str) -> _Volume:
    got = await read_json(store, INFO)
    if got is None:
        raise InvalidMetadataError("no readable info file: not a precomputed volume")
    info, version = got
    VolumeInfo.from_json(info)
    for i, scale in enumerate(info["scales"]):
        if scale.get("key") == key:
            return _Volume(info, version, i)
    raise InvalidMetadataError(f"info has no scale with key {key!r}")


async def _list_names(store: Store, prefix: str) -> list[str]:
    names = []
    async for key in store.list_prefix(prefix):
        rest = key[len(prefix) :]
        if "/" not in rest:
            names.append(rest)
    return names


def _target_of(scale_doc: Mapping[str, Any], sharding: ShardingSpec | None) -> dict[str, Any]:
    doc = dict(normalize(scale_doc))
    if sharding is None:
        doc.pop("sharding", None)
    else:
        doc["sharding"] = sharding.to_json()
        doc["chunk_sizes"] = doc["chunk_sizes"][:1]
    return doc


@dataclass
class _Options:
    runner: Runner
    progress: ProgressCallback | None
    sharding: ShardingSpec | Mapping[str, Any] | None
    target_shard_bytes: int


def _resolve(volume: _Volume, shard: bool, opts: _Options) -> tuple[dict[str, Any] | None, str]:
    """``(target scale JSON, "")`` or ``(None, why the scale is left alone)``."""
    scale = Scale.from_json(volume.scale_doc)
    if not shard:
        if scale.sharding is None:
            return None, "already unsharded"
        return _target_of(volume.scale_doc, None), ""
    if opts.sharding is None:
        info = VolumeInfo.from_json(volume.info)
        spec = default_sharding(scale, info, target_shard_bytes=opts.target_shard_bytes)
    elif isinstance(opts.sharding, ShardingSpec):
        spec = opts.sharding
    else:
        spec = ShardingSpec.from_json(opts.sharding)
    if scale.sharding is not None:
        if scale.sharding == spec or opts.sharding is None:
            return None, "already sharded"
        return None, "sharded with another spec: unshard it first"
    if len(scale.chunk_sizes) > 1:
        return None, "several chunk_sizes: a sharded scale has one"
    return _target_of(volume.scale_doc, spec), ""


async def _convert_scale(store: Store, key: str, shard: bool, opts: _Options) -> ArrayReport:
    report = ArrayReport(key, "skipped")
    prefix = key.strip("/") + "/"
    volume = await _read_volume(store, key)
    journal = await read_journal(store, prefix)
    if journal is not None and await _finish_switched(store, prefix, volume, journal, report):
        journal = None
    report.source = _describe(volume.scale_doc)
    target, reason = _resolve(volume, shard, opts)
    resume = journal is not None and target is not None and same(journal.target, target)
    if journal is not None and not resume:
        await _rollback(store, prefix, journal)
    if target is None:
        if report.resumed:  # an interrupted run finished here
            report.action, report.target = "converted", report.source
        else:
            report.reason = reason
        return report
    report.action, report.target = "converted", _describe(target)
    report.resumed = report.resumed or resume
    await _run_pass(store, prefix, volume, target, opts, report, resume=resume)
    return report


def _describe(scale_doc: Mapping[str, Any]) -> str:
    return "sharded" if scale_doc.get("sharding") else "unsharded"


def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two scale documents are equal once normalised through JSON."""
    equal: bool = normalize(a) == normalize(b)
    return equal


async def _finish_switched(
    store: Store, prefix: str, volume: _Volume, journal: Journal, report: ArrayReport
) -> bool:
    """If the interrupted conversion switched ``info``, delete its old files and return
    true; if not, return false (the journal stays); if neither side matches, raise."""
    current = volume.scale_doc
    if same(current, journal.target):
        stale = _objects(Scale.from_json(journal.source), await _list_names(store, prefix))
        await delete_keys(store, [prefix + n for n in stale])
        report.objects_deleted += len(stale)
        report.passes += 1
        await remove_journal(store, prefix)
        report.resumed = True
        return True
    if not same(current, journal.source):
        raise ConversionError(
            f"{INFO}: scale {current.get('key')!r} matches neither side of the interrupted "
            f"conversion in {prefix}asyncshard-conversion.json; inspect it and remove the journal"
        )
    return False


async def _rollback(store: Store, prefix: str, journal: Journal) -> None:
    """Delete what an unswitched conversion to another target wrote, and its journal."""
    stale = _objects(Scale.from_json(journal.target), await _list_names(store, prefix))
    await delete_keys(store, [prefix + n for n in stale])
    await remove_journal(store, prefix)


async def _run_pass(
    store: Store,
    prefix: str,
    volume: _Volume,
    target: dict[str, Any],
    opts: _Options,
    report: ArrayReport,
    *,
    resume: bool,
) -> None:
    source = normalize(volume.scale_doc)
    src, dst = Scale.from_json(source), Scale.from_json(target)
    names = await _list_names(store, prefix)
    if not resume and (found := _objects(dst, names)):
        raise ConversionError(
            f"{prefix}: {len(found)} objects already use the target names (e.g. {found[0]}) "
            "and no conversion journal accounts for them; remove them and run again"
        )
    if not resume:
        await Journal(source, target, target).write(store, prefix)
    tasks = plan_scale(src, dst, names, resume)
    src_keys = [prefix + n for n in _objects(src, names)]
    key = str(source.get("key"))
    if opts.progress:
        opts.progress(PassStarted(key, 1, 1, len(tasks), f"{report.source} -> {report.target}"))

    def on_result(result: TaskResult) -> None:
        report.chunks += result.nchunks
        report.add(result)
        if opts.progress:
            opts.progress(TaskDone(key, result))

    await opts.runner.run(store, PrecomputedPass(prefix, source, target), tasks, on_result)
    volume.info["scales"][volume.index] = target
    volume.version = await write_json(store, INFO, volume.info, volume.version)
    await delete_keys(store, src_keys)
    report.objects_deleted += len(src_keys)
    report.passes += 1
    await remove_journal(store, prefix)
    if opts.progress:
        opts.progress(PassDone(key, 1))


async def _convert_volume(
    url_or_store: str | Store,
    shard: bool,
    scales: Sequence[str] | None,
    *,
    sharding: ShardingSpec | Mapping[str, Any] | None,
    target_shard_bytes: int,
    max_in_flight: int | None,
    client: Any,
    runner: Runner | None,
    storage_options: Mapping[str, Any] | None,
    progress: ProgressCallback | None,
) -> ConversionSummary:
    started = time.perf_counter()
    chosen = make_runner(
        url_or_store,
        runner=runner,
        client=client,
        storage_options=storage_options,
        max_in_flight=max_in_flight,
    )
    opts = _Options(chosen, progress, sharding, target_shard_bytes)
    summary = ConversionSummary()
    async with opened(url_or_store, storage_options) as store:
        if scales is None:
            got = await read_json(store, INFO)
            if got is None:
                raise InvalidMetadataError("no readable info file: not a precomputed volume")
            scales = [s.key for s in VolumeInfo.from_json(got[0]).scales]
        for key in scales:
            summary.arrays.append(await _convert_scale(store, key, shard, opts))
    summary.seconds = time.perf_counter() - started
    return summary


async def shard_precomputed_async(
    url_or_store: str | Store,
    sharding: ShardingSpec | Mapping[str, Any] | None = None,
    scales: Sequence[str] | None = None,
    *,
    target_shard_bytes: int = DEFAULT_SHARD_BYTES,
    max_in_flight: int | None = None,
    client: Any = None,
    runner: Runner | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: ProgressCallback | None = None,
) -> ConversionSummary:
    """Shard the unsharded scales of a precomputed volume (or the scales keyed ``scales``).

    ``sharding``: a :class:`ShardingSpec` or its JSON; ``None`` chooses one per scale
    with :func:`default_sharding`. Scales already sharded with that spec are skipped.
    Runner options as for :func:`asyncshard.convert.shard_store_async`.
    """
    return await _convert_volume(
        url_or_store,
        True,
        scales,
        sharding=sharding,
        target_shard_bytes=target_shard_bytes,
        max_in_flight=max_in_flight,
        client=client,
        runner=runner,
        storage_options=storage_options,
        progress=progress,
    )


async def unshard_precomputed_async(
    url_or_store: str | Store,
    scales: Sequence[str] | None = None,
    *,
    max_in_flight: int | None = None,
    client: Any = None,
    runner: Runner | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: ProgressCallback | None = None,
) -> ConversionSummary:
    """Turn the sharded scales of a precomputed volume back into one file per chunk."""
    return await _convert_volume(
        url_or_store,
        False,
        scales,
        sharding=None,
        target_shard_bytes=DEFAULT_SHARD_BYTES,
        max_in_flight=max_in_flight,
        client=client,
        runner=runner,
        storage_options=storage_options,
        progress=progress,
    )


def shard_precomputed(
    url_or_store: str | Store,
    sharding: ShardingSpec | Mapping[str, Any] | None = None,
    scales: Sequence[str] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Synchronous :func:`shard_precomputed_async`."""
    return run_sync(shard_precomputed_async(url_or_store, sharding, scales, **options))


def unshard_precomputed(
    url_or_store: str | Store, scales: Sequence[str] | None = None, **options: Any
) -> ConversionSummary:
    """Synchronous :func:`unshard_precomputed_async`."""
    return run_sync(unshard_precomputed_async(url_or_store, scales, **options))
