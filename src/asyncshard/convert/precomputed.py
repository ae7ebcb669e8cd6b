"""Converting Neuroglancer precomputed scales between unsharded and sharded.

Unsharded chunk files (``x0-x1_y0-y1_z0-z1``) and shard files (``<hex>.shard``) never
share a name, so one pass suffices and keeps the scale readable throughout: shards are
written next to the chunk files, the ``info`` file is switched (the scale gains or loses
its ``sharding``), then the old files are deleted. The journal
(:mod:`asyncshard.convert.journal`, in the scale folder) makes interrupted runs resume.
Chunk bytes are moved verbatim (gzip applied or removed only if the sharding spec's
``data_encoding`` is ``gzip``). Shards are built with the pure
:func:`~asyncshard.formats.precomputed.shard.build_shard` and split with
:func:`~asyncshard.formats.precomputed.shard.split_shard`, one task per shard. This
module is the precomputed plug-in (:class:`PrecomputedScale`) of the pipeline
(:mod:`asyncshard.convert.pipeline`).

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

import math
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from asyncshard.backends.registry import StoreLocation
from asyncshard.convert.api import blocking, fold_storage_options
from asyncshard.convert.autoshape import DEFAULT_SHARD_BYTES
from asyncshard.convert.journal import normalize
from asyncshard.convert.pipeline import (
    Convertible,
    Doc,
    RunOptions,
    convert_nodes,
    write_json,
)
from asyncshard.convert.report import ArrayReport, ConversionSummary, TaskResult
from asyncshard.convert.runner import PassSpec
from asyncshard.convert.scaleplan import ScalePlan
from asyncshard.convert.tasks import PrecomputedExecutor
from asyncshard.errors import InvalidMetadataError
from asyncshard.formats.precomputed.spec import ShardingSpec
from asyncshard.formats.precomputed.volume import Scale, VolumeInfo
from asyncshard.sharding.common import read_json, read_json_versioned
from asyncshard.store import Store

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "PrecomputedScale",
    "default_sharding",
    "shard_precomputed",
    "shard_precomputed_async",
    "unshard_precomputed",
    "unshard_precomputed_async",
]

INFO = "info"
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


def _object_names(scale: Scale, prefix: str) -> Callable[[str], Hashable | None]:
    """The file name of a key if it is an object of ``scale`` (a shard or chunk file)."""
    spec = scale.sharding

    def name_of(key: str) -> str | None:
        name = key[len(prefix) :]
        if "/" in name:
            return None
        if spec is not None:
            return name if spec.parse_shard_filename(name) is not None else None
        return name if scale.parse_chunk_name(name) is not None else None

    return name_of


@dataclass
class PrecomputedScale(Convertible):
    """The precomputed plug-in of the pipeline: one scale of the volume's ``info``.

    ``sharding``: the spec asked for (``None`` to unshard); ``spec`` of ``None`` with
    ``shard`` true chooses one with :func:`default_sharding`.
    """

    path: str
    doc: Doc
    info: dict[str, Any]
    version: str | None
    index: int
    shard: bool
    sharding: ShardingSpec | None
    target_shard_bytes: int = DEFAULT_SHARD_BYTES

    @property
    def prefix(self) -> str:
        return self.path.strip("/") + "/"

    @property
    def meta_key(self) -> str:
        return INFO

    def describe(self, doc: Mapping[str, Any] | None = None) -> str:
        return "sharded" if (self.doc if doc is None else doc).get("sharding") else "unsharded"

    def _spec(self) -> ShardingSpec:
        if self.sharding is not None:
            return self.sharding
        scale = Scale.from_json(self.doc)
        info = VolumeInfo.from_json(self.info)
        return default_sharding(scale, info, target_shard_bytes=self.target_shard_bytes)

    def target(self) -> Doc | str:
        current = Scale.from_json(self.doc).sharding
        if not self.shard:
            return "already unsharded" if current is None else _retarget(self.doc, None)
        if current is not None:
            if self.sharding is None or current == self.sharding:
                return "already sharded"
            return "sharded with another spec: unshard it first"
        if len(self.doc["chunk_sizes"]) > 1:
            return "several chunk_sizes: a sharded scale has one"
        return _retarget(self.doc, self._spec())

    def satisfies(self, final: Mapping[str, Any]) -> bool:
        spec = Scale.from_json(final).sharding
        if not self.shard:
            return spec is None
        return spec is not None and (self.sharding is None or spec == self.sharding)

    def parser(self, doc: Mapping[str, Any]) -> Callable[[str], Hashable | None]:
        return _object_names(Scale.from_json(doc), self.prefix)

    def planner(self, source: Doc, target: Doc) -> ScalePlan:
        self._shards = 0
        return ScalePlan(Scale.from_json(source), Scale.from_json(target))

    def account(self, result: TaskResult) -> None:
        """Count the shards written: a task writes one target shard."""
        self._shards += 1 if result.nchunks else 0

    def pass_spec(self, source: Doc, target: Doc) -> PassSpec:
        return PassSpec(PrecomputedExecutor, self.prefix, source, target)

    async def switch(self, store: Store, target: Doc, report: ArrayReport) -> None:
        self.info["scales"][self.index] = target
        self.version = await write_json(store, INFO, self.info, self.version)
        self.doc = target
        report.shards = self._shards if target.get("sharding") else 0


def _retarget(scale_doc: Mapping[str, Any], sharding: ShardingSpec | None) -> Doc:
    doc: Doc = dict(normalize(scale_doc))
    if sharding is None:
        doc.pop("sharding", None)
    else:
        doc["sharding"] = sharding.to_json()
        doc["chunk_sizes"] = doc["chunk_sizes"][:1]
    return doc


async def is_precomputed(store: Store) -> bool:
    """Whether ``store`` holds a precomputed volume (an ``info`` file with scales)."""
    try:
        info = await read_json(store, INFO)
    except InvalidMetadataError:
        return False
    return isinstance(info, Mapping) and "scales" in info


async def _read_info(store: Store) -> tuple[dict[str, Any], str | None]:
    got = await read_json_versioned(store, INFO)
    if got is None:
        raise InvalidMetadataError("no readable info file: not a precomputed volume")
    VolumeInfo.from_json(got[0])
    return got


async def _convert_volume(
    url_or_store: StoreLocation,
    scales: Sequence[str] | None,
    sharding: ShardingSpec | Mapping[str, Any] | None,
    shard: bool,
    target_shard_bytes: int,
    options: RunOptions,
) -> ConversionSummary:
    spec = ShardingSpec.from_json(sharding) if isinstance(sharding, Mapping) else sharding
    urls: list[str] = []

    async def nodes(store: Store) -> AsyncIterator[PrecomputedScale]:
        urls.append(store.url or "")
        known = [s.key for s in VolumeInfo.from_json((await _read_info(store))[0]).scales]
        keys = known if scales is None else scales
        unknown = [key for key in keys if key not in known]
        if unknown:  # before anything is converted
            raise InvalidMetadataError(f"info has no scale with key {unknown[0]!r} ({known})")
        for key in keys:
            info, version = await _read_info(store)  # re-read: the last scale switched it
            for i, doc in enumerate(info["scales"]):
                if doc.get("key") == key:
                    scale = dict(normalize(doc))
                    yield PrecomputedScale(
                        key, scale, info, version, i, shard, spec, target_shard_bytes
                    )
                    break
            else:
                raise InvalidMetadataError(f"info has no scale with key {key!r}")

    summary = await convert_nodes(url_or_store, nodes, options)
    summary.location = urls[0] if urls else ""
    for report in summary.arrays:
        report.format = "precomputed"
    return summary


async def shard_precomputed_async(
    url_or_store: StoreLocation,
    sharding: ShardingSpec | Mapping[str, Any] | None = None,
    scales: Sequence[str] | None = None,
    *,
    target_shard_bytes: int = DEFAULT_SHARD_BYTES,
    **options: Any,
) -> ConversionSummary:
    """Shard the unsharded scales of a precomputed volume (or the scales keyed ``scales``).

    ``sharding``: a :class:`ShardingSpec` or its JSON; ``None`` chooses one per scale
    with :func:`default_sharding`. Scales already sharded with that spec are skipped.
    Runner and storage options as for :func:`asyncshard.convert.shard_store_async`.
    """
    run = cast(RunOptions, fold_storage_options(options, RunOptions.__optional_keys__))
    return await _convert_volume(url_or_store, scales, sharding, True, target_shard_bytes, run)


async def unshard_precomputed_async(
    url_or_store: StoreLocation,
    scales: Sequence[str] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Turn the sharded scales of a precomputed volume back into one file per chunk."""
    run = cast(RunOptions, fold_storage_options(options, RunOptions.__optional_keys__))
    return await _convert_volume(url_or_store, scales, None, False, DEFAULT_SHARD_BYTES, run)


shard_precomputed = blocking(shard_precomputed_async)
unshard_precomputed = blocking(unshard_precomputed_async)
