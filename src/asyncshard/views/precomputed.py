"""The precomputed half of the unsharded view: a volume's sharded scales by chunk name.

Built on :class:`~asyncshard.sharding.volume.UnshardedScaleView` (one volume,
keys relative to its folder): a key ``<folder><scale key>/<chunk name>`` of a sharded
scale is read out of its shard (gzip data decoded: unsharded chunks are stored plain),
shard files of sharded scales are hidden, and the ``info`` is served without
``sharding``, rendered by
:func:`~asyncshard.sharding.volume.unsharded_info_bytes` (the same bytes as
:class:`~asyncshard.sharding.volume.UnshardedScaleView` serves).

Listing a sharded scale's folder does **not** enumerate its chunk names: that would read
the shard index and every minishard index of every shard of the scale (thousands of
requests for a real volume), and viewers never list chunks; they compute chunk names from
the ``info``. The listing shows the folder's other files (shard files hidden, like a
stray file named like a chunk) and sub-folders; the folder exists even if that is empty.
"""

from __future__ import annotations

import json

from asyncshard.cache import IndexCache
from asyncshard.errors import AsyncShardError
from asyncshard.ranges import ByteRange
from asyncshard.sharding.volume import (
    PrecomputedVolume,
    ShardedScale,
    UnshardedScaleView,
    unsharded_info_bytes,
)
from asyncshard.store import GetResult, ObjectMeta, Store
from asyncshard.views.unsharded import Dataset


class PrecomputedDataset:
    """A precomputed volume with at least one sharded scale, rooted at ``folder``."""

    def __init__(self, folder: str, volume: PrecomputedVolume) -> None:
        self.folder = folder
        self.view = UnshardedScaleView(volume)
        self.scales: dict[str, ShardedScale] = {
            key: volume.scale(key) for key in volume.sharded_scale_keys
        }

    def _split(self, key: str) -> tuple[ShardedScale, str] | None:
        head, sep, name = key[len(self.folder) :].rpartition("/")
        scale = self.scales.get(head) if sep else None
        return None if scale is None else (scale, name)

    def claims(self, key: str) -> bool:
        split = self._split(key)
        if split is None:
            return False
        scale, name = split
        return (
            scale.scale.parse_chunk_name(name) is not None
            or scale.store.spec.parse_shard_filename(name) is not None
        )

    async def get_object(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        return await self.view.get_object(key[len(self.folder) :], byte_range, if_match=if_match)

    async def head(self, key: str) -> ObjectMeta | None:
        return await self.view.head(key[len(self.folder) :])

    async def list_dir(self, prefix: str) -> tuple[list[str], list[str]] | None:
        """A sharded scale's folder without its shard files, and no chunk names (see the
        module docstring): one listing of the folder, no index read."""
        scale = self.scales.get(prefix[len(self.folder) :].rstrip("/"))
        if scale is None or not prefix.endswith("/"):
            return None
        keys, prefixes = await self.view.inner.list_dir(prefix)
        spec = scale.store.spec
        kept = [
            k
            for k in keys
            if spec.parse_shard_filename(k[len(prefix) :]) is None
            and scale.scale.parse_chunk_name(k[len(prefix) :]) is None
        ]
        return kept, prefixes

    def has_folder(self, prefix: str) -> bool:
        """A sharded scale's folder (declared by the ``info``) exists even when it lists
        empty: only hidden shards, or nothing written yet."""
        return prefix.endswith("/") and prefix[len(self.folder) : -1] in self.scales


def open_precomputed(
    inner: Store, folder: str, raw: bytes, cache: IndexCache
) -> tuple[Dataset, bytes] | None:
    """A dataset if ``raw`` is the ``info`` of a volume with a sharded scale."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("scales"), list):
        return None
    try:
        volume = PrecomputedVolume(inner, doc, path=folder.rstrip("/"), cache=cache)
        if not volume.sharded_scale_keys:
            return None
        document = unsharded_info_bytes(doc)
        return PrecomputedDataset(folder, volume), document
    except AsyncShardError:
        return None  # not a volume we can unshard: served as it is
