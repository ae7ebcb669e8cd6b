"""What each folder of a store holds, for an unsharded view: a sharded dataset or nothing.

A folder's metadata documents (``zarr.json``, ``info``: :data:`~asyncshard.views.
datasets.OPENERS`) are read once and remembered as a :class:`Node` for ``ttl`` seconds
(single-flight per folder, LRU over ``max_folders`` folders). A key's dataset is the one
in the outermost folder above it that holds one, among the nearest ``max_depth`` folders.

Writers that change metadata call :meth:`Folders.invalidate`: the node is reloaded on
its next use, and a load that was already running when the metadata changed is not
remembered (it may have read the old document). A reloaded document that opens a
dataset with the same layout keeps the old dataset's sharded stores, so their cached
indexes survive attribute updates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

from cachetools import LRUCache

from asyncshard.store import WOULD_WAIT, Store, WouldWait
from asyncshard.views.datasets import OPENERS, Dataset, DatasetOptions, is_dataset_document

__all__ = ["Folders", "Node", "folder_of_metadata"]


def folder_of_metadata(key: str) -> str | None:
    """The folder (``""`` or ending in ``/``) whose metadata document ``key`` is, or
    ``None`` when ``key`` is no metadata document name."""
    folder, sep, name = key.rpartition("/")
    return folder + sep if name in OPENERS else None


@dataclass
class Node:
    """What one folder holds: a sharded dataset or nothing; ``source`` is the raw metadata
    it was opened from. ``terminal``: the folder holds a dataset of some kind, so no
    folder below it can hold another one."""

    dataset: Dataset | None = None
    version: str | None = None
    source: bytes = b""
    loaded_at: float = 0.0
    terminal: bool = False


class Folders:
    """The nodes of ``inner``'s folders, cached (see the module docstring)."""

    def __init__(
        self, inner: Store, options: DatasetOptions, *, ttl: float, max_folders: int, max_depth: int
    ) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        self.inner = inner
        self.options = options
        self.ttl = ttl
        self.max_depth = max_depth
        self._nodes: LRUCache[str, Node] = _Nodes(max_folders)
        self._loading: dict[str, asyncio.Task[Node]] = {}
        self._generation = 0  # bumped by every invalidation
        self._epoch = 0  # bumped by every invalidation and every node (re)loaded

    async def node(self, folder: str, *, fresh: bool = False) -> Node:
        """The node of ``folder``; ``fresh``: loaded now (or by a load running now)."""
        node = self._nodes.get(folder)
        if not fresh and node is not None and time.monotonic() - node.loaded_at < self.ttl:
            return node
        task = self._loading.get(folder)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.get_running_loop().create_task(self._load(folder))
            self._loading[folder] = task
        return await asyncio.shield(task)

    async def _load(self, folder: str) -> Node:
        generation = self._generation
        try:
            names = list(OPENERS)
            raws = await asyncio.gather(*(self.inner.get_object(folder + n) for n in names))
            old = self._nodes.get(folder)
            previous = None if old is None else old.dataset
            node = Node()
            for name, raw in zip(names, raws, strict=True):
                if raw is None:
                    continue
                data = bytes(raw.data)
                if previous is not None and old is not None and old.source == data:
                    # unchanged: keep the stores and their cached indexes
                    node = Node(previous, raw.meta.version, data, terminal=True)
                    break
                dataset = OPENERS[name](self.inner, folder, data, self.options)
                if dataset is not None:
                    if previous is not None and previous.same_stores(dataset):
                        dataset = Dataset(
                            dataset.folder,
                            dataset.metadata_key,
                            dataset.document,
                            previous.scopes,
                            dataset.map_back,
                        )
                        previous = None  # its stores live on
                    node = Node(dataset, raw.meta.version, data, terminal=True)
                    break
                node.terminal = node.terminal or is_dataset_document(data)
            node.loaded_at = time.monotonic()
            if generation == self._generation:  # no metadata changed while we read
                self._nodes[folder] = node
                self._epoch += 1
                if previous is not None and node.dataset is not previous:
                    _forget_cached(previous)  # its stores are dropped: so are their shards
            return node
        finally:
            if self._loading.get(folder) is asyncio.current_task():
                del self._loading[folder]

    def find_now(self, path: str) -> tuple[Node | None, float] | WouldWait:
        """:meth:`find` from remembered nodes alone, and the moment (``time.monotonic``)
        until which that answer holds unless :attr:`generation` changes first;
        :data:`WOULD_WAIT` when a folder on the way must be (re)loaded."""
        now = time.monotonic()
        until = float("inf")
        for folder in self._above(path):
            node = self._nodes.get(folder)
            if node is None or now - node.loaded_at >= self.ttl:
                return WOULD_WAIT
            until = min(until, node.loaded_at + self.ttl)
            if node.dataset is not None:
                return node, until
            if node.terminal:
                return None, until
        return None, until

    @property
    def generation(self) -> int:
        """Bumped whenever an answer of :meth:`find_now` may change: a folder invalidated
        or a node loaded (a reload after its TTL or its eviction may read other metadata)."""
        return self._epoch

    async def find(self, path: str) -> Node | None:
        """The node of the outermost folder holding a sharded dataset among the nearest
        ``max_depth`` folders above the key ``path`` (or, for a folder ``path`` ending in
        ``/``, up to itself)."""
        for folder in self._above(path):
            node = await self.node(folder)
            if node.dataset is not None:
                return node
            if node.terminal:
                return None  # inside an unsharded array or volume: nothing to rewrite
        return None

    def _above(self, path: str) -> Iterator[str]:
        """The nearest ``max_depth`` folders above ``path``, outermost first."""
        parts = path.split("/")
        for depth in range(max(0, len(parts) - self.max_depth), len(parts)):
            yield "/".join(parts[:depth]) + "/" if depth else ""

    def invalidate(self, folder: str) -> None:
        """The metadata of ``folder`` changed (or may have): reload it on its next use."""
        self._generation += 1
        self._epoch += 1
        node = self._nodes.get(folder)
        if node is not None:
            node.loaded_at = float("-inf")  # kept: a reload may reuse its stores
        self._loading.pop(folder, None)

    def invalidate_around(self, prefix: str) -> None:
        """:meth:`invalidate` every folder below ``prefix`` and every folder ``prefix``
        lies in (objects starting with ``prefix`` were erased)."""
        folders = {f for f in [*self._nodes.keys(), *self._loading] if _related(f, prefix)}
        for folder in folders:
            self.invalidate(folder)
            self.forget_cached(folder)
        self._generation += 1
        self._epoch += 1

    def forget_cached(self, folder: str | None = None) -> None:
        """Drop the cached indexes and kept shards of the dataset in ``folder`` (every
        remembered dataset by default): its objects were erased, or the view closes."""
        folders = list(self._nodes.keys()) if folder is None else [folder]
        for name in folders:
            node = self._nodes.get(name)
            if node is not None and node.dataset is not None:
                _forget_cached(node.dataset)


def _forget_cached(dataset: Dataset) -> None:
    for scope in dataset.scopes:
        scope.store.forget_cached()


class _Nodes(LRUCache[str, Node]):
    """The remembered nodes; a dataset's node pushed out drops its stores' caches (a
    later use of the folder opens the dataset again, with new stores)."""

    def popitem(self) -> tuple[str, Node]:
        folder, node = super().popitem()
        if node.dataset is not None:
            _forget_cached(node.dataset)
        return folder, node


def _related(folder: str, prefix: str) -> bool:
    return folder.startswith(prefix) or prefix.startswith(folder)
