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
sharded dataset they can present (which is then served as it is).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asyncshard.cache import IndexCache
from asyncshard.errors import AsyncShardError
from asyncshard.formats.jsondoc import parse_json_object
from asyncshard.formats.precomputed.volume import VolumeInfo, unsharded_info_bytes
from asyncshard.formats.zarr3.metadata import is_sharded, parse_zarr3_array, unsharded_metadata
from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER, ShardedAdapter
from asyncshard.sharding.volume import scale_store
from asyncshard.sharding.zarr import ZarrShardedStore
from asyncshard.store import Store

__all__ = ["OPENERS", "Dataset", "Scope", "is_dataset_document", "open_precomputed", "open_zarr"]


@dataclass(frozen=True)
class Scope:
    """One sharded store of a dataset: view keys starting with ``base`` are its keys with
    ``base`` in front (``base`` is ``""`` when they are the same keys)."""

    base: str
    store: ShardedAdapter

    def key(self, view_key: str) -> str | None:
        """The store's key of a view key, ``None`` outside this scope."""
        return view_key[len(self.base) :] if view_key.startswith(self.base) else None


@dataclass(frozen=True)
class Dataset:
    """A sharded dataset rooted at ``folder``: its rewritten metadata and sharded stores."""

    folder: str
    metadata_key: str
    document: bytes
    scopes: tuple[Scope, ...]


@dataclass(frozen=True)
class Options:
    """How datasets are opened: the shared caches and the recheck window."""

    cache: IndexCache
    recheck_after: float = DEFAULT_RECHECK_AFTER
    data_cache: IndexCache | None = None

    def store_options(self) -> dict[str, Any]:
        """Keyword arguments of the datasets' sharded stores."""
        return {
            "cache": self.cache,
            "recheck_after": self.recheck_after,
            "data_cache": self.data_cache,
        }


#: ``(inner, folder, raw metadata, options)`` -> the dataset, or ``None``.
Opener = Callable[[Store, str, bytes, Options], Dataset | None]


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


def open_zarr(inner: Store, folder: str, raw: bytes, options: Options) -> Dataset | None:
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
    return Dataset(folder, folder + "zarr.json", document, (Scope("", store),))


def open_precomputed(inner: Store, folder: str, raw: bytes, options: Options) -> Dataset | None:
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
