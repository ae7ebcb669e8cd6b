"""The precomputed half of the unsharded view: a volume's sharded scales by chunk name.

Built on :class:`~asyncshard.precomputed.volume_store.UnshardedScaleView` (one volume,
keys relative to its folder): a key ``<folder><scale key>/<chunk name>`` of a sharded
scale is read out of its shard (gzip data decoded: unsharded chunks are stored plain),
shard files of sharded scales are hidden, and the ``info`` is served without
``sharding`` (:func:`~asyncshard.precomputed.volume_store.unsharded_info`).
"""

from __future__ import annotations

import json

from asyncshard.cache import IndexCache
from asyncshard.errors import AsyncShardError
from asyncshard.precomputed.volume_store import (
    PrecomputedVolume,
    ShardedScale,
    UnshardedScaleView,
    unsharded_info,
)
from asyncshard.ranges import ByteRange
from asyncshard.server.unshard import Dataset
from asyncshard.store import GetResult, ObjectMeta, Store


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
        """A sharded scale's folder lists chunk names instead of shard files."""
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
        names = await scale.list_chunk_names()
        return sorted(kept + [prefix + n for n in names]), prefixes


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
        document = json.dumps(unsharded_info(doc), indent=2).encode()
        return PrecomputedDataset(folder, volume), document
    except AsyncShardError:
        return None  # not a volume we can unshard: served as it is
