"""``remove_tree``: delete every object below a prefix, listed as a stream."""

from __future__ import annotations

from asyncshard.store import Store

__all__ = ["remove_tree_async"]

#: Keys deleted per batch (S3 deletes up to 1,000 in one request).
_BATCH = 1000


async def remove_tree_async(store: Store, prefix: str = "") -> int:
    """Delete every object of ``store`` whose key starts with ``prefix`` (``""``: all),
    in batches as they are listed (no key list held whole); the number deleted.

    Args:
        store: the store to delete from.
        prefix: the key prefix (a folder is ``"name/"``; ``"a"`` also matches ``ab``).
    """
    removed = 0
    batch: list[str] = []
    async for key in store.list_prefix(prefix):
        batch.append(key)
        if len(batch) >= _BATCH:
            await store.erase_values(batch)
            removed += len(batch)
            batch = []
    if batch:
        await store.erase_values(batch)
        removed += len(batch)
    await store.prune(prefix.rpartition("/")[0])
    return removed
