"""The Zarr plug-in of the conversion pipeline: one v3 array (:class:`ZarrArray`), its
``zarr.json``, and the walk that finds arrays and volumes (:func:`find_datasets`)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from asyncshard.convert.journal import normalize
from asyncshard.convert.layout import (
    ArrayLayout,
    layout_doc,
    read_layout,
)
from asyncshard.convert.manifest import (
    MANIFEST_LIMIT,
    manifest_form,
    manifest_keys,
    stored_chunks,
    switched_manifest,
    with_manifest,
)
from asyncshard.convert.pipeline import (
    Convertible,
    Doc,
    RunOptions,
    write_json,
)
from asyncshard.convert.plan import (
    Request,
    plan_passes,
    resolve_target,
)
from asyncshard.convert.report import ArrayReport, TaskResult
from asyncshard.convert.runner import PassSpec
from asyncshard.convert.streamplan import PassPlanner
from asyncshard.convert.tasks import ZarrExecutor
from asyncshard.errors import (
    InvalidMetadataError,
)
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding, Coords
from asyncshard.sharding.common import read_json_versioned
from asyncshard.store import Store

__all__ = [
    "META",
    "ZARR_OPTIONS",
    "FoundDatasets",
    "ZarrArray",
    "ZarrOptions",
    "array_prefix",
    "find_arrays",
    "find_datasets",
    "read_doc",
]

META = "zarr.json"


class ZarrOptions(RunOptions, total=False):
    """:class:`~asyncshard.convert.pipeline.RunOptions` plus the manifest options.

    ``manifest`` writes the ``nonempty_chunks`` attribute on converted arrays (when
    false it is still kept correct where it exists); ``rebuild_manifest`` rebuilds it
    from the data on skipped arrays.
    """

    manifest: bool
    rebuild_manifest: bool


#: The keywords of the Zarr conversions that are not storage options.
ZARR_OPTIONS = ZarrOptions.__optional_keys__


def array_prefix(path: str) -> str:
    return f"{path}/" if path else ""


async def read_doc(store: Store, key: str) -> tuple[dict[str, Any], str | None] | None:
    """A metadata document and its version; ``None`` if missing or not a JSON object."""
    try:
        return await read_json_versioned(store, key)
    except InvalidMetadataError:
        return None


@dataclass
class FoundDatasets:
    """What :func:`find_datasets` found: Zarr v3 array paths and precomputed volumes
    (folder path -> ``info`` document); ``""`` is the root."""

    arrays: list[str]
    volumes: dict[str, dict[str, Any]]


async def find_datasets(store: Store) -> FoundDatasets:
    """The Zarr v3 arrays and precomputed volumes anywhere in ``store``.

    Walks the folders with ``list_dir``, reading each ``zarr.json`` and ``info``; does
    not descend into arrays nor into a volume's scale folders, so chunk folders are
    never listed. Other folders of a volume are walked: a volume does not hide the
    datasets stored below it.
    """
    arrays: list[str] = []
    volumes: dict[str, dict[str, Any]] = {}

    async def walk(prefix: str) -> None:
        keys, prefixes = await store.list_dir(prefix)
        if prefix + META in keys:
            got = await read_doc(store, prefix + META)
            if got is not None and got[0].get("node_type") == "array":
                arrays.append(prefix.rstrip("/"))
                return
        scales: set[str] = set()
        if prefix + "info" in keys:
            got = await read_doc(store, prefix + "info")
            if got is not None and isinstance(got[0].get("scales"), list):
                volumes[prefix.rstrip("/")] = got[0]
                scales = {
                    f"{prefix}{s.get('key')}/" for s in got[0]["scales"] if isinstance(s, dict)
                }
        for child in prefixes:
            if child not in scales:
                await walk(child)

    await walk("")
    return FoundDatasets(sorted(arrays), dict(sorted(volumes.items())))


async def find_arrays(store: Store) -> list[str]:
    """Paths of the Zarr v3 arrays in ``store`` (``""`` for an array at the root), as
    :func:`find_datasets` finds them."""
    return (await find_datasets(store)).arrays


@dataclass
class ZarrArray(Convertible):
    """The Zarr plug-in of the pipeline: one array, its ``zarr.json`` and the request."""

    path: str
    doc: Doc
    version: str | None
    request: Request
    manifest: bool = True
    rebuild_manifest: bool = False
    #: The chunks the current pass moved, for the manifest (``None``: too many).
    _moved: list[Coords] | None = field(default=None, init=False, repr=False)

    @property
    def prefix(self) -> str:
        return array_prefix(self.path)

    @property
    def meta_key(self) -> str:
        return self.prefix + META

    def layout(self, doc: Mapping[str, Any] | None = None) -> ArrayLayout:
        """The layout of ``doc`` (or of the current document) under this array's prefix."""
        return read_layout(self.doc if doc is None else doc, self.prefix)

    def describe(self, doc: Mapping[str, Any] | None = None) -> str:
        return self.layout(doc).describe()

    def target(self) -> Doc | str:
        return self._target(None)

    def target_instead(self, final: Mapping[str, Any]) -> Doc | str:
        """At the midpoint of a two-pass conversion (``final``'s layout under other
        keys), the array's own keys are ``final``'s; elsewhere, the document's."""
        keys = final.get("chunk_key_encoding")
        if self.same({**self.doc, "chunk_key_encoding": keys}, final):
            return self._target(read_layout(final).encoding)
        return self.target()

    def _target(self, keys: ChunkKeyEncoding | None) -> Doc | str:
        final = resolve_target(self.doc, self.request, keys)
        return f"already {self.describe()}" if final is None else final

    def satisfies(self, final: Mapping[str, Any]) -> bool:
        if resolve_target(final, self.request) is not None:
            return False
        separator = self.request.separator
        return separator is None or read_layout(final).encoding.separator == separator

    def passes(self, final: Mapping[str, Any]) -> list[tuple[Doc, Doc]]:
        return plan_passes(self.doc, final)

    def layout_doc(self, doc: Mapping[str, Any]) -> Doc:
        return layout_doc(doc)

    def parser(self, doc: Mapping[str, Any]) -> Callable[[str], Hashable | None]:
        layout = self.layout(doc)
        return layout.keys.decoder(layout.ndim)  # layout.parse_object_key, per key cheaper

    def planner(self, source: Doc, target: Doc) -> PassPlanner:
        self._moved = [] if self._collects() else None
        self._pass_target = self.layout(target)
        self._shards = 0
        return PassPlanner(self.layout(source), self._pass_target)

    def _collects(self) -> bool:
        """Whether the switch writes a manifest from the chunks moved: a chunk-keys one
        to rewrite, or none yet and ``manifest`` asks for one."""
        try:
            form = manifest_form(self.doc, self.layout())
        except ValueError:  # an unknown form: left as it is
            return False
        return form == "chunk-keys" or (form is None and self.manifest)

    def account(self, result: TaskResult) -> None:
        """Count the target shards holding the task's chunks (each target object is one
        task's; a copy's task cuts one source shard into several), and collect the
        chunks moved for the manifest, up to :data:`MANIFEST_LIMIT`."""
        if self._pass_target.sharded:
            # ``grid.object_of`` without its checks (the chunks are parsed keys): 0.7
            # instead of 3.9 us a chunk, a tenth of a ``shard --to``'s CPU
            per = self._pass_target.grid.per_object
            self._shards += len({tuple(map(operator.floordiv, c, per)) for c in result.chunks})
        if self._moved is not None:
            self._moved.extend(result.chunks)
            if len(self._moved) > MANIFEST_LIMIT:
                self._moved = None

    def pass_spec(self, source: Doc, target: Doc) -> PassSpec:
        return PassSpec(ZarrExecutor, self.prefix, source, target)

    async def switch(self, store: Store, target: Doc, report: ArrayReport) -> None:
        keys, note = switched_manifest(
            self.doc,
            self.layout(),
            self.layout(target),
            self._moved,
            add=self.manifest,
            name=self.path,
        )
        if note is not None and note not in report.notes:  # once for both passes of a reshard
            report.notes.append(note)
        report.shards = self._shards  # the last pass's count is the result's
        doc = dict(normalize(target))
        doc["attributes"] = self.doc.get("attributes", {})
        await self._write(store, with_manifest(doc, keys))

    async def resync(self, store: Store) -> None:
        await _sync_consolidated(store, self.path, self.doc)

    async def skipped(self, store: Store, report: ArrayReport) -> None:
        if self.rebuild_manifest:
            try:
                report.reason += f"; manifest rebuilt ({await self.rebuild(store)} chunks)"
            except ValueError as exc:
                report.reason += f"; manifest not rebuilt: {exc}"

    async def _write(self, store: Store, doc: Doc) -> None:
        self.version = await write_json(store, self.meta_key, doc, self.version)
        self.doc = doc
        await _sync_consolidated(store, self.path, doc)

    async def rebuild(self, store: Store) -> int:
        """Rebuild the manifest from the stored chunks, in its current form (``ValueError``
        for a manifest in an unknown form, left as it is); return its length."""
        layout = self.layout()
        form = manifest_form(self.doc, layout) or "zarr-vectors"
        keys = manifest_keys(form, self.doc, layout, await stored_chunks(store, layout))
        await self._write(store, with_manifest(self.doc, keys))
        return len(keys)


async def _sync_consolidated(store: Store, path: str, doc: Mapping[str, Any]) -> None:
    """Replace the array's entry in ancestor groups' ``consolidated_metadata``."""
    parts = path.split("/") if path else []
    for depth in range(len(parts) - 1, -1, -1):
        key = array_prefix("/".join(parts[:depth])) + META
        got = await read_doc(store, key)
        if got is None:
            continue
        group_doc, version = got
        consolidated = group_doc.get("consolidated_metadata")
        if not isinstance(consolidated, dict) or not isinstance(consolidated.get("metadata"), dict):
            continue
        rel = "/".join(parts[depth:])
        if rel in consolidated["metadata"]:
            consolidated["metadata"][rel] = normalize(doc)
            await write_json(store, key, group_doc, version)
