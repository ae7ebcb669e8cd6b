"""Sorting more numbers than memory should hold: sorted runs on disk, merged in blocks.

A conversion lists objects in whatever order the store gives, but works shard by
shard: the flat chunks of one target shard must come together. :class:`SortedSpill`
takes ``uint64`` codes in any order (a chunk's code puts its shard first, see
:mod:`asyncshard.convert.streamplan`) and gives them back sorted and distinct, in
blocks, holding at most one run (:data:`RUN`) and one block per run on disk
(:data:`BLOCK_BYTES` in all; runs are merged :data:`FANIN` at a time into longer ones
as they pile up), whatever the count: 8 bytes per object on disk, in a
temporary folder removed on :meth:`~SortedSpill.close`. :func:`groups` cuts a sorted
stream into runs of equal ``code // size`` (one shard's chunks), across blocks.
:class:`KeyFile` keeps the keys a pass will delete once it switched, on disk.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["BLOCK_BYTES", "RUN", "Codes", "Cursor", "KeyFile", "SortedSpill", "groups"]

Codes = npt.NDArray[np.uint64]

#: Codes sorted in memory before a run goes to disk (64 KiB).
RUN = 1 << 13
#: Runs of one size merged into one run of the next size, on disk (so a merge reads
#: from at most ``FANIN`` runs a size: about 4 sizes up to 10^9 codes).
FANIN = 32
#: Bytes of the blocks read back from all runs together, at least 1,024 codes a run.
BLOCK_BYTES = 1 << 16
_EMPTY: Codes = np.empty(0, dtype=np.uint64)


class SortedSpill:
    """``uint64`` codes added in any order, read back sorted and distinct.

    Args:
        folder: where run files go (default: a new temporary folder).
    """

    def __init__(self, folder: str | None = None) -> None:
        self._folder = folder
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._pending: list[Codes] = []
        self._held = 0
        self._runs: list[tuple[Path, int, int]] = []  # path, codes, merge level
        self._names = itertools.count()
        self.added = 0

    def add(self, codes: npt.ArrayLike) -> None:
        """Add codes (any order, repeats allowed)."""
        array = np.asarray(codes, dtype=np.uint64).ravel()
        if not array.size:
            return
        self._pending.append(array)
        self._held += array.size
        self.added += array.size
        if self._held >= RUN:
            self._spill()

    def _sorted_pending(self) -> Codes:
        if not self._pending:
            return _EMPTY
        array = _distinct(np.sort(np.concatenate(self._pending)))
        self._pending, self._held = [], 0
        return array

    def _path(self) -> Path:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="asyncshard-spill-", dir=self._folder)
        return Path(self._tmp.name) / f"run{next(self._names)}"

    def _spill(self) -> None:
        array = self._sorted_pending()
        path = self._path()
        array.tofile(path)
        self._runs.append((path, array.size, 0))
        level = 0
        while len(same := [r for r in self._runs if r[2] == level]) >= FANIN:
            merged, size = self._path(), 0
            with merged.open("wb") as out:
                for block in _merge([(p, n) for p, n, _ in same]):
                    block.tofile(out)
                    size += block.size
            for p, _, _ in same:
                p.unlink()
            self._runs = [r for r in self._runs if r[2] != level] + [(merged, size, level + 1)]
            level += 1

    def blocks(self) -> Iterator[Codes]:
        """The codes, sorted and distinct, in blocks (each block sorted, every code of a
        block below every code of the next). Can be read again."""
        if not self._runs:
            self._pending = [self._sorted_pending()]
            self._held = self._pending[0].size
            held = self._pending[0]
            for i in range(0, held.size, RUN):
                yield held[i : i + RUN]
            return
        if self._pending:
            self._spill()
        yield from _merge([(p, n) for p, n, _ in self._runs])

    def close(self) -> None:
        """Remove the run files."""
        self._pending, self._held, self._runs = [], 0, []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> SortedSpill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _distinct(codes: Codes) -> Codes:
    """Sorted ``codes`` without repeats (``np.unique`` hashes in numpy 2.3: 4x slower)."""
    if codes.size < 2:
        return codes
    keep = np.empty(codes.size, dtype=bool)
    keep[0] = True
    np.not_equal(codes[1:], codes[:-1], out=keep[1:])
    return codes if keep.all() else codes[keep]


class _Run:
    """One sorted run file, read a block at a time."""

    def __init__(self, path: Path, size: int, block: int) -> None:
        self.file = path.open("rb")
        self.left = size
        self.block = block
        self.codes = _EMPTY
        self.fill()

    def fill(self) -> None:
        n = min(self.block, self.left)
        self.codes = np.fromfile(self.file, dtype=np.uint64, count=n) if n else _EMPTY
        self.left -= n

    def close(self) -> None:
        self.file.close()


def _merge(runs: list[tuple[Path, int]]) -> Iterator[Codes]:
    """The sorted runs merged: each step takes, from every run's block, the codes up to
    the smallest last code of a block (all codes below it are then loaded) and sorts
    them; the run that gave that bound reads its next block."""
    block = max(1024, BLOCK_BYTES // 8 // len(runs))
    open_runs = [_Run(path, size, block) for path, size in runs]
    try:
        while True:
            live = [r for r in open_runs if r.codes.size]
            if not live:
                return
            bound = min(r.codes[-1] for r in live)
            taken = []
            for run in live:
                cut = int(np.searchsorted(run.codes, bound, side="right"))
                taken.append(run.codes[:cut])
                run.codes = run.codes[cut:]
                if not run.codes.size:
                    run.fill()
            # all codes <= bound: none come later; sorted runs, which timsort merges
            yield _distinct(np.sort(np.concatenate(taken), kind="stable"))
    finally:
        for run in open_runs:
            run.close()


def groups(blocks: Iterator[Codes], size: int) -> Iterator[tuple[int, Codes]]:
    """``(code // size, codes)`` of a sorted stream, one group per distinct quotient,
    in order; a group cut by a block boundary is joined."""
    carry = _EMPTY
    for block in blocks:
        codes = np.concatenate((carry, block)) if carry.size else block
        keys = codes // np.uint64(size)
        starts = np.flatnonzero(np.diff(keys)) + 1
        bounds = [0, *starts.tolist()]
        for lo, hi in itertools.pairwise(bounds):
            yield int(keys[lo]), codes[lo:hi]
        carry = codes[bounds[-1] :]
    if carry.size:
        yield int(carry[0] // np.uint64(size)), carry


def with_done(
    sources: Iterator[Codes], done: Iterator[Codes], size: int
) -> Iterator[tuple[int, Codes | None]]:
    """Each number of the sorted stream ``sources`` with the codes of the sorted stream
    ``done`` under it (``code // size`` equal; ``None`` when there are none): a merge of
    two sorted streams, holding a block of each."""
    done_groups = groups(done, size)
    pending = next(done_groups, None)
    for block in sources:
        for number in block.tolist():
            while pending is not None and pending[0] < number:
                pending = next(done_groups, None)
            yield number, pending[1] if pending is not None and pending[0] == number else None


#: Bytes of kept keys read back at a time (its names are made at once: a MiB of short
#: keys made 10 MB of names, more than the rest of a conversion's memory).
KEYS_READ = 64 * 1024


class KeyFile:
    """Keys kept in an unnamed temporary file (``NUL``-separated: no key holds one),
    read back in batches; the file is gone once closed."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="asyncshard-keys-")  # noqa: SIM115 - closed by close()
        self._pending: list[str] = []
        self.count = 0

    def add(self, key: str) -> None:
        """Keep ``key``."""
        self._pending.append(key)
        self.count += 1
        if len(self._pending) >= 4096:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._file.write("\0".join(self._pending).encode() + b"\0")
            self._pending.clear()

    def batches(self, size: int) -> Iterator[list[str]]:
        """The keys in order, ``size`` at a time (read :data:`KEYS_READ` bytes at a
        time: a block's names are all made at once)."""
        self._flush()
        self._file.seek(0)
        batch: list[str] = []
        carry = b""
        while chunk := self._file.read(KEYS_READ):
            block = carry + chunk
            end = block.rfind(b"\0")  # the names that end in this block
            carry = block[end + 1 :]
            if end < 0:
                continue
            for name in block[:end].decode().split("\0"):
                batch.append(name)
                if len(batch) >= size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def close(self) -> None:
        """Remove the file."""
        self._pending.clear()
        self._file.close()


class Cursor:
    """Membership in a sorted stream of codes, for queries in increasing order."""

    def __init__(self, blocks: Iterator[Codes]) -> None:
        self._blocks = blocks
        self._codes: Codes = np.empty(0, dtype=np.uint64)

    def members(self, block: Codes) -> npt.NDArray[np.bool_]:
        """Which codes of ``block`` (sorted, above every earlier query) are in the stream."""
        if not block.size:
            return np.zeros(0, dtype=bool)
        high = block[-1]
        taken = []
        while True:
            if not self._codes.size:
                nxt = next(self._blocks, None)
                if nxt is None:
                    break
                self._codes = nxt
            cut = int(np.searchsorted(self._codes, high, side="right"))
            taken.append(self._codes[:cut])
            self._codes = self._codes[cut:]
            if self._codes.size:
                break
        if not taken:
            return np.zeros(block.size, dtype=bool)
        return np.isin(block, np.concatenate(taken))

    def has(self, code: int) -> bool:
        """Whether ``code`` (above every earlier query) is in the stream."""
        return bool(self.members(np.array([code], dtype=np.uint64))[0])
