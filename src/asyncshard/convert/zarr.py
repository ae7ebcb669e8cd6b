"""Converting Zarr v3 arrays between flat and sharded layouts, in place, safely.

Why the keys change
-------------------
A flat chunk and a shard at the same grid coordinates have the same key under the
array's chunk key encoding (``c/0/0``), and every shard key is also the key of a flat
chunk (the shard grid is a corner of the chunk grid). An in-place conversion that keeps
the encoding must therefore overwrite live objects of the old layout:

* while ``zarr.json`` still describes the old layout, overwriting flat chunk ``c/i/j``
  with shard ``(i, j)`` makes the old layout return garbage for chunk ``(i, j)``;
* switching ``zarr.json`` before every shard is written makes the new layout read the
  missing shards as fill values (silently wrong data).

No ordering of the writes avoids both: the first shard written over a live chunk breaks
whichever layout ``zarr.json`` names at that moment. Keeping the array readable at every
instant requires the new objects to have keys that no live object has. So a conversion
writes the new layout under a *disjoint* chunk key encoding, the array's encoding with
the other separator (``c/0/0`` becomes ``c.0.0``; see
:meth:`~asyncshard.convert.layout.Encoding.partner` for 0-d and 1-d ``v2`` arrays).
Zarr readers (zarr-python, tensorstore) follow ``chunk_key_encoding`` in ``zarr.json``,
so the change is invisible to them, and it costs nothing: one read and one write of
every byte.

* ``flat <-> sharded`` is one pass and flips the separator; sharding then unsharding
  gives back the original keys and bytes exactly.
* ``sharded -> sharded`` (another shard shape or index) keeps the separator by default,
  which takes two passes: the new shards under the other separator, then a verbatim
  copy back (two reads and writes of every byte). Pass ``separator=`` to choose the
  separator yourself; one that differs from the current one needs a single pass.

A pass
------
1. Write the journal (:mod:`asyncshard.convert.journal`) naming source and target.
2. List the array folder; plan one task per target object (or per source shard when
   unsharding): one writer per object, so tasks run in any order, anywhere.
3. Run the tasks (at most ``max_in_flight`` shards in memory, or on Dask).
4. Switch: write ``zarr.json`` with the new layout and the ``nonempty_chunks`` manifest
   (conditional on the version read at the start). Update the copy of the array's
   metadata in any ancestor group's ``consolidated_metadata``.
5. Delete the old objects, then the journal.

An interruption before step 4 leaves the old layout complete (new objects only exist
under keys the old layout never reads); after step 4 the new layout is complete. A new
run reads the journal and resumes: before the switch it keeps the target objects already
written (writes are atomic) and writes the rest, or deletes them if the request changed;
after it, it deletes what is left of the old layout. Arrays already in the requested
layout are skipped. Conversions assume no one writes to the array meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from asyncshard.convert.journal import Journal, normalize, read_journal, remove_journal
from asyncshard.convert.layout import (
    ArrayLayout,
    IndexLocation,
    Separator,
    layout_doc,
    read_layout,
    same_layout,
)
from asyncshard.convert.manifest import (
    manifest_form,
    manifest_keys,
    stored_chunks,
    switched_manifest,
    with_manifest,
)
from asyncshard.convert.plan import (
    Request,
    normalize_shard_shape,
    plan_pass,
    plan_passes,
    resolve_target,
)
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
from asyncshard.convert.tasks import ZarrPass
from asyncshard.convert.vectors import Role, VectorRoles
from asyncshard.errors import ConversionError, InvalidMetadataError
from asyncshard.formats.zarr3.metadata import Coords
from asyncshard.store import Store

__all__ = [
    "convert_store",
    "find_arrays",
    "rebuild_manifest",
    "rebuild_manifest_async",
    "reshard",
    "reshard_async",
    "shard_store",
    "shard_store_async",
    "unshard_store",
    "unshard_store_async",
]

META = "zarr.json"


def _prefix(path: str) -> str:
    return f"{path}/" if path else ""


def _normalize_path(path: str) -> str:
    return path.strip("/")


async def find_arrays(store: Store) -> list[str]:
    """Paths of the Zarr v3 arrays in ``store`` (``""`` for an array at the root).

    Walks the folders with ``list_dir``, reading each ``zarr.json``; does not descend
    into arrays, so chunk folders are never listed.
    """
    found: list[str] = []

    async def walk(prefix: str) -> None:
        keys, prefixes = await store.list_dir(prefix)
        if prefix + META in keys:
            got = await read_json(store, prefix + META)
            if got is not None and isinstance(got[0], dict) and got[0].get("node_type") == "array":
                found.append(prefix.rstrip("/"))
                return
        for child in prefixes:
            await walk(child)

    await walk("")
    return sorted(found)


@dataclass
class _Array:
    """The metadata of the array being converted, as last read or written."""

    path: str
    doc: dict[str, Any]
    version: str | None

    @property
    def prefix(self) -> str:
        return _prefix(self.path)

    def layout(self, doc: Mapping[str, Any] | None = None) -> ArrayLayout:
        return read_layout(self.doc if doc is None else doc, self.prefix)


@dataclass(frozen=True)
class _Options:
    request: Request
    runner: Runner
    manifest: bool
    rebuild_manifest: bool
    progress: ProgressCallback | None

    def emit(self, event: PassStarted | TaskDone | PassDone) -> None:
        if self.progress is not None:
            self.progress(event)


async def _scan(
    store: Store, prefix: str, src: ArrayLayout, dst: ArrayLayout | None = None
) -> tuple[list[str], list[Coords], list[tuple[str, Coords]]]:
    """Keys and coords of the source objects, and ``(key, coords)`` of target objects."""
    src_keys: list[str] = []
    src_objects: list[Coords] = []
    dst_objects: list[tuple[str, Coords]] = []
    async for key in store.list_prefix(prefix):
        coords = src.parse_object_key(key)
        if coords is not None:
            src_keys.append(key)
            src_objects.append(coords)
        elif dst is not None and (coords := dst.parse_object_key(key)) is not None:
            dst_objects.append((key, coords))
    return src_keys, src_objects, dst_objects


async def _sync_consolidated(store: Store, path: str, doc: Mapping[str, Any]) -> None:
    """Replace the array's entry in ancestor groups' ``consolidated_metadata``."""
    parts = path.split("/") if path else []
    for depth in range(len(parts) - 1, -1, -1):
        group = "/".join(parts[:depth])
        key = _prefix(group) + META
        got = await read_json(store, key)
        if got is None or not isinstance(got[0], dict):
            continue
        group_doc, version = got
        consolidated = group_doc.get("consolidated_metadata")
        if not isinstance(consolidated, dict) or not isinstance(consolidated.get("metadata"), dict):
            continue
        rel = "/".join(parts[depth:])
        if rel in consolidated["metadata"]:
            consolidated["metadata"][rel] = normalize(doc)
            await write_json(store, key, group_doc, version)


async def _switch(
    store: Store, array: _Array, target: Mapping[str, Any], keys: list[str] | None
) -> None:
    """Make ``target`` the array's metadata (keeping its attributes, setting the manifest
    to ``keys`` unless ``None``)."""
    doc = dict(normalize(target))
    doc["attributes"] = array.doc.get("attributes", {})
    doc = with_manifest(doc, keys)
    array.version = await write_json(store, array.prefix + META, doc, array.version)
    array.doc = doc
    await _sync_consolidated(store, array.path, doc)


async def _run_pass(
    store: Store,
    array: _Array,
    source: dict[str, Any],
    target: dict[str, Any],
    final: dict[str, Any],
    opts: _Options,
    report: ArrayReport,
    *,
    number: int,
    passes: int,
    resume: bool,
) -> None:
    prefix = array.prefix
    # layouts only: attributes (a manifest can be big) stay out of the journal and tasks
    source, target, final = layout_doc(source), layout_doc(target), layout_doc(final)
    src, dst = array.layout(source), array.layout(target)
    src_keys, src_objects, dst_found = await _scan(store, prefix, src, dst)
    if dst_found and not resume:
        raise ConversionError(
            f"{array.path or '/'}: {len(dst_found)} objects already use the target keys "
            f"(e.g. {dst_found[0][0]}) and no conversion journal accounts for them; "
            "remove them and run again"
        )
    if not resume:
        await Journal(normalize(source), normalize(target), normalize(final)).write(store, prefix)
    tasks, ignored = plan_pass(src, dst, src_objects, [c for _, c in dst_found])
    report.objects_ignored += ignored
    opts.emit(
        PassStarted(array.path, number, passes, len(tasks), f"{src.describe()} -> {dst.describe()}")
    )
    chunks: list[Coords] = []

    def on_result(result: TaskResult) -> None:
        chunks.extend(result.chunks)
        report.add(result)
        opts.emit(TaskDone(array.path, result))

    await opts.runner.run(store, ZarrPass(prefix, source, target), tasks, on_result)
    keys, note = switched_manifest(
        array.doc, array.layout(), dst, chunks, add=opts.manifest, name=array.path
    )
    if note is not None and note not in report.notes:  # once for both passes of a reshard
        report.notes.append(note)
    await _switch(store, array, target, keys)
    await delete_keys(store, src_keys)
    report.objects_deleted += len(src_keys)
    report.chunks = len(chunks)
    report.passes += 1
    if number == passes:
        await remove_journal(store, prefix)
    opts.emit(PassDone(array.path, number))


def _agrees(final: Mapping[str, Any], request: Request) -> bool:
    """Whether a journaled final layout is what ``request`` asks for."""
    if resolve_target(final, request) is not None:
        return False
    return request.separator is None or read_layout(final).encoding.separator == request.separator


async def _settle(
    store: Store, array: _Array, journal: Journal, request: Request, report: ArrayReport
) -> tuple[dict[str, Any] | None, bool]:
    """Deal with an interrupted conversion; return ``(final doc or None, resume pass)``.

    After the switch: delete the old objects left. Before it: resume the pass if the
    request is the same, else delete the new objects written so far.
    """
    prefix = array.prefix
    agrees = _agrees(journal.final, request)
    if same_layout(array.doc, journal.target):
        await _sync_consolidated(store, array.path, array.doc)
        src_keys, _, _ = await _scan(store, prefix, array.layout(journal.source))
        await delete_keys(store, src_keys)
        report.objects_deleted += len(src_keys)
        report.resumed = True
        report.passes += 1
        if agrees and not same_layout(array.doc, journal.final):
            return journal.final, False
        await remove_journal(store, prefix)
        return (None if agrees else resolve_target(array.doc, request)), False
    if not same_layout(array.doc, journal.source):
        raise ConversionError(
            f"{prefix}{META} matches neither side of the interrupted conversion recorded in "
            f"{prefix}asyncshard-conversion.json; inspect the array and remove the journal"
        )
    if agrees:
        first_target = plan_passes(array.doc, journal.final)[0][1]
        if same_layout(normalize(first_target), journal.target):
            report.resumed = True
            return journal.final, True
    stale, _, _ = await _scan(store, prefix, array.layout(journal.target))
    await delete_keys(store, stale)
    await remove_journal(store, prefix)
    return resolve_target(array.doc, request), False


async def _rebuild(store: Store, array: _Array) -> int:
    """Rebuild the manifest from the stored chunks, in its current form (``ValueError``
    for a manifest in an unknown form, left as it is)."""
    layout = array.layout()
    form = manifest_form(array.doc, layout) or "zarr-vectors"
    keys = manifest_keys(form, array.doc, layout, await stored_chunks(store, layout))
    doc = with_manifest(array.doc, keys)
    array.version = await write_json(store, array.prefix + META, doc, array.version)
    array.doc = doc
    await _sync_consolidated(store, array.path, doc)
    return len(keys)


_OBJECT_LEVEL = "zarr-vectors object-level array: kept flat as zarr-vectors does"


def _for_vectors(opts: _Options, role: Role | None, walked: bool) -> _Options | str:
    """The options for an array of a zarr-vectors level (see :mod:`.vectors`), or why it
    is skipped: flat arrays get ``c/i/j/k`` keys; object-level arrays found by the walk
    are not sharded, and no manifest is added to or rebuilt on them."""
    if role is None:
        return opts
    request = opts.request
    if request.shard_shape is None:
        if request.separator == ".":
            return "zarr-vectors finds flat chunks under c/ only; separator '.' refused"
        request = replace(request, separator="/")
    elif role == "object" and walked:
        return _OBJECT_LEVEL
    if role == "object":
        return replace(opts, request=request, manifest=False, rebuild_manifest=False)
    return replace(opts, request=request)


async def _convert_array(
    store: Store, path: str, opts: _Options, role: Role | None = None, walked: bool = True
) -> ArrayReport:
    report = ArrayReport(path, "skipped")
    chosen = _for_vectors(opts, role, walked)
    if isinstance(chosen, str):
        report.reason = chosen
        return report
    opts = chosen
    got = await read_json(store, _prefix(path) + META)
    if got is None or not isinstance(got[0], dict):
        report.reason = f"no readable {_prefix(path)}{META}"
        return report
    array = _Array(path, got[0], got[1])
    if array.doc.get("node_type") != "array" or array.doc.get("zarr_format") != 3:
        report.reason = "not a Zarr v3 array"
        return report
    try:
        before = array.layout()
        normalize_shard_shape(opts.request.shard_shape, before.ndim)
    except (InvalidMetadataError, ValueError) as exc:
        report.reason = str(exc)
        return report
    journal = await read_journal(store, array.prefix)
    if journal is not None:
        final, resume = await _settle(store, array, journal, opts.request, report)
    else:
        final, resume = resolve_target(array.doc, opts.request), False
    report.source = before.describe()
    if final is None:
        if report.resumed:  # an interrupted run finished here
            report.action = "converted"
            report.target = array.layout().describe()
            return report
        report.reason = f"already {before.describe()}"
        if opts.rebuild_manifest:
            try:
                report.reason += f"; manifest rebuilt ({await _rebuild(store, array)} chunks)"
            except ValueError as exc:
                report.reason += f"; manifest not rebuilt: {exc}"
        return report
    report.action = "converted"
    report.target = array.layout(final).describe()
    passes = plan_passes(array.doc, final)
    for number, (source, target) in enumerate(passes, start=1):
        await _run_pass(
            store,
            array,
            source,
            target,
            final,
            opts,
            report,
            number=number,
            passes=len(passes),
            resume=resume and number == 1,
        )
    return report


async def convert_store(
    url_or_store: str | Store,
    request: Request,
    arrays: Sequence[str] | None = None,
    *,
    max_in_flight: int | None = None,
    client: Any = None,
    runner: Runner | None = None,
    storage_options: Mapping[str, Any] | None = None,
    manifest: bool = True,
    rebuild_manifest: bool = False,
    progress: ProgressCallback | None = None,
) -> ConversionSummary:
    """Convert every array of a store (or the ``arrays`` paths) as ``request`` says.

    See :func:`shard_store_async` for the options.
    """
    started = time.perf_counter()
    chosen = make_runner(
        url_or_store,
        runner=runner,
        client=client,
        storage_options=storage_options,
        max_in_flight=max_in_flight,
    )
    opts = _Options(request, chosen, manifest, rebuild_manifest, progress)
    summary = ConversionSummary()
    async with opened(url_or_store, storage_options) as store:
        paths = await find_arrays(store) if arrays is None else [_normalize_path(a) for a in arrays]
        roles = VectorRoles(store)
        for path in paths:
            role = await roles.role(path)
            summary.arrays.append(
                await _convert_array(store, path, opts, role, walked=arrays is None)
            )
    summary.seconds = time.perf_counter() - started
    return summary


async def shard_store_async(
    url_or_store: str | Store,
    shard_shape: int | Sequence[int],
    arrays: Sequence[str] | None = None,
    *,
    separator: Separator | None = None,
    index_location: IndexLocation | None = None,
    checksum: bool | None = None,
    max_in_flight: int | None = None,
    client: Any = None,
    runner: Runner | None = None,
    storage_options: Mapping[str, Any] | None = None,
    manifest: bool = True,
    rebuild_manifest: bool = False,
    progress: ProgressCallback | None = None,
) -> ConversionSummary:
    """Shard every Zarr v3 array of a store (or those at the paths ``arrays``).

    ``shard_shape`` is in inner chunks (chunks per shard), an int for every axis. Flat
    arrays become sharded with their codecs as inner codecs (bytes moved, not
    re-encoded); sharded arrays with another shard shape are resharded; arrays already
    in that layout are skipped.

    Options: ``separator`` forces the key separator of the result (see the module
    docstring); ``index_location``/``checksum`` the shard index (default ``end`` with
    crc32c, or the current ones); ``max_in_flight`` shards in memory at once (default
    8); ``client`` a ``dask.distributed.Client`` to run the tasks on (the store must
    then be a URL, opened by workers with ``storage_options``), or a custom ``runner``;
    ``manifest`` writes the ``nonempty_chunks`` attribute on converted arrays (when
    false it is still kept correct where it exists); ``rebuild_manifest`` rebuilds it
    from the data on skipped arrays; ``progress`` receives
    :class:`~asyncshard.convert.report.ProgressEvent` objects.
    """
    if shard_shape is None:
        raise ValueError("shard_shape is required; use unshard_store to go back to flat")
    shape = shard_shape if isinstance(shard_shape, int) else tuple(shard_shape)
    request = Request(shape, separator, index_location, checksum)
    return await convert_store(
        url_or_store,
        request,
        arrays,
        max_in_flight=max_in_flight,
        client=client,
        runner=runner,
        storage_options=storage_options,
        manifest=manifest,
        rebuild_manifest=rebuild_manifest,
        progress=progress,
    )


async def unshard_store_async(
    url_or_store: str | Store,
    arrays: Sequence[str] | None = None,
    *,
    separator: Separator | None = None,
    max_in_flight: int | None = None,
    client: Any = None,
    runner: Runner | None = None,
    storage_options: Mapping[str, Any] | None = None,
    manifest: bool = True,
    rebuild_manifest: bool = False,
    progress: ProgressCallback | None = None,
) -> ConversionSummary:
    """Turn every sharded array into one object per chunk; flat arrays are skipped.

    Options as for :func:`shard_store_async`.
    """
    return await convert_store(
        url_or_store,
        Request(None, separator),
        arrays,
        max_in_flight=max_in_flight,
        client=client,
        runner=runner,
        storage_options=storage_options,
        manifest=manifest,
        rebuild_manifest=rebuild_manifest,
        progress=progress,
    )


async def reshard_async(
    url_or_store: str | Store,
    shard_shape: int | Sequence[int] | None,
    arrays: Sequence[str] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Change the shard shape in place; ``None`` is :func:`unshard_store_async`."""
    if shard_shape is None:
        options.pop("index_location", None)
        options.pop("checksum", None)
        return await unshard_store_async(url_or_store, arrays, **options)
    return await shard_store_async(url_or_store, shard_shape, arrays, **options)


def shard_store(
    url_or_store: str | Store,
    shard_shape: int | Sequence[int],
    arrays: Sequence[str] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Synchronous :func:`shard_store_async` (spec 002: ``shard_store("scan.zv", 8)``)."""
    return run_sync(shard_store_async(url_or_store, shard_shape, arrays, **options))


def unshard_store(
    url_or_store: str | Store, arrays: Sequence[str] | None = None, **options: Any
) -> ConversionSummary:
    """Synchronous :func:`unshard_store_async`."""
    return run_sync(unshard_store_async(url_or_store, arrays, **options))


def reshard(
    url_or_store: str | Store,
    shard_shape: int | Sequence[int] | None,
    arrays: Sequence[str] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Synchronous :func:`reshard_async`; ``reshard(url, None)`` unshards."""
    return run_sync(reshard_async(url_or_store, shard_shape, arrays, **options))


async def rebuild_manifest_async(
    url_or_store: str | Store,
    arrays: Sequence[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> ConversionSummary:
    """Rebuild the ``nonempty_chunks`` manifest of every array from its stored data
    (found by the walk: not on zarr-vectors' object-level arrays, which have none)."""
    started = time.perf_counter()
    summary = ConversionSummary()
    async with opened(url_or_store, storage_options) as store:
        paths = await find_arrays(store) if arrays is None else [_normalize_path(a) for a in arrays]
        roles = VectorRoles(store)
        for path in paths:
            report = ArrayReport(path, "skipped")
            summary.arrays.append(report)
            if arrays is None and await roles.role(path) == "object":
                report.reason = _OBJECT_LEVEL
                continue
            got = await read_json(store, _prefix(path) + META)
            if got is None or not isinstance(got[0], dict):
                report.reason = f"no readable {_prefix(path)}{META}"
            elif await read_journal(store, _prefix(path)) is not None:
                report.reason = "a conversion is in flight; finish it first"
            else:
                array = _Array(path, got[0], got[1])
                try:
                    report.source = array.layout().describe()
                    report.chunks = await _rebuild(store, array)
                    report.action = "manifest"
                    report.reason = f"manifest rebuilt ({report.chunks} chunks)"
                except (InvalidMetadataError, ValueError) as exc:
                    report.reason = str(exc)
    summary.seconds = time.perf_counter() - started
    return summary


def rebuild_manifest(
    url_or_store: str | Store, arrays: Sequence[str] | None = None, **options: Any
) -> ConversionSummary:
    """Synchronous :func:`rebuild_manifest_async`."""
    return run_sync(rebuild_manifest_async(url_or_store, arrays, **options))
