"""The sharded datasets an :class:`~asyncshard.views.unsharded.UnshardedView` recognises.

A dataset is found by its metadata document in a folder and presents, for readers that
do not know sharding, rewritten metadata plus one sharded store (a
:class:`~asyncshard.sharding.engine.ShardedAdapter`) per group of chunks:

* a sharded **Zarr v3** array (``zarr.json`` with ``sharding_indexed``): the metadata
  with the inner chunks as chunks (:func:`unsharded_metadata`), one
  :class:`~asyncshard.sharding.zarr.ZarrShardedStore` whose keys are the array's keys;
* a **precomputed volume** with sharded scales (``info``): the ``info`` without
  ``sharding``, one :class:`~asyncshard.sharding.precomputed.Uint64ShardedStore` per
  sharded scale whose keys are the unsharded chunk names in the scale's folder.

Openers take the raw metadata bytes and return ``None`` for anything that is not a
sharded dataset they can present (which is then served as it is). A dataset whose
rewritten metadata can be written back (Zarr: :func:`~asyncshard.formats.zarr3.metadata.
map_back_metadata`) carries a ``map_back`` function; precomputed volumes have none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asyncshard.cache import LoadingCache
from asyncshard.errors import AsyncShardError
from asyncshard.formats.jsondoc import parse_json_object
from asyncshard.formats.precomputed.volume import VolumeInfo, unsharded_info_bytes
from asyncshard.formats.zarr3.documents import (
    consolidated_arrays,
    map_back_consolidated,
    map_back_metadata,
    unsharded_consolidated,
    unsharded_metadata,
)
from asyncshard.formats.zarr3.metadata import is_sharded, parse_zarr3_array
from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER, ShardedAdapter
from asyncshard.sharding.volume import scale_store
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Store

__all__ = [
    "OPENERS",
    "Dataset",
    "Scope",
    "group_arrays",
    "is_dataset_document",
    "map_back_group",
    "open_precomputed",
    "open_zarr",
    "present_group",
]


@dataclass(frozen=True)
class Scope:
    """One sharded store of a dataset: view keys starting with ``base`` are its keys with
    ``base`` in front (``base`` is ``""`` when they are the same keys)."""

    base: str
    store: ShardedAdapter[Any]

    def key(self, view_key: str) -> str | None:
        """The store's key of a view key, ``None`` outside this scope."""
        return view_key[len(self.base) :] if view_key.startswith(self.base) else None


#: ``(stored metadata, metadata written through the view)`` -> the metadata to store.
MapBack = Callable[[bytes, bytes], bytes]


@dataclass(frozen=True)
class Dataset:
    """A sharded dataset rooted at ``folder``: its rewritten metadata and sharded stores.

    ``map_back`` turns metadata written through the view into the metadata to store
    (``None``: the metadata cannot be written through the view).
    """

    folder: str
    metadata_key: str
    document: bytes
    scopes: tuple[Scope, ...]
    map_back: MapBack | None = None

    def same_stores(self, other: Dataset) -> bool:
        """Whether ``other``'s sharded stores address the same chunks the same way (then
        this dataset's stores, and their cached indexes, can serve ``other``)."""
        if len(self.scopes) != len(other.scopes):
            return False
        for mine, theirs in zip(self.scopes, other.scopes, strict=True):
            layout = getattr(mine.store, "layout", None)
            if mine.base != theirs.base or layout is None:
                return False
            if type(mine.store) is not type(theirs.store):
                return False
            if layout != getattr(theirs.store, "layout", None):
                return False
        return True


@dataclass(frozen=True)
class DatasetOptions:
    """How datasets are opened: the shared caches and the recheck window."""

    cache: LoadingCache
    recheck_after: float = DEFAULT_RECHECK_AFTER
    data_cache: LoadingCache | None = None
    lean_reads: bool = True

    def store_options(self) -> dict[str, Any]:
        """Keyword arguments of the datasets' sharded stores."""
        return {
            "cache": self.cache,
            "recheck_after": self.recheck_after,
            "data_cache": self.data_cache,
            "lean_reads": self.lean_reads,
        }


#: ``(inner, folder, raw metadata, options)`` -> the dataset, or ``None``.
Opener = Callable[[Store, str, bytes, DatasetOptions], Dataset | None]


def _object(raw: bytes, key: str) -> dict[str, Any] | None:
    try:
        return parse_json_object(raw, key)
    except AsyncShardError:
        return None


def is_dataset_document(raw: bytes) -> bool:
    """Whether metadata names a dataset (an array or a volume, not a group): nothing
    nests below it, so the search for datasets stops at its folder."""
    doc = _object(raw, "metadata")
    if doc is None:
        return False
    return doc.get("node_type") == "array" or "scales" in doc or "@type" in doc


def open_zarr(inner: Store, folder: str, raw: bytes, options: DatasetOptions) -> Dataset | None:
    """The dataset of a sharded Zarr v3 array's ``zarr.json``."""
    doc = _object(raw, folder + "zarr.json")
    if doc is None or doc.get("node_type") != "array" or not is_sharded(doc):
        return None
    try:
        layout = parse_zarr3_array(doc, key_prefix=folder)
        document = json.dumps(unsharded_metadata(doc), indent=2).encode()
    except AsyncShardError:
        return None  # not a layout we can unshard: served as it is
    store = ZarrShardedStore(inner, layout, **options.store_options())
    key = folder + "zarr.json"
    return Dataset(folder, key, document, (Scope("", store),), _zarr_map_back(key))


def _zarr_map_back(key: str) -> MapBack:
    def map_back(stored: bytes, written: bytes) -> bytes:
        real = parse_json_object(stored, key)
        doc = map_back_metadata(real, parse_json_object(written, key))
        return json.dumps(doc, indent=2).encode()

    return map_back


def open_precomputed(
    inner: Store, folder: str, raw: bytes, options: DatasetOptions
) -> Dataset | None:
    """The dataset of a precomputed volume ``info`` with at least one sharded scale."""
    doc = _object(raw, folder + "info")
    if doc is None or not isinstance(doc.get("scales"), list):
        return None
    try:
        info = VolumeInfo.from_json(doc)
        scopes = tuple(
            Scope(
                f"{folder}{scale.key}/",
                scale_store(inner, info, scale, path=folder, named=True, **options.store_options()),
            )
            for scale in info.scales
            if scale.sharding is not None
        )
        document = unsharded_info_bytes(doc)
    except (AsyncShardError, ValueError):
        return None  # not a volume we can unshard: served as it is
    if not scopes:
        return None
    return Dataset(folder, folder + "info", document, scopes)


#: Metadata file name -> opener, tried in this order in each folder.
OPENERS: dict[str, Opener] = {"zarr.json": open_zarr, "info": open_precomputed}


# -- groups: consolidated metadata --------------------------------------------------------
#
# A Zarr group's ``zarr.json`` may carry the metadata of its members (``consolidated_
# metadata``), which readers use instead of the members' own documents. Through a view,
# the sharded arrays among them must look unsharded too, and what is written back must
# name them sharded again.


def present_group(raw: bytes) -> bytes | None:
    """A group ``zarr.json`` with its consolidated sharded arrays unsharded; ``None``
    when there is nothing to rewrite (not JSON, not a group, no sharded array)."""
    doc = _object(raw, "zarr.json")
    if doc is None or doc.get("node_type") != "group":
        return None
    rewritten = unsharded_consolidated(doc)
    return None if rewritten is None else json.dumps(rewritten, indent=2).encode()


def group_arrays(raw: bytes) -> list[str]:
    """Paths of the arrays in a group ``zarr.json``'s consolidated metadata."""
    doc = _object(raw, "zarr.json")
    if doc is None or doc.get("node_type") != "group":
        return []
    return consolidated_arrays(doc)


def map_back_group(raw: bytes, real: dict[str, bytes], key: str) -> bytes:
    """A group ``zarr.json`` written through a view, its consolidated sharded arrays
    (``real``: path -> stored document) mapped back."""
    doc = parse_json_object(raw, key)
    stored = {path: parse_json_object(data, path) for path, data in real.items()}
    return json.dumps(map_back_consolidated(doc, stored), indent=2).encode()
