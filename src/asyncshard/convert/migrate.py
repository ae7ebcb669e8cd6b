"""Converting a Zarr hierarchy into another store: v2 or v3 in, sharded v3 out, with
OME-Zarr 0.4 metadata migrated to 0.5.

``shard_store(src, shape, to=dest)`` (``asyncshard shard SRC SHAPE --to DEST``) leaves
``src`` untouched and writes to ``dest``:

* every array as a sharded Zarr v3 array with ``c/...`` keys. A v2 array is read through
  the v3 document that names its stored bytes (:mod:`asyncshard.formats.zarr2`), so its
  chunks are moved into shards without decoding, or re-encoded chunk by chunk where its
  codecs have no v3 equivalent (:mod:`asyncshard.convert.recode`);
* every group as a v3 group, its attributes carried over; OME-Zarr 0.4 attributes become
  0.5 (:mod:`asyncshard.formats.ome`) and the arrays of a multiscale get their axes as
  ``dimension_names``; other files in a group's folder (bioformats2raw's
  ``METADATA.ome.xml``) are copied as they are.

Everything is checked before the first write: the source metadata translate, and
``dest`` holds nothing in the way. Arrays go through the same pipeline as an in-place
conversion (:mod:`asyncshard.convert.pipeline`): the journal lives in ``dest``, shards
are written atomically, an array's ``zarr.json`` is written after its last shard, and a
rerun after an interruption writes only what is missing. Groups are written last,
deepest first, so ``dest``'s root metadata appears when the whole hierarchy is there;
then each group whose source had consolidated metadata gets it, describing the copy
(:mod:`asyncshard.convert.consolidated`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from asyncshard.backends.places import place_of
from asyncshard.backends.registry import StoreLocation, opened
from asyncshard.convert.api import fold_storage_options
from asyncshard.convert.consolidated import consolidate, without_consolidated
from asyncshard.convert.hierarchy import HierarchyNode, walk_hierarchy
from asyncshard.convert.journal import normalize, read_journal
from asyncshard.convert.layout import encoding_json, read_layout
from asyncshard.convert.pipeline import Doc, convert_nodes, write_json
from asyncshard.convert.plan import Request, normalize_shard_shape, resolve_target
from asyncshard.convert.recode import recoder
from asyncshard.convert.report import ArrayReport, ConversionSummary, TaskResult
from asyncshard.convert.runner import PassSpec
from asyncshard.convert.streamplan import PassPlanner
from asyncshard.convert.tasks import ZarrExecutor
from asyncshard.convert.zarr_array import ZARR_OPTIONS, ZarrArray, ZarrOptions, array_prefix
from asyncshard.errors import (
    ConversionError,
    InvalidMetadataError,
    NothingToConvertError,
    OverlappingStoresError,
    ShardShapeError,
)
from asyncshard.formats import ome
from asyncshard.formats.zarr2 import translate
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding
from asyncshard.sharding.common import read_json
from asyncshard.store import Store

__all__ = ["CopiedArray", "copy_store"]

META = "zarr.json"


@dataclass
class CopiedArray(ZarrArray):
    """An array converted into another store: ``source_doc`` is the v3 document of the
    source objects; ``doc`` is the destination's ``zarr.json`` once it exists (a
    finished array), else ``source_doc``. ``keys``: the key encoding of a v3 source,
    kept (``None``: a v2 source, copied with ``c/`` keys). ``recode``: see
    :class:`PassSpec`."""

    source_doc: Doc = field(default_factory=dict)
    keys: ChunkKeyEncoding | None = None
    recode: dict[str, Any] | None = None
    recode_reason: str = ""
    _expected: int | None = None
    _plan: PassPlanner | None = None
    _moved_chunks: int = 0

    @property
    def finished(self) -> bool:
        """Whether the destination holds this array already."""
        return self.doc is not self.source_doc

    def final(self) -> Doc:
        """The destination document the request asks for: the source's keys (``c/`` for
        a v2 source), or the separator asked for."""
        resolved = resolve_target(self.source_doc, self.request)
        doc = copy.deepcopy(self.source_doc) if resolved is None else resolved
        keys = self.keys or ChunkKeyEncoding("default", "/")
        if self.request.separator is not None:
            keys = ChunkKeyEncoding(keys.kind, self.request.separator)
        doc["chunk_key_encoding"] = encoding_json(keys)
        return doc

    def target(self) -> Doc | str:
        return f"already {self.describe()}" if self.finished else self.final()

    def satisfies(self, final: Mapping[str, Any]) -> bool:
        return self.same(final, self.final())

    def target_instead(self, final: Mapping[str, Any]) -> Doc | str:
        return self.target()  # one pass: never at a midpoint

    def passes(self, final: Mapping[str, Any]) -> list[tuple[Doc, Doc]]:
        return [(dict(self.source_doc), dict(final))]

    def pass_spec(self, source: Doc, target: Doc) -> PassSpec:
        return PassSpec(ZarrExecutor, self.prefix, source, target, self.recode)

    def planner(self, source: Doc, target: Doc) -> PassPlanner:
        self._plan = super().planner(source, target)
        self._moved_chunks = 0
        return self._plan

    def account(self, result: TaskResult) -> None:
        super().account(result)
        self._moved_chunks += result.nchunks

    async def switch(self, store: Store, target: Doc, report: ArrayReport) -> None:
        moved = self._moved_chunks
        if self._plan is not None and not self._plan.src.sharded:
            self._expected = self._plan.sources  # every flat source chunk lands in a shard
        if self._expected is not None and moved != self._expected:
            raise ConversionError(
                f"{self.path or '/'}: {moved} of {self._expected} source chunks reached "
                "the destination (did the source change, or does a custom runner ignore "
                "Job.source?); nothing was switched, run it again"
            )
        await super().switch(store, target, report)
        if self.recode is not None:
            report.notes.append(f"chunks re-encoded ({self.recode_reason})")


@dataclass
class CopyPlan:
    """What a conversion into another store writes: arrays, then groups' documents."""

    arrays: list[CopiedArray | ArrayReport] = field(default_factory=list)
    groups: list[tuple[str, Doc]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: Groups whose source had consolidated metadata: the copy gets it too.
    consolidated: list[str] = field(default_factory=list)
    #: What each array is (``Zarr v2 → v3``) and its OME-Zarr version change, for the report.
    formats: dict[str, str] = field(default_factory=dict)
    ome: dict[str, str] = field(default_factory=dict)


def _array_source(
    node: HierarchyNode, names: list[str] | None
) -> tuple[Doc, dict[str, Any] | None, str]:
    """The v3 document of the source objects, what re-encoding needs, and why."""
    if node.zarr_format == 3:
        doc = copy.deepcopy(node.meta)
        if names is not None and len(names) == len(doc.get("shape", ())):
            doc["dimension_names"] = doc.get("dimension_names") or names
        return doc, None, ""
    translated = translate(node.meta, node.attributes, names)
    return translated.doc, translated.recode, translated.reason


def _group_doc(node: HierarchyNode, role: ome.Role | None) -> Doc:
    attributes = ome.to_v05(node.attributes, node.path, role)
    if node.zarr_format == 3:
        doc = {k: copy.deepcopy(v) for k, v in node.meta.items() if k != "consolidated_metadata"}
        doc["attributes"] = attributes
        return doc
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes}


def _roles(nodes: Sequence[HierarchyNode]) -> dict[str, ome.Role | None]:
    """What each group is to its OME parent (:func:`asyncshard.formats.ome.role_of`)."""
    attributes = {n.path: n.attributes for n in nodes if n.kind == "group"}
    roles: dict[str, ome.Role | None] = {}
    for path in attributes:
        parent, _, name = path.rpartition("/")
        roles[path] = ome.role_of(name, attributes.get(parent)) if path else None
    return roles


async def _existing(store: Store, key: str) -> Doc | None:
    """A metadata document already in the destination (``None``: none)."""
    try:
        return await read_json(store, key)
    except InvalidMetadataError:
        raise ConversionError(f"the destination holds {key}, which is not a JSON object") from None


async def plan_copy(
    reader: Store,
    store: Store,
    request: Request,
    arrays: Sequence[str] | None,
    options: ZarrOptions,
) -> CopyPlan:
    """Walk the source, translate every node and check the destination; nothing is
    written. Raises before any write when something does not translate or is in the way."""
    nodes = await walk_hierarchy(reader)
    if not any(n.kind == "array" for n in nodes):
        where = reader.url or repr(reader)
        raise NothingToConvertError(f"no Zarr array (v2 or v3) at {where}")
    roles = _roles(nodes)
    plan = CopyPlan()
    names: dict[str, list[str]] = {}
    for node in nodes:
        if node.kind == "group" and ome.is_ome(node.attributes, roles[node.path]):
            named = ome.dimension_names(node.attributes, node.path)
            names.update(named)
            version = ome.ome_version(node.attributes) or ome.MIGRATED_FROM
            change = version if version == ome.MIGRATED_TO else f"{version} → {ome.MIGRATED_TO}"
            plan.ome.update(dict.fromkeys(named, change))
    wanted = None if arrays is None else {a.strip("/") for a in arrays}
    for node in nodes:
        if node.kind == "group":
            plan.groups.append((node.path, _group_doc(node, roles[node.path])))
            plan.files += node.files
            if node.consolidated:
                plan.consolidated.append(node.path)
            continue
        plan.formats[node.path] = "Zarr v3" if node.zarr_format == 3 else "Zarr v2 → v3"
        if wanted is not None and node.path not in wanted:
            plan.arrays.append(ArrayReport(node.path, "skipped", reason="not among --array"))
            continue
        plan.arrays.append(await _plan_array(store, node, names.get(node.path), request, options))
    missing = (wanted or set()) - {n.path for n in nodes if n.kind == "array"}
    if missing:
        raise NothingToConvertError(f"no array at {sorted(missing)} in the source")
    for path, doc in plan.groups:
        found = await _existing(store, array_prefix(path) + META)
        if found is not None and normalize(without_consolidated(found)) != normalize(doc):
            raise ConversionError(
                f"the destination already holds a different group at {path or '/'}; "
                "convert into an empty location"
            )
    plan.groups.sort(key=lambda g: -g[0].count("/") - bool(g[0]))  # deepest first
    return plan


async def _plan_array(
    store: Store,
    node: HierarchyNode,
    names: list[str] | None,
    request: Request,
    options: ZarrOptions,
) -> CopiedArray:
    try:
        source_doc, recode, reason = _array_source(node, names)
        layout = read_layout(source_doc)
        if recode is not None:
            recoder(recode)  # every codec known before the first write
    except (InvalidMetadataError, ConversionError) as exc:
        raise type(exc)(f"array {node.path or '/'}: {exc}") from None
    except Exception as exc:  # numcodecs: an unknown codec id or configuration
        raise InvalidMetadataError(
            f"array {node.path or '/'}: its v2 codecs cannot be decoded here ({exc})"
        ) from None
    try:
        if request.shard_shape != "auto":
            normalize_shard_shape(request.shard_shape, layout.ndim)
    except ValueError as exc:
        raise ShardShapeError(f"array {node.path or '/'}: {exc}") from None
    array = CopiedArray(
        node.path,
        source_doc,
        None,
        request,
        manifest=options.get("manifest", False),
        source_doc=source_doc,
        keys=layout.encoding if node.zarr_format == 3 else None,
        recode=recode,
        recode_reason=reason,
    )
    found = await _existing(store, array.meta_key)
    if found is not None:
        if not array.same(found, array.final()):
            raise ConversionError(
                f"the destination already holds a different array at {node.path or '/'}; "
                "convert into an empty location"
            )
        array.doc = found
    elif await read_journal(store, array.prefix) is None:
        async for key in store.list_prefix(array.prefix):
            raise ConversionError(
                f"the destination holds {key} and no conversion journal accounts for it; "
                "convert into an empty location"
            )
    return array


def _check_apart(reader: Store, store: Store) -> None:
    """``OverlappingStoresError`` when source and destination are one place, or one
    holds the other (a rerun would walk the copy as part of the source, or the reverse):
    the stores' resolved places are compared (:mod:`asyncshard.backends.places`), not
    how their URLs and endpoints are written."""
    same = "the destination is the source; leave out `to` to convert in place"
    if reader is store:
        raise OverlappingStoresError(same)
    src, dst = place_of(reader), place_of(store)
    if src is None or dst is None or not src.overlaps(dst):
        return
    if src == dst:
        raise OverlappingStoresError(same)
    raise OverlappingStoresError(
        f"{store.url} and {reader.url} lie inside one another; convert to a location apart"
    )


async def copy_store(
    source: StoreLocation,
    to: StoreLocation,
    request: Request,
    arrays: Sequence[str] | None = None,
    *,
    to_storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Convert the hierarchy at ``source`` into ``to`` as ``request`` says (see the module
    docstring). ``to_storage_options`` open ``to``; the other options are those of
    :func:`~asyncshard.convert.zarr.shard_store_async`, storage options apply to
    ``source``. ``manifest`` (default false here) adds ``nonempty_chunks``."""
    if request.shard_shape is None:
        raise ValueError("a conversion into another store shards: give a shard shape")
    if options.get("rebuild_manifest"):
        raise ValueError("rebuild_manifest applies to in-place conversions, not to `to`")
    run = cast(ZarrOptions, fold_storage_options(options, ZARR_OPTIONS))
    started = time.perf_counter()
    async with (
        opened(source, run.pop("storage_options", None)) as reader,
        opened(to, to_storage_options) as store,
    ):
        _check_apart(reader, store)
        plan = await plan_copy(reader, store, request, arrays, run)

        async def nodes(_: Store) -> AsyncIterator[CopiedArray | ArrayReport]:
            for node in plan.arrays:
                yield node

        summary = await convert_nodes(store, nodes, run, reader=reader)
        for key in plan.files:  # other files of the groups (METADATA.ome.xml), as they are
            data = await reader.get(key)
            if data is not None and await store.head(key) is None:
                await store.set(key, data)
        for path, doc in plan.groups:
            found = await _existing(store, array_prefix(path) + META)
            if found is None:
                await write_json(store, array_prefix(path) + META, doc, None)
        await consolidate(store, plan.consolidated)
        summary.location, summary.destination = reader.url or "", store.url or ""
    for report in summary.arrays:
        report.format, report.ome = plan.formats[report.path], plan.ome.get(report.path, "")
    summary.seconds = time.perf_counter() - started
    return summary
