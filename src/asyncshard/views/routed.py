"""RoutedView: the base of :class:`~asyncshard.views.unsharded.UnshardedView` that decides
what serves each key.

A key is routed from the nearest folders above it (:class:`~asyncshard.views.folders.
Folders`) to its dataset's metadata, a chunk of one of its sharded stores, a hidden
shard file, or the wrapped store (:data:`~asyncshard.views.targets.Target`). Routes
found from remembered folders alone (the no-wait path) are remembered per key until a
folder they came from expires or any metadata is invalidated.
"""

from __future__ import annotations

import time

from asyncshard.cache import LoadingCache
from asyncshard.store import Store, WouldWait
from asyncshard.views.datasets import DatasetOptions
from asyncshard.views.folders import Folders, Node, folder_of_metadata
from asyncshard.views.targets import Chunk, Target, target_in
from asyncshard.wrapper import WrapperStore

__all__ = ["MAX_ROUTES", "RoutedView"]

#: Keys whose routes (and chunk answers) the no-wait path remembers.
MAX_ROUTES = 16384


class RoutedView(WrapperStore):
    """A Store over ``inner`` that routes each key to what serves it.

    Args:
        inner: any Store.
        options: how the datasets' sharded stores are opened.
        folders: the nodes of ``inner``'s folders.
        recheck_metadata: reload a folder when its metadata document is routed, and a
            dataset when a chunk key lies outside it.
    """

    def __init__(
        self, inner: Store, options: DatasetOptions, folders: Folders, *, recheck_metadata: bool
    ) -> None:
        super().__init__(inner)
        self.options = options
        self.folders = folders
        self.recheck_metadata = recheck_metadata
        self._routes: dict[str, tuple[Target, float, int]] = {}

    @property
    def cache(self) -> LoadingCache:
        """The index cache shared by the datasets' sharded stores."""
        return self.options.cache

    @property
    def metadata_ttl(self) -> float:
        """Seconds a folder's metadata is trusted."""
        return self.folders.ttl

    @property
    def max_depth(self) -> int:
        """Folders above a key searched for its dataset."""
        return self.folders.max_depth

    async def _route(self, key: str) -> Target:
        """What serves ``key`` (see :data:`Target`)."""
        node = await self.folders.find(key)
        return None if node is None else self._target_in(node, key)

    @staticmethod
    def _target_in(node: Node, key: str) -> Target:
        """What serves ``key`` in the folder ``node`` found for it."""
        if node.dataset is None:
            return None
        if key == node.dataset.metadata_key:
            return node
        return target_in(node, key)

    async def _target(self, key: str) -> Target:
        """:meth:`_route`, rechecking metadata first where ``recheck_metadata`` asks: a
        metadata document's folder is reloaded; a chunk outside its dataset reloads the
        dataset once (it may have grown)."""
        if not self.recheck_metadata:
            return await self._route(key)
        folder = folder_of_metadata(key)
        if folder is not None:
            await self.folders.node(folder, fresh=True)
        target = await self._route(key)
        if isinstance(target, Chunk) and not target.loc.inside:
            assert target.node.dataset is not None
            await self.folders.node(target.node.dataset.folder, fresh=True)
            target = await self._route(key)
        return target

    def _route_now(self, key: str) -> tuple[Target, float] | WouldWait:
        """:meth:`_route` from remembered folders alone (:data:`WOULD_WAIT` if one must
        be loaded), and until when (``time.monotonic``) it holds. Answers are remembered
        per key (up to :data:`MAX_ROUTES` keys) until a folder they came from expires or
        any metadata is invalidated: a viewer asks for the same chunks again and again,
        and routing is most of a cached read."""
        folders = self.folders
        known = self._routes.get(key)
        if known is not None:
            target, until, generation = known
            if generation == folders.generation and time.monotonic() < until:
                return target, until
        generation = folders.generation  # before the lookup: a change during it counts
        found = folders.find_now(key)
        if isinstance(found, WouldWait):
            return found
        node, until = found
        target = None if node is None else self._target_in(node, key)
        if len(self._routes) >= MAX_ROUTES:
            self._routes.clear()
        self._routes[key] = (target, until, generation)
        return target, until
