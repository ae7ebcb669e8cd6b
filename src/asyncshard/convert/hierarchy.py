"""Walking a Zarr hierarchy of either format: its groups and arrays, v2 or v3.

A folder holding ``zarr.json`` (v3) or ``.zarray``/``.zgroup`` (v2) is a node; its
metadata is read directly, and only folders that are not arrays are listed (with
``list_dir``), so chunk keys are never listed, even a v2 array's ``0.0.0`` keys that
sit in the array's own folder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from asyncshard.convert.journal import JOURNAL_NAME
from asyncshard.errors import InvalidMetadataError
from asyncshard.sharding.common import read_json
from asyncshard.store import Store

__all__ = ["HierarchyNode", "read_node", "walk_hierarchy"]

V3_META = "zarr.json"
V2_ARRAY, V2_GROUP, V2_ATTRS = ".zarray", ".zgroup", ".zattrs"
V2_CONSOLIDATED = ".zmetadata"
#: The metadata objects of a group folder (consolidated metadata and conversion journals
#: included): not "other files".
_OWN = frozenset({V3_META, V2_GROUP, V2_ATTRS, V2_CONSOLIDATED, JOURNAL_NAME})


@dataclass(frozen=True)
class HierarchyNode:
    """One group or array: ``meta`` is its ``zarr.json`` (v3) or ``.zarray``/``.zgroup``
    (v2); ``attributes`` its user attributes (v3: ``meta["attributes"]``; v2: ``.zattrs``)."""

    path: str
    kind: Literal["group", "array"]
    zarr_format: Literal[2, 3]
    meta: dict[str, Any]
    attributes: dict[str, Any] = field(default_factory=dict)
    #: Keys of the other objects in a group's folder (not its metadata, not subfolders).
    files: list[str] = field(default_factory=list)
    #: Whether a group carries consolidated metadata (v3: ``consolidated_metadata`` in
    #: its ``zarr.json``; v2: a ``.zmetadata`` in its folder).
    consolidated: bool = False


def _attributes(doc: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    attrs = {} if doc is None else doc
    if not isinstance(attrs, dict):
        raise InvalidMetadataError(f"{key}: attributes are not a JSON object")
    return attrs


async def read_node(store: Store, path: str) -> HierarchyNode | None:
    """The group or array at ``path`` (``None`` if there is none), without listing."""
    path = path.strip("/")
    return await _node(store, f"{path}/" if path else "")


async def _node(store: Store, prefix: str) -> HierarchyNode | None:
    """The node whose folder is ``prefix``, from its metadata objects (read at once, so
    that an array's folder, which may hold millions of v2 chunk keys, is never listed)."""
    path = prefix.rstrip("/")
    names = (V3_META, V2_ARRAY, V2_GROUP, V2_ATTRS)
    v3, array, group, attrs = await asyncio.gather(*(read_json(store, prefix + n) for n in names))
    if v3 is not None:
        kind = v3.get("node_type")
        if v3.get("zarr_format") != 3 or kind not in ("group", "array"):
            raise InvalidMetadataError(f"{prefix}{V3_META}: neither a v3 group nor array")
        attributes = _attributes(v3.get("attributes"), prefix + V3_META)
        consolidated = isinstance(v3.get("consolidated_metadata"), dict)
        return HierarchyNode(path, kind, 3, v3, attributes, consolidated=consolidated)
    if array is not None:
        return HierarchyNode(path, "array", 2, array, _attributes(attrs, prefix + V2_ATTRS))
    if group is not None:
        return HierarchyNode(path, "group", 2, group, _attributes(attrs, prefix + V2_ATTRS))
    return None


async def walk_hierarchy(
    store: Store, formats: frozenset[int] = frozenset({2, 3})
) -> list[HierarchyNode]:
    """Every group and array of the hierarchy in ``store`` of the Zarr ``formats``, in
    depth-first order (a group before what it holds). Each folder costs its metadata
    reads (sent together) and, unless it is an array, one ``list_dir``."""
    found: list[HierarchyNode] = []

    async def walk(prefix: str) -> None:
        node = await _node(store, prefix)
        if node is not None and node.kind == "array":
            if node.zarr_format in formats:
                found.append(node)
            return
        keys, prefixes = await store.list_dir(prefix)
        if node is not None:
            node.files.extend(k for k in sorted(keys) if k[len(prefix) :] not in _OWN)
            if prefix + V2_CONSOLIDATED in keys:
                node = replace(node, consolidated=True)
            if node.zarr_format in formats:
                found.append(node)
        for child in sorted(prefixes):
            await walk(child)

    await walk("")
    return found
