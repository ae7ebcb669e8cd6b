"""zarr-vectors stores: which of their arrays are sharded, and how flat ones are keyed.

A zarr-vectors store keeps one group per resolution level (``0``, ``1``, ...; the group
carries the ``zarr_vectors_level`` attribute). Inside a level, zarr-vectors' own
``shard_store`` shards only the *spatial* arrays, one cell per spatial chunk
(``vertices``, ``vertex_fragments``, ``link_fragments``, ``vertices_<kind>``,
``vertex_attributes/<name>``, ``fragment_attributes/<name>``,
``links/<delta>/<offsets>``, ``link_attributes/<name>/<delta>/<offsets>``); the
object-level arrays (``object_index/*``, ``object_attributes/*``, ``groups``, ...)
stay flat. Its flat arrays use ``c/i/j/k`` keys: its presence rebuild lists
``<array>/c/`` only. :func:`spatial` mirrors ``_is_per_chunk_array`` of zarr-vectors
0.9 (``zarr_vectors/core/arrays.py``).
"""

from __future__ import annotations

from typing import Literal

from asyncshard.errors import InvalidMetadataError
from asyncshard.sharding.common import read_json
from asyncshard.store import Store

__all__ = ["LEVEL_ATTRIBUTE", "Role", "VectorRoles", "spatial"]

#: The attribute of a zarr-vectors resolution-level group.
LEVEL_ATTRIBUTE = "zarr_vectors_level"

#: ``spatial``: zarr-vectors shards it; ``object``: zarr-vectors keeps it flat.
Role = Literal["spatial", "object"]

_SPATIAL = frozenset({"vertices", "vertex_fragments", "link_fragments"})


def spatial(name: str) -> bool:
    """Whether the array at ``name`` (relative to its level group) is a spatial array."""
    if name in _SPATIAL:
        return True
    parts = name.split("/")
    if len(parts) == 1:
        return name.startswith("vertices_")
    if len(parts) == 2:
        return parts[0] in ("vertex_attributes", "fragment_attributes")
    if len(parts) == 3:
        return parts[0] == "links"
    return len(parts) == 4 and parts[0] == "link_attributes"


class VectorRoles:
    """The zarr-vectors role of arrays of one store (``None``: not in a zarr-vectors level).

    An array belongs to the nearest ancestor group with :data:`LEVEL_ATTRIBUTE`; each
    group's ``zarr.json`` is read once.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._levels: dict[str, bool] = {}

    async def _is_level(self, group: str) -> bool:
        if group not in self._levels:
            try:
                doc = await read_json(self.store, f"{group}/zarr.json" if group else "zarr.json")
            except InvalidMetadataError:
                doc = None
            attributes = doc.get("attributes") if doc is not None else None
            self._levels[group] = isinstance(attributes, dict) and LEVEL_ATTRIBUTE in attributes
        return self._levels[group]

    async def role(self, path: str) -> Role | None:
        """The role of the array at ``path`` (relative to the store)."""
        parts = path.split("/") if path else []
        for depth in range(len(parts) - 1, -1, -1):
            if await self._is_level("/".join(parts[:depth])):
                return "spatial" if spatial("/".join(parts[depth:])) else "object"
        return None
