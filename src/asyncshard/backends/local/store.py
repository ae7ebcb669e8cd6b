"""LocalStore: the Store primitives over a root folder (the design: the package docstring).

Reads are here; :mod:`.root` confines keys to the root, :mod:`.writes` writes and
copies, :mod:`.deletes` deletes and :mod:`.listing` lists. Blocking calls run in worker
threads, a batch in one thread.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from asyncshard.backends.local import deletes, listing
from asyncshard.backends.local.descriptors import (
    DEFAULT_OPEN_FILES,
    NOWAIT,
    InlineReads,
)
from asyncshard.backends.local.files import (
    TEMP_MAX_AGE,
    TOKEN_PREFIX,
    data_of,
    is_missing,
    range_of,
    to_completion,
)
from asyncshard.backends.local.root import READ_FLAGS, FolderFds, Root
from asyncshard.backends.local.writes import FileWriter
from asyncshard.errors import StoreConfigError
from asyncshard.limits import LoopSemaphores
from asyncshard.ranges import ByteRange
from asyncshard.store import (
    WOULD_WAIT,
    BytesLike,
    Data,
    GetResult,
    NowResult,
    ObjectMeta,
    Store,
    WouldWait,
)

T = TypeVar("T")

#: ``get_many`` reads a file on the event loop (no thread hop) when it is at most this
#: size and its bytes are in the page cache, up to :data:`INLINE_BATCH_BYTES` a batch.
INLINE_FILE_BYTES = 64 * 1024
#: Bytes a ``get_many`` batch reads on the event loop at most (see above).
INLINE_BATCH_BYTES = 1024 * 1024

#: Default ``batch_threads``: as many as cores, between 2 and 4. On 2 cores, 8 batches of
#: 512 files in the page cache read in 0.35 s with 2 threads, 0.46 s with 6 (the default
#: executor's); from a cold cache, 2 or 3 threads are also the fastest.
DEFAULT_BATCH_THREADS = max(
    2, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 4)
)


class LocalStore(Store):
    """A Store over a local folder (created on first write).

    Args:
        root: the folder.
        durable: ``fsync`` every write before it is renamed into place.
        must_exist: the root folder must exist now (``StoreConfigError`` otherwise), as
            for a read-only store that should not read an empty tree by mistake.
        temp_max_age: seconds after which a leftover temporary file is removed by
            writes into its folder; ``None`` leaves them to :meth:`cleanup_temp_files`.
        inline_reads: read up to 1 MiB whose bytes are in the page cache on the event
            loop (Linux ``RWF_NOWAIT``: it never waits for the disk) instead of in a
            worker thread, keeping up to ``open_files`` descriptors of files read in
            part open (see :mod:`.descriptors`); ``False`` where even opening a file may
            be slow (NFS).
        open_files: descriptors of files read in part kept open for the next read
            (``0``: none kept).
        batch_threads: worker threads reading batches (``get_many``) at once. A batch
            of files in the page cache is Python work under the GIL, which more threads
            only fight over (:data:`DEFAULT_BATCH_THREADS`); raise it where each read
            waits on the network (NFS).

    Other keywords (``max_gap``, ``max_request``, ``max_concurrency``, ``max_overfetch``)
    are the range caps every :class:`~asyncshard.store.Store` takes.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durable: bool = True,
        must_exist: bool = False,
        temp_max_age: float | None = TEMP_MAX_AGE,
        inline_reads: bool = True,
        open_files: int = DEFAULT_OPEN_FILES,
        batch_threads: int = DEFAULT_BATCH_THREADS,
        **options: Any,
    ):
        super().__init__(**options)
        self._open_options: dict[str, Any] = {
            "durable": durable,
            "temp_max_age": temp_max_age,
            "inline_reads": inline_reads,
            "open_files": open_files,
            "batch_threads": batch_threads,
            **options,
        }
        self.root = Path(os.path.abspath(root))
        self.durable = durable
        self.temp_max_age = temp_max_age
        if open_files < 0:
            raise ValueError("open_files must be >= 0")
        if batch_threads <= 0:
            raise ValueError("batch_threads must be > 0")
        self._batch_threads = LoopSemaphores(batch_threads)
        self.inline_reads = inline_reads and NOWAIT
        self._root = Root(self.root, repr(self))
        self._inline = InlineReads(self._root, open_files)
        self._writer = FileWriter(self._root, durable=durable, temp_max_age=temp_max_age)
        if must_exist and not self.root.is_dir():
            raise StoreConfigError(f"no such folder: {self.root}")

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    @property
    def url(self) -> str:
        """``file://`` and the root folder."""
        return self.root.as_uri()

    @property
    def open_options(self) -> dict[str, Any]:
        """The options the store was opened with."""
        return dict(self._open_options)

    @property
    def supports_conditional_deletes(self) -> bool:
        return True

    def version_pins_bytes(self, version: str) -> bool:
        # a per-write token; ``inode-mtime-size`` (no user xattrs) can come back for other
        # bytes after a delete and a new write of the same size in one clock tick
        return version.startswith(TOKEN_PREFIX)

    # -- reads --------------------------------------------------------------------------

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        now = self._get_now(key, byte_range, if_match)
        if not isinstance(now, WouldWait):
            return now
        return await asyncio.to_thread(self._read, key, byte_range, if_match)

    def _get_now(self, key: str, byte_range: ByteRange | None, if_match: str | None) -> NowResult:
        """A read whose bytes are in the page cache, on the calling thread: no thread hop
        (which costs more than the read itself); see :mod:`.descriptors`."""
        if not self.inline_reads:
            return WOULD_WAIT
        return self._inline.read(key, byte_range, if_match)

    @property
    def supports_head_now(self) -> bool:
        return self.inline_reads

    def _head_now(self, key: str) -> ObjectMeta | WouldWait | None:
        """A file's metadata on the calling thread (one ``stat`` for a file whose metadata
        is remembered; see :meth:`.descriptors.InlineReads.head`)."""
        if not self.inline_reads:
            return WOULD_WAIT
        return self._inline.head(key)

    def _read(
        self, key: str, byte_range: ByteRange | None, if_match: str | None, path: str = ""
    ) -> GetResult | None:
        root = self._root
        fd = -1 if path else root.open_fast(key)
        if fd is None:
            return None
        if fd < 0:
            fd = root.open_checked(path or root.resolve(key), key, "read")
            if fd is None:
                return None
        return self._read_open(fd, key, byte_range, if_match, path or key)

    def _read_open(
        self,
        fd: int,
        key: str,
        byte_range: ByteRange | None,
        if_match: str | None,
        folder: str,
        name: str = "",
    ) -> GetResult | None:
        """Read the range of the open file ``fd`` (closed here); ``None`` unless a file.
        ``folder`` and ``name`` (when it is not already the whole path) name it in errors."""

        def read(fd: int) -> GetResult | None:
            found = range_of(fd, key, byte_range, if_match)
            if found is None:
                return None
            meta, start, end = found
            return GetResult(os.pread(fd, end - start, start) if end > start else b"", meta)

        return self._closing(fd, key, folder, name, read)

    def _closing(
        self, fd: int, key: str, folder: str, name: str, read: Callable[[int], T | None]
    ) -> T | None:
        """``read(fd)``, then close ``fd``; a vanished file reads as ``None``, other
        errors name the key and the path."""
        try:
            return read(fd)
        except OSError as exc:
            if is_missing(exc):
                return None
            path = os.path.join(folder, name) if name else folder
            raise self._root.error(exc, key, "read", path) from exc
        finally:
            os.close(fd)

    def _read_batch(self, keys: Sequence[str], now: bool = False) -> list[Data | None]:
        """Whole objects (bytes alone), each opened relative to its folder's checked
        descriptor; the common case (a regular file) inline, without a call per key.

        With ``now`` (on the event loop: no thread hop), only while each file is a
        regular one of at most :data:`INLINE_FILE_BYTES` whose bytes are in the page
        cache (``RWF_NOWAIT``), up to :data:`INLINE_BATCH_BYTES`: the objects of a prefix
        of ``keys``, the rest left to the worker thread (which also reports errors)."""
        out: list[Data | None] = []
        append = out.append
        budget = INLINE_BATCH_BYTES
        with FolderFds(self._root) as folders:
            folder_of = folders.get
            for key in keys:
                parent, _, name = key.rpartition("/")
                _, dfd = folder_of(parent, key)
                if dfd is None:
                    append(None)
                    continue
                try:
                    fd = os.open(name, READ_FLAGS, dir_fd=dfd)
                except OSError as exc:  # missing; else a link or an error: the per-key
                    if is_missing(exc) and exc.errno != errno.ELOOP:
                        append(None)
                    elif now:
                        return out
                    else:
                        append(self._read_in(key, folders))
                    continue
                try:
                    st = os.fstat(fd)
                    size = st.st_size
                    if st.st_mode & 0o170000 != 0o100000 or not size:  # not S_ISREG, empty
                        if now:
                            return out
                        append(data_of(fd))
                    elif not now:
                        append(os.pread(fd, size, 0))
                    elif size > INLINE_FILE_BYTES or size > budget:
                        return out
                    else:
                        buf = bytearray(size)
                        if os.preadv(fd, [buf], 0, os.RWF_NOWAIT) != size:
                            return out  # partly in the page cache
                        budget -= size
                        append(bytes(buf))
                except OSError:
                    if now:  # BlockingIOError: not in the page cache; else the thread says
                        return out
                    append(self._read_in(key, folders))  # names the error (or vanished)
                finally:
                    os.close(fd)
        return out

    def _read_in(self, key: str, folders: FolderFds) -> Data | None:
        parent, _, name = key.rpartition("/")
        folder, dfd = folders.get(parent, key)
        if dfd is None:
            return None
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the name is a link (an alias): full resolution
                found = self._read(key, None, None)
                return None if found is None else found.data
            if is_missing(exc):
                return None
            raise self._root.error(exc, key, "read", os.path.join(folder, name)) from exc
        return self._closing(fd, key, folder, name, data_of)  # bytes alone: no version

    async def _get_many(self, keys: Sequence[str]) -> list[Data | None]:
        """Small files in the page cache on the event loop (a thread hop and the GIL
        handed back and forth per file cost more than the reads); the rest of the batch
        in one worker thread."""
        done = self._read_batch(keys, now=True) if self.inline_reads else []
        if len(done) == len(keys):
            return done
        async with self._batch_threads.get():  # held until the thread ends, even if cancelled
            rest = await self._bounded(to_completion(self._read_batch, keys[len(done) :]))
        return done + rest

    async def _head(self, key: str) -> ObjectMeta | None:
        return await asyncio.to_thread(self._root.meta, key)

    # -- writes and copies --------------------------------------------------------------

    async def _set(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        return await self._replacing(
            [key], asyncio.to_thread(self._writer.write, key, data, if_match, if_absent)
        )

    async def _set_many(self, items: Sequence[tuple[str, BytesLike]]) -> list[str | None]:
        return await self._replacing(
            [k for k, _ in items],
            self._bounded(asyncio.to_thread(self._writer.write_batch, items)),
        )

    async def _copy(self, source: str, target: str) -> int | None:
        return await self._replacing([target], asyncio.to_thread(self._writer.link, source, target))

    async def _copy_many(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        return await self._replacing(
            [t for _, t in pairs],
            self._bounded(asyncio.to_thread(self._writer.link_batch, pairs)),
        )

    async def _replacing(self, keys: Sequence[str], change: Awaitable[T]) -> T:
        """Await ``change`` (writes, copies or deletes of ``keys``) with no descriptor of
        ``keys`` kept: a replaced or deleted file's space is freed at once, by the change
        in its worker thread (closing the last descriptor of a deleted file frees its
        blocks: 10 ms for 16 MiB on ext4, not a wait for the event loop). Descriptors
        kept by reads meanwhile are closed afterwards."""
        try:
            self._inline.forget(keys)
        except BaseException:
            if inspect.iscoroutine(change):
                change.close()  # never started
            raise
        try:
            return await change
        finally:
            self._inline.forget(keys)

    def stream_buffer(self, size: int, part_size: int) -> int:
        return min(size, part_size)  # each part is written to the temp file as it comes

    async def _set_stream(self, key: str, parts: AsyncIterable[BytesLike]) -> str | None:
        """A temp file written part by part, renamed over the object at the end (as
        every write); a failure or cancellation removes it, a killed process leaves it
        hidden until swept (see :meth:`cleanup_temp_files`)."""
        writer = self._writer
        staged = await to_completion(writer.stage, key)
        try:
            async for part in parts:
                await to_completion(writer.append, staged, part)
        except BaseException:
            writer.discard(staged)
            raise
        return await self._replacing([key], asyncio.to_thread(writer.commit, staged))

    async def cleanup_temp_files(self, max_age: float = TEMP_MAX_AGE) -> int:
        """Remove temporary files older than ``max_age`` seconds in the whole tree.

        They are what writes killed before their rename leave behind. Folders left empty
        are removed, as deletes do. Returns how many files were removed.
        """
        if max_age < 0:
            raise ValueError("max_age must be >= 0")
        return await asyncio.to_thread(self._writer.sweep_tree, max_age)

    # -- deletes ------------------------------------------------------------------------

    async def _erase(self, key: str) -> None:
        await self._replacing([key], to_completion(deletes.unlink_many, self._root, [key]))

    async def _erase_many(self, keys: Sequence[str]) -> None:
        """One worker-thread hop for the whole batch; ``delete`` counts one per key."""
        self._count_request("delete", len(keys))
        unlink = to_completion(deletes.unlink_many, self._root, keys)
        await self._replacing(keys, self._bounded(unlink))

    async def _prune(self, prefix: str) -> None:
        await asyncio.to_thread(deletes.prune_below, self._root, prefix)

    async def _erase_if_match(self, key: str, version: str) -> None:
        unlink = asyncio.to_thread(deletes.unlink_if_match, self._root, key, version)
        await self._replacing([key], unlink)

    async def _close(self) -> None:
        self._inline.close()

    # -- listing ------------------------------------------------------------------------

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        """Streams: a batch of keys per worker-thread hop, as the folders are read."""
        keys = listing.KeyStream(self._root, prefix)
        try:
            while True:
                batch = await asyncio.to_thread(keys.take)
                for key in batch:
                    yield key
                if len(batch) < listing.BATCH:
                    return
        finally:
            keys.close()

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        return await asyncio.to_thread(listing.scan, self._root, prefix)
