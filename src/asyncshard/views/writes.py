"""WritableView: the writes of :class:`~asyncshard.views.unsharded.UnshardedView`.

Writes (``writable=True``; read-only otherwise) are routed like reads: a chunk key goes
to its dataset's sharded store (a conditional read-merge-write of its shard; writes of
one shard arriving together are merged by a :class:`~asyncshard.views.gate.WriteGate`);
a dataset's ``zarr.json`` is mapped back onto the stored sharded document
(:func:`~asyncshard.formats.zarr3.metadata.map_back_metadata`), conditionally on the
version read; every other key passes through. Refused with a typed error, writing
nothing: metadata that cannot be mapped back, a precomputed ``info`` or shard file, and
metadata that would create a sharded dataset (its writer would write whole shards at
keys the view reads as chunks: create sharded datasets through the wrapped store).
``erase_prefix`` of a dataset's folder (or above) deletes its objects, shards included;
inside a dataset it erases the chunks listed there, never a whole shard holding other
chunks. Writing or erasing metadata forgets its folder at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar, cast

from asyncshard.errors import (
    ConflictError,
    InvalidKeyError,
    ReadOnlyError,
    UnsupportedOperationError,
)
from asyncshard.fanout import run_writes
from asyncshard.sharding.engine import ShardedAdapter
from asyncshard.store import BytesLike, Store, retry_on_conflict, validate_key, validate_prefix
from asyncshard.views.datasets import (
    OPENERS,
    Dataset,
    DatasetOptions,
    Scope,
    group_arrays,
    map_back_group,
)
from asyncshard.views.folders import Folders, Node, folder_of_metadata
from asyncshard.views.gate import WriteGate
from asyncshard.views.routed import RoutedView
from asyncshard.views.targets import (
    GROUP_DOCUMENT,
    VERSION_PREFIX,
    Chunk,
    Hidden,
    Target,
    inner_version,
    is_group_document,
    virtual_version,
)

__all__ = ["WritableView"]

T = TypeVar("T")


class _CallerConflict(Exception):
    """The caller's own condition failed during a retried update (not to be retried)."""

    def __init__(self, error: ConflictError) -> None:
        super().__init__(str(error))
        self.error = error


class WritableView(RoutedView):
    """A :class:`~asyncshard.views.routed.RoutedView` that routes writes (see the module
    docstring).

    Args:
        inner: any Store.
        options: how the datasets' sharded stores are opened.
        folders: the nodes of ``inner``'s folders.
        recheck_metadata: see :class:`~asyncshard.views.routed.RoutedView`.
        writable: accept writes; read-only otherwise.
        write_window: seconds a chunk write waits for more writes of its shard (``0``:
            no gate).
        write_flush_at: how many chunk writes one writer keeps in flight at most.
        write_cut_short: called with the shard's chunk count when a shard is written in
            parts because every writer was at that bound.
    """

    def __init__(
        self,
        inner: Store,
        options: DatasetOptions,
        folders: Folders,
        *,
        recheck_metadata: bool,
        writable: bool,
        write_window: float,
        write_flush_at: Callable[[], int] | None,
        write_cut_short: Callable[[int], None] | None,
    ) -> None:
        super().__init__(inner, options, folders, recheck_metadata=recheck_metadata)
        self.writable = writable
        self._write_flush_at, self._write_cut_short = write_flush_at, write_cut_short
        self._gate = (
            WriteGate(
                window=write_window,
                max_wait=10 * write_window,
                flush_at=write_flush_at,
                on_cut=self._cut_short,
            )
            if write_window > 0
            else None
        )

    @property
    def supports_writes(self) -> bool:
        return self.writable and self.inner.supports_writes

    @property
    def supports_conditional_deletes(self) -> bool:
        return False

    def _check_writable(self) -> None:
        if not self.supports_writes:
            raise ReadOnlyError(f"{self!r} is read-only")

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        self._check_writable()
        folder = folder_of_metadata(key)
        if folder is not None:
            try:
                return await self._put_metadata(key, folder, data, if_match, if_absent)
            finally:
                self.folders.invalidate(folder)
        target = await self._target(key)
        if isinstance(target, Chunk):
            version = inner_version(key, if_match)
            store, rel = target.scope.store, target.rel
            conditional = version is not None or if_absent
            return virtual_version(
                await self._gated(
                    target,
                    lambda: store.set(rel, data, if_match=version, if_absent=if_absent),
                    whole=not conditional,
                )
            )
        self._refuse(key, target)
        return await super()._set(key, data, if_match, if_absent)

    async def _gated(
        self, target: Chunk, op: Callable[[], Awaitable[T]], *, whole: bool = False
    ) -> T:
        """``op()`` (a write of the chunk ``target``) through the write gate, grouped by
        shard; ``whole``: the write may count towards writing the whole shard."""
        loc = target.loc
        if self._gate is None or not loc.inside:
            return await op()
        fmt, shard_key = target.scope.store.format, loc.shard_key
        size: int | None = -1  # not known yet

        def complete(tags: Sequence[Hashable]) -> bool:
            # asked on every arriving write of the shard: counts first, the chunks at most
            # once per shard
            nonlocal size
            if size == -1:
                size = fmt.whole_count(shard_key)
            if size is None or len(tags) < size:
                return False
            return None not in tags and fmt.is_whole(shard_key, tags)

        group = (target.scope.store, shard_key)
        tag = loc.chunk if whole else None
        return await self._gate.run(group, op, tag=tag, complete=complete)

    def _cut_short(self, group: Hashable) -> None:
        """The gate wrote a shard in parts, every writer at its bound:
        ``write_cut_short(chunks)`` if that bound is below the shard's ``chunks``."""
        if self._write_cut_short is None or self._write_flush_at is None:
            return
        store, shard_key = cast(tuple[ShardedAdapter[Any], str], group)
        size = store.format.whole_count(shard_key)
        if size is not None and self._write_flush_at() < size:
            self._write_cut_short(size)

    def _refuse(self, key: str, target: Target) -> None:
        """Raise for the targets no write may reach: shard files, precomputed metadata."""
        if isinstance(target, Hidden):
            raise UnsupportedOperationError(
                f"{key}: a shard file of a sharded precomputed scale cannot be written "
                "through the unsharded view; write its chunks by name"
            )
        if isinstance(target, Node):
            raise UnsupportedOperationError(
                f"{key}: the metadata of a sharded precomputed volume cannot be written "
                "through the unsharded view"
            )

    async def _put_metadata(
        self, key: str, folder: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        await self.folders.node(folder, fresh=True)
        target = await self._route(key)
        dataset = target.dataset if isinstance(target, Node) else None
        if dataset is not None and dataset.map_back is not None:
            return await self._map_back(key, dataset, bytes(data), if_match, if_absent)
        if isinstance(target, Chunk):  # a chunk named like a metadata document
            version = await target.scope.store.set(
                target.rel, data, if_match=inner_version(key, if_match), if_absent=if_absent
            )
            return virtual_version(version)
        self._refuse(key, target)
        if target is None:
            self._refuse_sharded_creation(key, folder, bytes(data))
            if is_group_document(key):
                data = await self._map_back_group(key, folder, bytes(data))
                if if_match is not None and if_match.startswith(VERSION_PREFIX):
                    if_match = inner_version(key, if_match)  # as read: presented rewritten
        return await super()._set(key, data, if_match, if_absent)

    async def _map_back_group(self, key: str, folder: str, data: bytes) -> bytes:
        """A group document written through the view, with the consolidated metadata of
        its sharded arrays mapped back onto their stored documents."""
        real: dict[str, bytes] = {}
        for path in group_arrays(data):
            try:
                validate_key(f"{folder}{path}/{GROUP_DOCUMENT}")
            except InvalidKeyError:
                continue  # names nothing the store can hold
            node = await self.folders.node(f"{folder}{path}/", fresh=True)
            if node.dataset is not None and node.dataset.map_back is not None:
                real[path] = node.source
        return map_back_group(data, real, key) if real else data

    def _refuse_sharded_creation(self, key: str, folder: str, data: bytes) -> None:
        """Refuse metadata that would make ``folder`` a sharded dataset: its writer would
        write whole shards at keys this view reads as chunks."""
        name = key[len(folder) :]
        if OPENERS[name](self.inner, folder, data, self.options) is not None:
            raise UnsupportedOperationError(
                f"{key}: creating a sharded dataset through the unsharded view is refused "
                "(its writer would write whole shards at keys the view reads as inner "
                "chunks). Create it through the wrapped store (zarr-python: "
                "ZarrStore.create_sharded_array, or a pass-through ZarrStore); it then "
                "appears unsharded here."
            )

    async def _map_back(
        self, key: str, dataset: Dataset, written: bytes, if_match: str | None, if_absent: bool
    ) -> str | None:
        """Write metadata written through the view onto the stored sharded document,
        conditionally on the version read (retried on conflict)."""
        assert dataset.map_back is not None
        if if_absent:
            raise ConflictError(f"{key}: object already exists", key=key)
        expected = inner_version(key, if_match)
        conditional = self.inner.supports_conditional_writes
        map_back = dataset.map_back

        async def attempt() -> str | None:
            current = await self.inner.get_object(key)
            if current is None or (expected is not None and current.meta.version != expected):
                error = ConflictError(f"{key}: object is not at version {if_match}", key=key)
                if current is None and expected is None:
                    error = ConflictError(f"{key}: the array was deleted meanwhile", key=key)
                raise _CallerConflict(error)
            new = map_back(bytes(current.data), written)
            version = current.meta.version if conditional else None
            return await self.inner.set(key, new, if_match=version)

        try:
            return virtual_version(await retry_on_conflict(attempt, key))
        except _CallerConflict as exc:
            raise exc.error from None

    async def set_partial_values(
        self, key_start_values: Iterable[tuple[str, int, BytesLike]]
    ) -> None:
        """Patch byte runs into chunks (through their sharded stores) or plain objects;
        metadata documents of datasets cannot be patched."""
        self._check_writable()
        triples = [(validate_key(k), s, v) for k, s, v in key_start_values]
        for key, start, _ in triples:
            if start < 0:
                raise ValueError(f"negative start {start} for key {key!r}")
        self.stats.requests["put"] += len({k for k, _, _ in triples})
        self.stats.bytes_written += sum(len(v) for _, _, v in triples)
        plain: list[tuple[str, int, BytesLike]] = []
        by_scope: dict[int, tuple[Scope, list[tuple[str, int, BytesLike]], list[str]]] = {}
        for key, start, value in triples:
            target = await self._target(key)
            if isinstance(target, Chunk):
                _, runs, keys = by_scope.setdefault(id(target.scope), (target.scope, [], []))
                runs.append((target.rel, start, value))
                keys.append(key)
                continue
            if isinstance(target, Node):
                raise UnsupportedOperationError(
                    f"{key}: metadata of a sharded dataset cannot be patched through the view"
                )
            self._refuse(key, target)
            plain.append((key, start, value))
        jobs: list[tuple[Sequence[str], Awaitable[object]]] = [
            (keys, scope.store.set_partial_values(runs)) for scope, runs, keys in by_scope.values()
        ]
        plain_keys = [k for k, _, _ in plain]
        if plain:
            jobs.append((plain_keys, self.inner.set_partial_values(plain)))
        await self._run_writes(jobs, plain_keys)

    async def erase_values(self, keys: Iterable[str]) -> None:
        """Erase chunks (through their sharded stores: one update per shard) and plain
        objects; erasing a metadata document forgets its folder."""
        keys = [validate_key(k) for k in keys]
        self._check_writable()
        self.stats.requests["delete"] += len(keys)
        targets = [await self._target(key) for key in keys]
        for key, target in zip(keys, targets, strict=True):
            if isinstance(target, Hidden):
                self._refuse(key, target)
        if len(targets) == 1 and isinstance(target := targets[0], Chunk):
            # one chunk (zarr-python deletes chunk by chunk): joins its shard's writes
            store, rel = target.scope.store, target.rel
            await self._gated(target, lambda: store.erase_values([rel]))
            return
        plain: list[str] = []
        by_scope: dict[int, tuple[Scope, list[str], list[str]]] = {}
        for key, target in zip(keys, targets, strict=True):
            if isinstance(target, Chunk):
                _, rels, names = by_scope.setdefault(id(target.scope), (target.scope, [], []))
                rels.append(target.rel)
                names.append(key)
            else:
                plain.append(key)
        jobs: list[tuple[Sequence[str], Awaitable[object]]] = [
            (names, scope.store.erase_values(rels)) for scope, rels, names in by_scope.values()
        ]
        if plain:
            jobs.append((plain, self.inner.erase_values(plain)))
        await self._run_writes(jobs, plain)

    async def _run_writes(
        self, jobs: list[tuple[Sequence[str], Awaitable[object]]], plain: Sequence[str]
    ) -> None:
        """:func:`~asyncshard.fanout.run_writes` of ``jobs`` (per sharded store, and the
        passed-through keys ``plain``), then forget the folders of the metadata documents
        among ``plain``, whatever happened."""
        folders = {f for f in map(folder_of_metadata, plain) if f is not None}
        try:
            await run_writes(jobs)
        finally:
            for folder in folders:
                self.folders.invalidate(folder)

    async def _erase(self, key: str) -> None:
        await self.erase_values([key])

    async def _erase_if_match(self, key: str, version: str) -> None:
        raise UnsupportedOperationError(f"{self!r} cannot delete conditionally")

    async def erase_prefix(self, prefix: str) -> None:
        """Erase every key starting with ``prefix`` as the view shows it.

        A prefix at or above a dataset's folder erases the wrapped store's objects there
        (shards included) in one pass; a prefix inside a dataset erases the keys the view
        lists there (its chunks through the sharded store, so a shard also holding other
        chunks keeps them).
        """
        prefix = validate_prefix(prefix)
        self._check_writable()
        node = await self.folders.find(prefix)
        dataset = None if node is None else node.dataset
        if dataset is not None and prefix.startswith(dataset.folder) and prefix != dataset.folder:
            await self.erase_values([k async for k in self.list_prefix(prefix)])
            return
        try:
            await self.inner.erase_prefix(prefix)
        finally:
            self.folders.invalidate_around(prefix)
