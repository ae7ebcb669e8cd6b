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
instant requires the new objects to have keys that no live object has. So a pass
writes the new layout under a *disjoint* chunk key encoding, always nested so that no
folder receives more than a row of the grid
(:func:`~asyncshard.convert.layout.partner`: ``c/0/0`` is staged as ``0/0``, ``c.0.0``
as ``c/0/0``).
Zarr readers (zarr-python, tensorstore) follow ``chunk_key_encoding`` in ``zarr.json``.

* Every conversion keeps the array's chunk key encoding by default (tools that list
  ``c/`` find the objects where they were), in two passes: the new layout under the
  disjoint encoding, then a verbatim copy of its objects back to the array's keys (a
  hard link locally, a server-side copy on S3). Shard, reshard, unshard gives back the
  original keys and bytes exactly.
* ``separator=`` the other separator takes one pass, straight to those keys.

A pass
------
The pipeline (:mod:`asyncshard.convert.pipeline`) runs every pass of every format the
same way; :mod:`.zarr_array` is the Zarr plug-in (:class:`ZarrArray`):

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
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, cast

from asyncshard.backends.registry import StoreLocation, opened
from asyncshard.convert.api import blocking, fold_storage_options
from asyncshard.convert.autoshape import DEFAULT_SHARD_BYTES
from asyncshard.convert.hierarchy import walk_hierarchy
from asyncshard.convert.journal import read_journal
from asyncshard.convert.layout import (
    IndexLocation,
)
from asyncshard.convert.migrate import copy_store
from asyncshard.convert.pipeline import (
    convert_nodes,
)
from asyncshard.convert.plan import (
    Request,
    normalize_shard_shape,
)
from asyncshard.convert.report import ArrayReport, ConversionSummary
from asyncshard.convert.vectors import Role, VectorRoles
from asyncshard.convert.zarr_array import (
    META,
    ZARR_OPTIONS,
    ZarrArray,
    ZarrOptions,
    array_prefix,
    find_arrays,
    read_doc,
)
from asyncshard.errors import (
    ConversionError,
    InvalidMetadataError,
    NothingToConvertError,
    ShardShapeError,
)
from asyncshard.formats import ome
from asyncshard.formats.zarr3.keys import Separator
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

_OBJECT_LEVEL = "zarr-vectors object-level array: kept flat as zarr-vectors does"


async def _load(
    store: Store, path: str, request: Request, options: ZarrOptions
) -> ZarrArray | ArrayReport:
    """The array at ``path`` as a node, or the report of why it is skipped."""
    got = await read_doc(store, array_prefix(path) + META)
    if got is None:
        return ArrayReport(path, "skipped", reason=f"no readable {array_prefix(path)}{META}")
    node = ZarrArray(
        path,
        got[0],
        got[1],
        request,
        options.get("manifest", True),
        options.get("rebuild_manifest", False),
    )
    if node.doc.get("node_type") != "array" or node.doc.get("zarr_format") != 3:
        return ArrayReport(path, "skipped", reason="not a Zarr v3 array")
    try:
        ndim = node.layout().ndim
    except InvalidMetadataError as exc:
        return ArrayReport(path, "skipped", reason=str(exc))
    try:
        if request.shard_shape != "auto":
            normalize_shard_shape(request.shard_shape, ndim)
    except ValueError as exc:
        raise ShardShapeError(f"array {path or '/'!r}: {exc}") from None
    return node


def _for_vectors(
    request: Request, options: ZarrOptions, role: Role | None, walked: bool
) -> tuple[Request, ZarrOptions] | str:
    """The request for an array of a zarr-vectors level (see :mod:`.vectors`), or why it
    is skipped: flat arrays get ``c/i/j/k`` keys; object-level arrays found by the walk
    are not sharded, and no manifest is added to or rebuilt on them."""
    if role is None:
        return request, options
    if request.shard_shape is None:
        if request.separator == ".":
            return "zarr-vectors finds flat chunks under c/ only; separator '.' refused"
        request = replace(request, separator="/")
    elif role == "object" and walked:
        return _OBJECT_LEVEL
    if role == "object":
        return request, {**options, "manifest": False, "rebuild_manifest": False}
    return request, options


def _normalize_path(path: str) -> str:
    return path.strip("/")


def _v2_advice(where: str, request: Request) -> str:
    """What to do with the Zarr v2 arrays at ``where``: they are converted into another
    location, never in place (and unsharded already: v2 has no sharding)."""
    if request.shard_shape is None:
        return (
            f"{where} holds Zarr v2 arrays, which have no shards to undo; for a sharded "
            "Zarr v3 copy: asyncshard shard URL SHAPE --to DEST (shard_store(src, shape, "
            "to=dest)), or asyncshard cp -r to copy them as they are"
        )
    return (
        f"{where} holds Zarr v2 arrays, which are converted into another location: give "
        "--to DEST (shard_store(src, shape, to=dest))"
    )


async def _require_arrays(store: Store, paths: Sequence[str]) -> None:
    """``NothingToConvertError`` naming the ``paths`` asked for that hold no Zarr v3 array,
    before anything is converted: a mistyped path fails, it is not merely skipped."""
    missing = []
    for path in paths:
        got = await read_doc(store, array_prefix(path) + META)
        doc = got[0] if got is not None else {}
        if doc.get("node_type") != "array" or doc.get("zarr_format") != 3:
            missing.append(path or "/")
    if missing:
        where = store.url or repr(store)
        raise NothingToConvertError(f"no Zarr v3 array at {', '.join(missing)} in {where}")


async def convert_store(
    url_or_store: StoreLocation,
    request: Request,
    arrays: Sequence[str] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Convert every array of a store (or the ``arrays`` paths) as ``request`` says.

    See :func:`shard_store_async` for the options.
    """
    run = cast(ZarrOptions, fold_storage_options(options, ZARR_OPTIONS))
    urls: list[str] = []
    ome_of: dict[str, str] = {}

    async def nodes(store: Store) -> AsyncIterator[ZarrArray | ArrayReport]:
        urls.append(store.url or "")
        paths = await find_arrays(store) if arrays is None else [_normalize_path(a) for a in arrays]
        if not paths:
            where = store.url or repr(store)
            if any(n.kind == "array" for n in await walk_hierarchy(store, frozenset({2}))):
                raise ConversionError(_v2_advice(where, request))
            raise NothingToConvertError(f"no Zarr v3 array and no precomputed info at {where}")
        if arrays is not None:
            await _require_arrays(store, paths)
        roles = VectorRoles(store)
        groups: dict[str, dict[str, Any]] = {}
        for path in paths:
            ome_of[path] = await _ome_version(store, path, groups)
            chosen = _for_vectors(request, run, await roles.role(path), arrays is None)
            if isinstance(chosen, str):
                yield ArrayReport(path, "skipped", reason=chosen)
            else:
                yield await _load(store, path, *chosen)

    summary = await convert_nodes(url_or_store, nodes, run)
    summary.location = urls[0] if urls else ""
    for report in summary.arrays:
        report.format, report.ome = "Zarr v3", ome_of.get(report.path, "")
    return summary


async def _ome_version(store: Store, path: str, groups: dict[str, dict[str, Any]]) -> str:
    """The OME-Zarr version of the image whose multiscales name the array at ``path``
    (its parent group's; ``""``: none). ``groups`` caches the parents' attributes."""
    parent = path.rpartition("/")[0]
    if parent not in groups:
        got = await read_doc(store, array_prefix(parent) + META) if path else None
        attributes = got[0].get("attributes") if got is not None else None
        groups[parent] = attributes if isinstance(attributes, dict) else {}
    attributes = groups[parent]
    if path not in ome.dimension_names(attributes, parent):
        return ""
    return ome.ome_version(attributes) or ""


async def shard_store_async(
    url_or_store: StoreLocation,
    shard_shape: int | Sequence[int] | Literal["auto"],
    arrays: Sequence[str] | None = None,
    *,
    separator: Separator | None = None,
    index_location: IndexLocation | None = None,
    checksum: bool | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    to: StoreLocation | None = None,
    to_storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Shard every Zarr v3 array of a store (or those at the paths ``arrays``).

    With ``to`` (a URL or a store, opened with ``to_storage_options``), the source is left
    untouched and the sharded copy of its whole hierarchy, Zarr v2 or v3, is written
    there; OME-Zarr 0.4 becomes 0.5 (:mod:`~asyncshard.convert.migrate`). Without it,
    Zarr v3 arrays are converted in place; Zarr v2 sources need ``to``.

    ``shard_shape`` is in inner chunks (chunks per shard), an int for every axis, or
    ``"auto"``: chosen per array for shards of ``shard_bytes`` decoded bytes (64 MiB;
    see :mod:`~asyncshard.convert.autoshape`). Flat
    arrays become sharded with their codecs as inner codecs (bytes moved, not
    re-encoded); sharded arrays with another shard shape are resharded; arrays already
    in that layout are skipped.

    Options: ``separator`` the key separator of the result (default: the array's own;
    see the module docstring); ``index_location``/``checksum`` the shard index (default ``end`` with
    crc32c, or the current ones); the runner options of
    :class:`~asyncshard.convert.pipeline.RunOptions` (``max_in_flight``, ``client``,
    ``runner``, ``storage_options``, ``progress``) and the manifest options of
    :class:`ZarrOptions` (``manifest``, ``rebuild_manifest``). Any other keyword is a
    storage option for a URL (``endpoint``, ``region``, ...; see docs/cloud.md); one
    the store does not take is an :class:`~asyncshard.errors.UnknownOptionError`.
    """
    if shard_shape is None:
        raise ValueError("shard_shape is required; use unshard_store to go back to flat")
    shape: int | tuple[int, ...] | Literal["auto"]
    shape = shard_shape if isinstance(shard_shape, int | str) else tuple(shard_shape)
    request = Request(shape, separator, index_location, checksum, shard_bytes)
    if to is not None:
        return await copy_store(
            url_or_store, to, request, arrays, to_storage_options=to_storage_options, **options
        )
    if to_storage_options is not None:
        raise ValueError("to_storage_options without to")
    return await convert_store(url_or_store, request, arrays, **options)


async def unshard_store_async(
    url_or_store: StoreLocation,
    arrays: Sequence[str] | None = None,
    *,
    separator: Separator | None = None,
    **options: Any,
) -> ConversionSummary:
    """Turn every sharded array into one object per chunk; flat arrays are skipped.

    Options as for :func:`shard_store_async`.
    """
    return await convert_store(url_or_store, Request(None, separator), arrays, **options)


async def reshard_async(
    url_or_store: StoreLocation,
    shard_shape: int | Sequence[int] | Literal["auto"] | None,
    arrays: Sequence[str] | None = None,
    *,
    separator: Separator | None = None,
    index_location: IndexLocation | None = None,
    checksum: bool | None = None,
    **options: Any,
) -> ConversionSummary:
    """Change the shard shape in place, or with ``to`` write the resharded copy there
    (as :func:`shard_store_async`); ``None`` is :func:`unshard_store_async` (in place
    only)."""
    if shard_shape is None:
        if options.pop("to", None) is not None or options.pop("to_storage_options", None):
            raise ValueError("a copy into another store shards: unsharding works in place only")
        return await unshard_store_async(url_or_store, arrays, separator=separator, **options)
    return await shard_store_async(
        url_or_store,
        shard_shape,
        arrays,
        separator=separator,
        index_location=index_location,
        checksum=checksum,
        **options,
    )


async def rebuild_manifest_async(
    url_or_store: StoreLocation,
    arrays: Sequence[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Rebuild the ``nonempty_chunks`` manifest of every array from its stored data
    (found by the walk: not on zarr-vectors' object-level arrays, which have none).
    Keywords are storage options, as for :func:`shard_store_async`."""
    started = time.perf_counter()
    summary = ConversionSummary()
    async with opened(url_or_store, storage_options, **options) as store:
        paths = await find_arrays(store) if arrays is None else [_normalize_path(a) for a in arrays]
        roles = VectorRoles(store)
        for path in paths:
            if arrays is None and await roles.role(path) == "object":
                summary.arrays.append(ArrayReport(path, "skipped", reason=_OBJECT_LEVEL))
                continue
            summary.arrays.append(await _rebuild_one(store, path))
    summary.seconds = time.perf_counter() - started
    return summary


async def _rebuild_one(store: Store, path: str) -> ArrayReport:
    loaded = await _load(store, path, Request(None), {})
    if isinstance(loaded, ArrayReport):
        return loaded
    report = ArrayReport(path, "skipped")
    if await read_journal(store, loaded.prefix) is not None:
        report.reason = "a conversion is in flight; finish it first"
        return report
    try:
        report.source = loaded.describe()
        report.chunks = await loaded.rebuild(store)
        report.action = "manifest"
        report.reason = f"manifest rebuilt ({report.chunks} chunks)"
    except (InvalidMetadataError, ValueError) as exc:
        report.reason = str(exc)
    return report


shard_store = blocking(shard_store_async)
unshard_store = blocking(unshard_store_async)
reshard = blocking(reshard_async)
rebuild_manifest = blocking(rebuild_manifest_async)
