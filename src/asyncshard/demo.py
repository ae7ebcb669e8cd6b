"""A short self-checking demo of the Store API on a local folder."""

from __future__ import annotations

import os

from asyncshard.backends.local import LocalStore
from asyncshard.errors import ConflictError
from asyncshard.ranges import Range, Suffix


async def run_demo(folder: str | os.PathLike[str]) -> list[str]:
    """Write, read, range-read, conditionally write and list; return a readable report."""
    report: list[str] = []
    async with LocalStore(folder) as store:
        chunks = {f"demo/c/{i}/{j}": bytes([i * 4 + j]) * 4096 for i in range(4) for j in range(4)}
        for key, value in chunks.items():
            await store.set(key, value)
        report.append(f"wrote {len(chunks)} chunks of 4096 bytes to {store.root}")

        pairs = [(key, Range(100, 164)) for key in chunks]
        parts = await store.get_partial_values(pairs)
        assert all(bytes(p or b"") == chunks[k][100:164] for (k, _), p in zip(pairs, parts, strict=True))
        report.append(f"read 64-byte ranges of all {len(parts)} chunks: bytes match")

        tail = await store.get("demo/c/3/3", Suffix(8))
        report.append(f"last 8 bytes of demo/c/3/3: {bytes(tail or b'').hex()}")

        meta = await store.head("demo/c/0/0")
        assert meta is not None
        await store.set("demo/c/0/0", b"new", if_match=meta.version)
        try:
            await store.set("demo/c/0/0", b"stale", if_match=meta.version)
            report.append("ERROR: a stale conditional write was accepted")
        except ConflictError as exc:
            report.append(f"stale conditional write refused: {exc}")

        keys, prefixes = await store.list_dir("demo/c")
        report.append(f"list_dir('demo/c') -> {len(keys)} keys, prefixes {prefixes}")
        report.append(f"requests by kind: {dict(store.stats.requests)}")
    return report
