"""Walking a Zarr hierarchy of either format: its groups and arrays, v2 or v3.

Folders are listed with ``list_dir``; a folder holding ``zarr.json`` (v3) or
``.zarray``/``.zgroup`` (v2) is a node. The walk does not descend into arrays, so chunk
folders are never listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from asyncshard.errors import InvalidMetadataError
from asyncshard.store import Store

__all__ = ["HierarchyNode", "walk_hierarchy"]

V3_META = "zarr.json"
V2_ARRAY, V2_GROUP, V2_ATTRS = ".zarray", ".zgroup", ".zattrs"


@dataclass(frozen=True)
class HierarchyNode:
    """One group or array: ``meta`` is its ``zarr.json`` (v3) or ``.zarray``/``.zgroup``
    (v2); ``attributes`` its user attributes (v3: ``meta["attributes"]``; v2: ``.zattrs``)."""

    path: str
    kind: Literal["group", "array"]
    zarr_format: Literal[2, 3]
    meta: dict[str, Any]
    attributes: dict[str, Any] = field(default_factory=dict)


async def _json(store: Store, key: str) -> dict[str, Any] | None:
    raw = await store.get(key)
    if raw is None:
        return None
    try:
        doc = json.loads(bytes(raw))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidMetadataError(f"{key}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise InvalidMetadataError(f"{key}: not a JSON object")
    return doc


def _attributes(doc: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    attrs = {} if doc is None else doc
    if not isinstance(attrs, dict):
        raise InvalidMetadataError(f"{key}: attributes are not a JSON object")
    return attrs


async def _node(store: Store, prefix: str, keys: set[str]) -> HierarchyNode | None:
    path = prefix.rstrip("/")
    if prefix + V3_META in keys:
        doc = await _json(store, prefix + V3_META)
        assert doc is not None
        kind = doc.get("node_type")
        if doc.get("zarr_format") != 3 or kind not in ("group", "array"):
            raise InvalidMetadataError(f"{prefix}{V3_META}: neither a v3 group nor array")
        attrs = _attributes(doc.get("attributes"), prefix + V3_META)
        return HierarchyNode(path, kind, 3, doc, attrs)
    for name, kind in ((V2_ARRAY, "array"), (V2_GROUP, "group")):
        if prefix + name in keys:
            meta = await _json(store, prefix + name)
            assert meta is not None
            attrs_key = prefix + V2_ATTRS
            found = await _json(store, attrs_key) if attrs_key in keys else None
            node_kind: Literal["group", "array"] = "array" if kind == "array" else "group"
            return HierarchyNode(path, node_kind, 2, meta, _attributes(found, attrs_key))
    return None


async def walk_hierarchy(
    store: Store, formats: frozenset[int] = frozenset({2, 3})
) -> list[HierarchyNode]:
    """Every group and array of the hierarchy in ``store`` of the Zarr ``formats``, in
    depth-first order (a group before what it holds)."""
    found: list[HierarchyNode] = []

    async def walk(prefix: str) -> None:
        keys, prefixes = await store.list_dir(prefix)
        node = await _node(store, prefix, set(keys))
        if node is not None:
            if node.zarr_format in formats:
                found.append(node)
            if node.kind == "array":
                return
        for child in sorted(prefixes):
            await walk(child)

    await walk("")
    return found
