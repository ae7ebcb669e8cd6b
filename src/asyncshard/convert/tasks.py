"""Executing the tasks of a conversion pass against a store.

Bytes are moved, never decoded: unsharded chunks become chunks of a shard byte for byte
and back (the formats' pure shard builders and splitters only frame them). Each task
reads its sources, builds its target objects in memory (one shard at most) and writes
them with plain atomic writes; nothing here touches metadata.

:class:`ChunkMover` holds the I/Obj every format shares (``pack``: many objects in, one
shard out; ``unpack``: one shard in, many objects out); a format says how its objects
are keyed and how a shard is built and split: :class:`ZarrExecutor` (which also
repacks and copies shards) and :class:`PrecomputedExecutor`.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from asyncshard.buffers import BytesLike
from asyncshard.cache import LoadingCache
from asyncshard.convert.layout import ArrayLayout, read_layout
from asyncshard.convert.recode import recoder
from asyncshard.convert.report import TaskResult
from asyncshard.convert.runner import PassSpec, Task
from asyncshard.formats.precomputed.shard import build_shard, decode_chunk_data, split_shard
from asyncshard.formats.precomputed.volume import Scale
from asyncshard.formats.zarr3.keys import Coords
from asyncshard.formats.zarr3.shard import decode_index, encode_shard, shard_chunks
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Data, Store

__all__ = ["ChunkMover", "PrecomputedExecutor", "ZarrExecutor", "read_present_chunks"]

#: Bytes of source shard indexes a repacking executor keeps cached: about 2,800
#: indexes of 8x8 chunks, so targets read their sources' indexes once on arrays up to
#: about 1,400 source shards wide (a source feeds the targets of two target rows).
INDEX_CACHE_BYTES = 4 * 1024 * 1024
#: A split task reads its source shard whole up to this size; a larger one is read by
#: range, one target at a time (memory: one target per task instead of the source).
SPLIT_WHOLE_BYTES = 64 * 1024 * 1024

#: A shard of at most this many chunk bytes is built on the event loop: for small
#: chunks, handing the build to a worker thread and back costs more than the build.
INLINE_BUILD_BYTES = 256 * 1024

Obj = TypeVar("Obj", bound=Hashable)


class ChunkMover(ABC, Generic[Obj]):
    """Runs the ``pack``, ``unpack`` and ``index`` tasks of one pass; objects are named
    by ``Obj`` (what the format plans with)."""

    def __init__(self, store: Store, spec: PassSpec, source: Store | None = None) -> None:
        self.store = store
        self.source = store if source is None else source
        self.prefix = spec.prefix

    # -- what a format says -----------------------------------------------------------

    @abstractmethod
    def source_key(self, obj: Obj) -> str:
        """The key of a source object."""

    def source_keys(self, objs: Sequence[Obj]) -> list[str]:
        """The keys of source objects ``objs``."""
        return [self.source_key(o) for o in objs]

    @abstractmethod
    def target_key(self, obj: Obj) -> str:
        """The key of a target object."""

    @abstractmethod
    def build(self, target: Obj, chunks: Sequence[tuple[Obj, Data]]) -> bytes:
        """Target shard ``target`` from ``(source object, bytes)`` of unsharded chunks."""

    @abstractmethod
    def split(self, source: Obj, key: str, shard: Data) -> list[tuple[Obj, BytesLike]]:
        """``(target object, bytes)`` of every chunk of source shard ``source``."""

    async def index(self, task: Task[Obj]) -> TaskResult:
        """An ``index`` task: the target exists from an interrupted run."""
        return TaskResult(len(task.sources), 0, 0, 0, resumed=True)

    async def already_unpacked(self, task: Task[Obj]) -> TaskResult | None:
        """The result of an ``unpack`` task whose chunks were all written by an
        interrupted run, found without reading the whole shard (``None``: not known)."""
        return None

    # -- the shared I/Obj ---------------------------------------------------------------

    async def execute(self, task: Task[Obj]) -> TaskResult:
        """Do one task."""
        if task.kind == "pack":
            assert task.target is not None
            values = await self.source.get_many(self.source_keys(task.sources))
            return await self.write_shard(task.target, task.sources, values)
        if task.kind == "unpack":
            return await self.unpack(task)
        if task.kind == "index":
            return await self.index(task)
        return await self.execute_other(task)

    async def execute_other(self, task: Task[Obj]) -> TaskResult:
        """Tasks of other kinds (``repack``, ``copy``) where the format has them."""
        raise ValueError(f"unknown task kind {task.kind!r}")

    def moved(self, objs: Sequence[Obj]) -> tuple[Coords, ...]:
        """The chunks a task result lists (for a manifest); none by default."""
        return ()

    async def write_shard(
        self,
        target: Obj,
        sources: Sequence[Obj],
        values: list[Data | None],
        nread: int | None = None,
    ) -> TaskResult:
        """Build shard ``target`` from the ``values`` read for ``sources`` and write it
        (``nread``: the bytes read, when ``values`` are not those bytes)."""
        pairs = [(o, v) for o, v in zip(sources, values, strict=True) if v is not None]
        values.clear()
        size = sum(len(v) for _, v in pairs)
        if nread is None:
            nread = size
        if not pairs:
            return TaskResult(0, 0, nread, 0)
        if size <= INLINE_BUILD_BYTES:  # a thread hop would cost more than the build
            shard = self.build(target, pairs)
            await asyncio.sleep(0)  # still a turn of the loop per task, as a hop gave
        else:
            shard = await asyncio.to_thread(self.build, target, pairs)  # the join frees the GIL
        present = [o for o, _ in pairs]
        pairs.clear()
        await self.store.set(self.target_key(target), shard)
        return TaskResult(len(present), 1, nread, len(shard), self.moved(present))

    async def unpack(self, task: Task[Obj]) -> TaskResult:
        """Write every chunk of one source shard not written yet."""
        (shard,) = task.sources
        if task.existing and (done := await self.already_unpacked(task)) is not None:
            return done
        key = self.source_key(shard)
        buf = await self.source.get(key)
        if buf is None:
            return TaskResult(0, 0, 0, 0)
        pieces = self.split(shard, key, buf)
        existing = set(task.existing)
        writes = [(self.target_key(o), d) for o, d in pieces if o not in existing]
        if writes:
            await self.store.set_many(writes)
        written = sum(len(d) for _, d in writes)
        chunks = self.moved([o for o, _ in pieces])
        return TaskResult(
            len(pieces), len(writes), len(buf), written, chunks, resumed=bool(existing)
        )


class ZarrExecutor(ChunkMover[Coords]):
    """The tasks of a Zarr pass; objects are grid coordinates (chunks or shards).

    With ``spec.recode``, flat source chunks are re-encoded into the target's codecs
    (:mod:`asyncshard.convert.recode`) on their way into a shard.
    """

    def __init__(self, store: Store, spec: PassSpec, source: Store | None = None) -> None:
        super().__init__(store, spec, source)
        self.src = read_layout(spec.source, spec.prefix)
        self.dst = read_layout(spec.target, spec.prefix)
        self.recode = None if spec.recode is None else recoder(spec.recode)
        self._sharded_src: ZarrShardedStore | None = None

    @property
    def sharded_src(self) -> ZarrShardedStore:
        """The source as a ZarrShardedStore (inner chunks by key, cached indexes)."""
        if self._sharded_src is None:
            cache = LoadingCache(INDEX_CACHE_BYTES)
            self._sharded_src = ZarrShardedStore(self.source, self.src.sharding(), cache=cache)
        return self._sharded_src

    def moved(self, objs: Sequence[Coords]) -> tuple[Coords, ...]:
        return tuple(objs)

    def source_key(self, obj: Coords) -> str:
        return self.src.object_key(obj)

    def source_keys(self, objs: Sequence[Coords]) -> list[str]:
        return list(map(self.src.keys.encode, objs))  # one call per key, not three

    def target_key(self, obj: Coords) -> str:
        return self.dst.object_key(obj)

    def build(self, target: Coords, chunks: Sequence[tuple[Coords, Data]]) -> bytes:
        assert self.dst.index is not None
        lo = [t * n for t, n in zip(target, self.dst.cps, strict=True)]  # the target's first
        sub = operator.sub
        positions = {  # the chunks are the target's (planned so): no per-chunk lookup
            tuple(map(sub, chunk, lo)): v for chunk, v in chunks
        }
        return encode_shard(positions, self.dst.index)

    async def write_shard(
        self,
        target: Coords,
        sources: Sequence[Coords],
        values: list[Data | None],
        nread: int | None = None,
    ) -> TaskResult:
        if self.recode is not None:  # codec work off the event loop, in parallel
            recode = self.recode
            nread = sum(len(v) for v in values if v is not None)
            values = await asyncio.to_thread(
                lambda: [None if v is None else recode(v) for v in values]
            )
        return await super().write_shard(target, sources, values, nread)

    def split(self, source: Coords, key: str, shard: Data) -> list[tuple[Coords, BytesLike]]:
        chunks, views = self.present(source, key, shard)
        return list(zip(map(tuple, chunks.tolist()), views, strict=True))

    def present(
        self, source: Coords, key: str, shard: Data
    ) -> tuple[npt.NDArray[np.int64], list[memoryview]]:
        """The chunks of whole source shard ``source`` inside the array: their chunk
        coords (rows) and bytes (zero-copy views of ``shard``)."""
        src = self.src
        assert src.index is not None
        positions, views = shard_chunks(shard, src.index, key=key)
        lo, hi = src.grid.chunk_range(source)
        inside = np.all(positions < np.subtract(hi, lo), axis=1)
        chunks = positions[inside] + np.asarray(lo, dtype=np.int64)  # < hi: no overflow
        if not inside.all():
            views = list(itertools.compress(views, inside.tolist()))
        return chunks, views

    async def already_unpacked(self, task: Task[Coords]) -> TaskResult | None:
        chunks, nread = await read_present_chunks(self.source, self.src, task.sources[0])
        if set(chunks) <= set(task.existing):
            return TaskResult(len(chunks), 0, nread, 0, tuple(chunks), resumed=True)
        return None

    async def index(self, task: Task[Coords]) -> TaskResult:
        assert task.target is not None
        if not self.dst.sharded:
            return TaskResult(1, 0, 0, 0, (task.target,), resumed=True)
        chunks, nread = await read_present_chunks(self.store, self.dst, task.target)
        return TaskResult(len(chunks), 0, nread, 0, tuple(chunks), resumed=True)

    async def execute_other(self, task: Task[Coords]) -> TaskResult:
        if task.kind == "repack":
            return await self._repack(task)
        if task.kind == "split":
            return await self._split(task)
        if task.kind == "copy":
            return await self._copy(task)
        return await super().execute_other(task)

    async def _repack(self, task: Task[Coords]) -> TaskResult:
        assert task.target is not None
        src = self.src
        lo, hi = self.dst.grid.chunk_range(task.target)
        chunks: list[Coords] = []
        located: list[tuple[str, str, Coords]] = []
        for shard in task.sources:  # the target's chunks inside a source shard: a box
            first = [s * n for s, n in zip(shard, src.cps, strict=True)]
            box = [
                range(max(a, f), min(b, f + n))
                for a, b, f, n in zip(lo, hi, first, src.cps, strict=True)
            ]
            here = list(itertools.product(*box))
            positions = itertools.product(
                *(range(r.start - f, r.stop - f) for r, f in zip(box, first, strict=True))
            )
            shard_key = src.object_key(shard)
            chunks.extend(here)
            located.extend(
                (src.object_key(c), shard_key, p) for c, p in zip(here, positions, strict=True)
            )
        values = await self.sharded_src.get_located(located)
        return await self.write_shard(task.target, chunks, values)

    async def _split(self, task: Task[Coords]) -> TaskResult:
        """The target shards a source shard alone feeds: the source read once, whole, and
        cut into its targets, each built and written before the next (the source and one
        target in memory); a source over ``SPLIT_WHOLE_BYTES`` is read by range, target
        by target. The targets in ``task.existing`` are skipped."""
        (shard,) = task.sources
        key = self.source_key(shard)
        existing = set(task.existing)
        meta = await self.source.head(key)
        if meta is None:
            return TaskResult(0, 0, 0, 0)
        done: list[TaskResult] = []
        if meta.size > SPLIT_WHOLE_BYTES:  # by range, through the cached index
            for target in self.dst.grid.objects_over(*self.src.grid.chunk_range(shard)):
                if target not in existing:
                    done.append(await self._repack(Task("repack", target, (shard,))))
            nread = sum(r.bytes_read for r in done)
        else:
            buf = await self.source.get(key)
            if buf is None:
                return TaskResult(0, 0, 0, 0)
            chunks, views = self.present(shard, key, buf)
            for target, rows in self.dst.grid.group_by_object(chunks):
                if target not in existing:
                    coords = [tuple(c) for c in chunks[rows].tolist()]
                    views_here: list[Data | None] = [views[i] for i in rows]
                    done.append(await self.write_shard(target, coords, views_here, 0))
            nread = len(buf)
        return TaskResult(
            sum(r.nchunks for r in done),
            sum(r.objects_written for r in done),
            nread,
            sum(r.bytes_written for r in done),
            tuple(itertools.chain.from_iterable(r.chunks for r in done)),
            resumed=bool(existing),
        )

    async def _copy(self, task: Task[Coords]) -> TaskResult:
        """Same object, other key: ``Store.copy`` (a hard link on local files, where no
        byte moves); a shard's index is read to know the chunks it holds."""
        if task.target is None:  # a group of unsharded objects, copied concurrently
            pairs = [(self.src.object_key(o), self.dst.object_key(o)) for o in task.sources]
            sizes = await self._copy_many(pairs)
            found = [(o, n) for o, n in zip(task.sources, sizes, strict=True) if n is not None]
            written = sum(n for _, n in found)
            return TaskResult(len(found), len(found), 0, written, tuple(o for o, _ in found))
        (obj,) = task.sources
        nread = 0
        if self.src.sharded:
            chunks, nread = await read_present_chunks(self.source, self.src, obj)
        else:
            chunks = [obj]
        pair = (self.src.object_key(obj), self.dst.object_key(task.target))
        (size,) = await self._copy_many([pair])
        if size is None:
            return TaskResult(0, 0, nread, 0)
        return TaskResult(len(chunks), 1, nread, size, tuple(chunks))

    async def _copy_many(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        """``Store.copy_many`` within one store; a read and a write across two."""
        if self.source is self.store:
            return await self.store.copy_many(pairs)
        values = await self.source.get_many([src for src, _ in pairs])
        writes = [(dst, v) for (_, dst), v in zip(pairs, values, strict=True) if v is not None]
        if writes:
            await self.store.set_many(writes)
        return [None if v is None else len(v) for v in values]


class PrecomputedExecutor(ChunkMover[str]):
    """The tasks of a precomputed pass; objects are file names in the scale folder."""

    def __init__(self, store: Store, spec: PassSpec, source: Store | None = None) -> None:
        super().__init__(store, spec, source)
        self.src = Scale.from_json(spec.source)
        self.dst = Scale.from_json(spec.target)

    def source_key(self, obj: str) -> str:
        return self.prefix + obj

    def target_key(self, obj: str) -> str:
        return self.prefix + obj

    def build(self, target: str, chunks: Sequence[tuple[str, Data]]) -> bytes:
        spec = self.dst.sharding
        assert spec is not None
        by_id: dict[int, Data] = {}
        for name, value in chunks:
            pos = self.src.parse_chunk_name(name)
            if pos is not None:
                by_id[self.dst.chunk_id(pos)] = value
        return build_shard(by_id, spec)

    def split(self, source: str, key: str, shard: Data) -> list[tuple[str, BytesLike]]:
        spec = self.src.sharding
        assert spec is not None
        number = spec.parse_shard_filename(source)
        assert number is not None
        out: list[tuple[str, BytesLike]] = []
        for chunk_id, view in split_shard(shard, spec, number, key=key).items():
            try:
                name = self.dst.chunk_name(self.src.grid_pos_of(chunk_id))
            except ValueError:
                continue  # an id outside the grid: no reader can ask for it
            out.append((name, decode_chunk_data(view, spec, key=key)))
        return out


async def read_present_chunks(
    store: Store, layout: ArrayLayout, shard: Coords
) -> tuple[list[Coords], int]:
    """The chunks a shard holds (from its index alone) and the bytes read to know it.

    The index is validated against the whole object's size, so an entry pointing past
    the end of the shard is a ``CorruptShardError`` here, not a surprise later.
    """
    assert layout.index is not None
    key = layout.object_key(shard)
    result = await store.get_object(key, layout.index_request())
    if result is None:
        return [], 0
    index = decode_index(result.data, layout.index, shard_size=result.meta.size, key=key)
    return layout.present_chunks(shard, index), len(result.data)
