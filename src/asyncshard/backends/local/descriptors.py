"""Reads on the event loop: from the page cache, through descriptors kept open.

A read that the page cache can serve costs less than the hop to a worker thread, so
:class:`InlineReads` serves it on the calling thread; ``RWF_NOWAIT`` makes the read fail
instead of waiting for the disk, and then (or for a read over :data:`INLINE_READ`
bytes) it answers :data:`~asyncshard.store.WOULD_WAIT` and the store uses a thread.

A file read in part (a chunk out of a shard) is likely read again at other offsets, so
its descriptor is kept open in a small LRU (``capacity``). Before each use the path is
``stat``-ed and the descriptor used only if the path still names the same file,
unchanged: device, inode, size, modification and change times. Objects are replaced by
rename and their version token is set before that, so an unchanged inode holds the same
bytes and version; a replaced or deleted file is closed and reopened (or reads as
missing). A reused descriptor thus costs a ``stat`` and a ``preadv`` instead of
``open``, the root check, ``fstat``, ``getxattr``, ``preadv`` and ``close``. Files read
whole are not kept (a flat chunk is rarely read twice soon), but their metadata is, by
the same identity (up to :data:`REMEMBERED_BYTES` of it): a file read whole again skips
the root check, the ``getxattr`` and the building of its metadata (``open``, ``fstat``,
``preadv``, ``close``: what any server pays). Metadata is remembered from a file's
second opening on (:class:`Doorkeeper`): a pass over a dataset (a conversion,
``verify``) opens each file once and leaves nothing behind, whatever its size, while
files read again (a viewer's) are remembered. A file deleted or replaced
by another process stays open until its key is read again or it leaves the LRU; writes,
copies and deletes through the store close it before they start (so the change frees a
deleted file's blocks in its worker thread) and again once they are done.

:meth:`InlineReads.head` answers metadata on the calling thread: for a file whose
metadata is remembered, one ``stat``; else the ``open`` and checks of a read, without
the read. A change in place within the same tick of the file system's clock keeps a
file's identity, so the identity vouches for what was remembered only if the file had
last changed :data:`SETTLED_NS` before (git's rule for racily clean index entries):
``head`` then returns the very metadata object the reads since returned, and anything
else (a file that changed since, or changed shortly before it was remembered) gets a
new object. A caller that keeps the bytes of a read uses them again only while ``head``
returns the metadata object of that read.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple

from asyncshard.backends.local.files import meta_of, tag_of
from asyncshard.backends.local.root import Root
from asyncshard.errors import AsyncShardError
from asyncshard.ranges import ByteRange, resolve
from asyncshard.store import (
    WOULD_WAIT,
    GetResult,
    NowResult,
    ObjectMeta,
    WouldWait,
    check_condition,
)

#: Reads up to this size whose bytes are in the page cache run on the calling thread.
INLINE_READ = 1 << 20
#: Whether this platform reads without waiting (Linux ``RWF_NOWAIT``) and checks open
#: descriptors (``/proc/self/fd``).
NOWAIT = hasattr(os, "RWF_NOWAIT") and hasattr(os, "preadv") and os.path.isdir("/proc/self/fd")
#: Descriptors kept open per store.
DEFAULT_OPEN_FILES = 128
#: Bytes of file metadata remembered by identity per store (forgotten all at once when
#: full): 16,384 entries of short keys.
REMEMBERED_BYTES = 9 * 1024 * 1024
#: What remembering one file's metadata costs beyond its key's characters (measured: the
#: entry, its identity, the metadata with its version and time, the dict's share).
ENTRY_BYTES = 544
#: Bits of the :class:`Doorkeeper` (128 KiB) and the keys it admits before it starts
#: over: two hashes a key, so at most 0.1 % of the keys opened once are remembered.
SEEN_BITS = 1 << 20
SEEN_KEYS = 16384

#: How long ago a file must have last changed for :meth:`InlineReads.head` to vouch for
#: its remembered metadata by its identity (file-system clocks tick in up to 2 s).
SETTLED_NS = 2_000_000_000

Identity = tuple[int, int, int, int, int]


class _Open(NamedTuple):
    fd: int
    identity: Identity
    meta: ObjectMeta


class _Known(NamedTuple):
    """Remembered metadata of a file, by its identity. ``settled``: the file had last
    changed :data:`SETTLED_NS` before it was remembered (a later change shows)."""

    identity: Identity
    meta: ObjectMeta
    settled: bool


def _identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _settled(identity: Identity, seen_at: int) -> bool:
    """Whether the file of ``identity``, seen at ``seen_at`` (``time.time_ns()`` taken
    before its ``stat``), had last changed more than :data:`SETTLED_NS` before."""
    return identity[4] < seen_at - SETTLED_NS


class Doorkeeper:
    """The keys seen once since the last start over (TinyLFU's doorkeeper): a Bloom
    filter of :data:`SEEN_BITS` bits with two hashes, cleared after :data:`SEEN_KEYS`
    new keys. A false "seen" only remembers a file's metadata one opening early."""

    def __init__(self) -> None:
        self._bits = bytearray(SEEN_BITS // 8)
        self._added = 0

    def seen(self, key: str) -> bool:
        """Whether ``key`` was seen before (since the last start over); it is now."""
        h = hash(key)
        a, b = h & (SEEN_BITS - 1), (h >> 32) & (SEEN_BITS - 1)
        bits = self._bits
        if bits[a >> 3] >> (a & 7) & bits[b >> 3] >> (b & 7) & 1:
            return True
        if self._added >= SEEN_KEYS:
            bits[:] = bytes(len(bits))
            self._added = 0
        bits[a >> 3] |= 1 << (a & 7)
        bits[b >> 3] |= 1 << (b & 7)
        self._added += 1
        return False


class InlineReads:
    """Page-cache reads of one store root, with up to ``capacity`` descriptors kept open.

    Thread-safe (a lock covers each read: they never wait for the disk).
    """

    def __init__(self, root: Root, capacity: int = DEFAULT_OPEN_FILES) -> None:
        self.root = root
        self.capacity = capacity
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._metas: dict[str, _Known] = {}
        self._metas_bytes = 0
        self._seen = Doorkeeper()
        self._lock = threading.Lock()
        # a store dropped without close() still closes its descriptors
        weakref.finalize(self, _close_all, self._open)

    def read(self, key: str, byte_range: ByteRange | None, if_match: str | None) -> NowResult:
        """The read, or :data:`WOULD_WAIT` when it would wait for the disk, is large, or
        needs the slow path's resolution (links, errors to report)."""
        with self._lock:
            held = self._open.get(key)
            if held is not None:
                if self._unchanged(key, held):
                    self._open.move_to_end(key)
                    known = self._metas.get(key)  # remembered again once settled
                    meta = held.meta
                    if known is not None and known.identity == held.identity:
                        meta = known.meta
                    return _read(held.fd, meta, byte_range, if_match, key)
                self._drop(key)
            opened = self._open_file(key)
            if not isinstance(opened, _Open):
                return opened
            fd, _, meta = opened
            try:
                result = _read(fd, meta, byte_range, if_match, key)
            except BaseException:
                os.close(fd)
                raise
            if isinstance(result, GetResult) and len(result.data) < meta.size:
                self._keep(key, opened)  # read in part: likely read again
            else:
                os.close(fd)
            return result

    def head(self, key: str) -> ObjectMeta | WouldWait | None:
        """The metadata of ``key`` (``None``: missing), or :data:`WOULD_WAIT` for what
        the thread path must resolve. The remembered object while the file is the one
        it was remembered for and that was settled (see the module); else a new one."""
        known = self._metas.get(key)
        if known is not None and known.settled:
            try:
                st = os.stat(self.root.real() + "/" + key, follow_symlinks=False)
            except OSError:
                pass
            else:
                if _identity(st) == known.identity:
                    return known.meta
        with self._lock:
            opened = self._open_file(key)
        if not isinstance(opened, _Open):
            return opened
        os.close(opened.fd)
        fresh = self._metas.get(key)
        if fresh is not None and fresh.settled and fresh.meta is opened.meta:
            return opened.meta
        return dataclasses.replace(opened.meta)  # equal, but vouches for no bytes

    def _unchanged(self, key: str, held: _Open) -> bool:
        """Whether the path of ``key`` still names the file ``held`` has open, unchanged."""
        try:
            st = os.stat(os.path.join(self.root.real(), key), follow_symlinks=False)
        except OSError:
            return False
        return _identity(st) == held.identity

    def _open_file(self, key: str) -> _Open | WouldWait | None:
        """``key`` opened (checked inside the root) with its metadata; ``None`` when
        missing or not a file.

        The metadata (with the version token, a ``getxattr``) is remembered for the
        file's identity, as a kept descriptor is: a write through a store replaces the
        inode, and a change in place (bytes or token) moves the change time once the
        clock has ticked. A file of a remembered identity was also found inside the root
        when it was remembered, so it is not looked up in ``/proc/self/fd`` again: the
        same inode with the same change time has not moved (a rename changes it)."""
        root = self.root
        seen_at = time.time_ns()
        try:
            fd = root.open_fast(key, check=False)
            if fd is None or fd < 0:
                return None if fd is None else WOULD_WAIT
            try:
                st = os.fstat(fd)
            except OSError:
                os.close(fd)
                return WOULD_WAIT  # the thread path reports it
            identity = _identity(st)
            known = self._metas.get(key)
            fresh: ObjectMeta | None = None
            if (
                known is not None
                and known.identity == identity
                and (known.settled or not _settled(identity, seen_at))
            ):
                # this very file was found inside the root before: no need to look again
                # (remembered again, as settled, once it is)
                if known.settled:
                    return _Open(fd, identity, known.meta)
                # changed within a clock tick or two of being remembered: a delete and a
                # same-size rewrite (the freed inode reused) repeat the identity, so the
                # tag tells whether this is the same file
                fresh = meta_of(key, st, tag_of(fd))
                if fresh.version == known.meta.version:
                    return _Open(fd, identity, known.meta)
            if not root.inside(fd, key):
                return WOULD_WAIT
        except AsyncShardError:
            return WOULD_WAIT  # the thread path raises it, with its full resolution
        try:
            if stat.S_ISREG(st.st_mode):
                meta = fresh or meta_of(key, st, tag_of(fd))
                if known is not None or self._seen.seen(key):
                    self._remember(key, _Known(identity, meta, _settled(identity, seen_at)))
                return _Open(fd, identity, meta)
        except OSError:
            pass
        except BaseException:  # e.g. an mtime no datetime can hold: the thread path says so
            os.close(fd)
            raise
        os.close(fd)
        return WOULD_WAIT  # not a file, or its version token unreadable: the thread path

    def _remember(self, key: str, known: _Known) -> None:
        """Remember ``known`` for ``key``, charged :data:`ENTRY_BYTES` and the key's
        length; everything is forgotten when :data:`REMEMBERED_BYTES` would be passed."""
        metas = self._metas
        if key not in metas:
            charge = ENTRY_BYTES + len(key)
            if self._metas_bytes + charge > REMEMBERED_BYTES:
                metas.clear()
                self._metas_bytes = 0
            self._metas_bytes += charge
        metas[key] = known

    def _keep(self, key: str, opened: _Open) -> None:
        self._open[key] = opened
        while len(self._open) > self.capacity:
            _, old = self._open.popitem(last=False)
            os.close(old.fd)

    def _drop(self, key: str) -> None:
        held = self._open.pop(key, None)
        if held is not None:
            os.close(held.fd)

    def forget(self, keys: Iterable[str]) -> None:
        """Close the descriptors of ``keys`` and forget their metadata (deleted or
        replaced through the store)."""
        with self._lock:
            for key in keys:
                if self._metas.pop(key, None) is not None:
                    self._metas_bytes -= ENTRY_BYTES + len(key)
                if self._open:
                    self._drop(key)

    def close(self) -> None:
        """Close every kept descriptor."""
        with self._lock:
            _close_all(self._open)

    @property
    def open_count(self) -> int:
        """Descriptors kept open now."""
        return len(self._open)


def _close_all(kept: OrderedDict[str, _Open]) -> None:
    while kept:
        _, held = kept.popitem()
        os.close(held.fd)


def _read(
    fd: int, meta: ObjectMeta, byte_range: ByteRange | None, if_match: str | None, key: str
) -> NowResult:
    """Read the range of an open file of ``meta`` without waiting for the disk."""
    if if_match is not None:
        check_condition(key, meta, if_match, False)
    start, end = resolve(byte_range, meta.size)
    if end - start > INLINE_READ:
        return WOULD_WAIT
    buf = bytearray(end - start)
    try:
        if buf and os.preadv(fd, [buf], start, os.RWF_NOWAIT) != len(buf):
            return WOULD_WAIT  # short: partly cached
    except OSError:  # BlockingIOError: not in the page cache; else the thread reports it
        return WOULD_WAIT
    return GetResult(memoryview(buf), meta)
