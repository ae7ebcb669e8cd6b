"""LocalStore: objects as files below a root folder.

* Reads seek to the range and read only it; blocking calls run in worker threads.
* Writes go to a temporary file in the destination folder and are renamed over the
  object, so a failure at any point leaves the previous object intact and no temporary
  file behind. Folders are created on demand; a failed write removes the folders it
  created, and a delete prunes the folders it left empty, so listings never show a
  prefix without keys (as on object stores).
* ``copy`` makes a hard link (under a temp name renamed over the target): no bytes
  move, and deleting the source later frees nothing on disk.
* Batches (``get_many``, ``set_many``, ``copy_many``) take one worker thread each instead of one per
  object; a batch of writes is made durable by one ``syncfs`` of the file system before
  its renames instead of one ``fsync`` per file (group commit: the same guarantee,
  data on disk before any object points at it).
* Versions never repeat: every write stores a random token in the temp file's
  ``user.asyncshard.version`` xattr before its rename, and the version is ``t<token>``.
  Where the file system has no user xattrs the version is ``inode-mtime_ns-size`` in hex,
  and each write (under the folder lock) makes its mtime later than the replaced
  object's, so a reused inode with an unticked coarse clock cannot repeat a version.
  Conditional writes compare the version under an exclusive ``flock`` on the
  destination folder, which also excludes other processes using asyncshard; every
  rename into place and every conditional delete happens under that lock, so a
  conditional delete never removes a file written after its check.
* Objects are regular files. A local folder cannot hold both ``a`` and ``a/b``: writing
  either when the other exists raises ``InvalidKeyError``.
* A write killed before its rename (``kill -9``, a power cut) leaves its temporary file
  ``.asyncshard-tmp-*``, hidden from listings. A temporary file older than
  ``temp_max_age`` (one hour) is stale: the first write into its folder (then again at
  most once per ``temp_max_age`` per folder) removes the stale ones there, and
  :meth:`LocalStore.cleanup_temp_files` sweeps the whole tree. A live writer keeps its
  file's modification time fresh while it writes and renames it moments later, so the
  age threshold never takes a file from under a writer in another process.
* Errors are typed: a name too long for the file system reads as missing and cannot be
  written (``InvalidKeyError``); a refused access raises ``StorePermissionError`` naming
  the path; any other file-system failure raises ``StoreBackendError`` (the ``OSError``
  is its ``__cause__``). No ``OSError`` escapes; opening with ``must_exist=True`` makes
  a missing root folder a ``StoreConfigError`` at once.

Links: every key is resolved (``realpath``) and refused unless it lies inside the root;
the root is resolved once, as soon as it exists. Then the check is repeated on what was
actually opened: the path of the open descriptor (``/proc/self/fd``) must lie inside the
root, for reads (fast and slow path), heads, the temp file a write creates, the folder
a write renames in (the rename goes through that folder's locked descriptor), the folder
a delete unlinks from and both ends of a copy. So swapping a folder on the path for a
link to outside, at any moment, cannot lead a read, write, delete or copy outside; it
makes the operation fail with a typed error. A link inside the root
to an object inside the root is an alias: reads and writes go to its target, a delete
removes the link. Listings show only what the API accepts: regular files (or links to
them inside the root) and folders whose names are valid key segments; links to folders
are not followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import os
import stat
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from cachetools import TTLCache

from asyncshard.errors import (
    AsyncShardError,
    ConflictError,
    InvalidKeyError,
    StoreBackendError,
    StoreConfigError,
    StorePermissionError,
)
from asyncshard.ranges import ByteRange, resolve
from asyncshard.store import (
    BytesLike,
    GetResult,
    ObjectMeta,
    Store,
    check_condition,
    validate_key,
)

T = TypeVar("T")

TMP_PREFIX = ".asyncshard-tmp-"
#: Age (seconds since the last write to it) from which a temporary file is stale.
TEMP_MAX_AGE = 3600.0
#: Folders remembered as recently swept (per store), so that writes do not rescan them.
_SWEPT_FOLDERS = 4096
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)
#: errnos that mean "no such object" on reads: a name too long to exist, a link loop (or
#: a link where the checked path had a file: ``O_NOFOLLOW``).
_MISSING_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP})
#: Attempts to create a temp file while concurrent deletes prune its folder.
_CREATE_ATTEMPTS = 8


#: Extended attribute holding an object's version token (random, written with the object).
VERSION_XATTR = "user.asyncshard.version"
#: errnos of ``getxattr`` meaning "no token here": none set, or no xattrs on this file system.
_NO_TOKEN_ERRNOS = frozenset({errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM})


def _new_token() -> str:
    """A fresh version token: 128 random bits, never reused for another write."""
    return os.urandom(16).hex()


def _set_token(fd: int, token: str) -> bool:
    """Store ``token`` on the open file; ``False`` where the file system has no user xattrs."""
    try:
        os.setxattr(fd, VERSION_XATTR, token.encode())
    except OSError as exc:
        if exc.errno in _NO_TOKEN_ERRNOS:
            return False
        raise
    return True


def _token(target: int | str) -> str | None:
    """The version token of an open file or a (not followed) path, if it has one."""
    try:
        if isinstance(target, int):
            return os.getxattr(target, VERSION_XATTR).decode("ascii")
        return os.getxattr(target, VERSION_XATTR, follow_symlinks=False).decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None


def _meta(key: str, st: os.stat_result, token: str | None = None) -> ObjectMeta:
    version = f"t{token}" if token else f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"
    modified = datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)
    return ObjectMeta(key, st.st_size, version, modified)


def _overlaps(folder: str, prefix: str) -> bool:
    """Whether keys below ``folder`` (ending in ``/``) can start with ``prefix``."""
    return folder.startswith(prefix) or prefix.startswith(folder)


def _within(path: str, root: str) -> bool:
    """Whether the resolved ``path`` is ``root`` or lies below it."""
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


def _is_missing(exc: OSError) -> bool:
    return isinstance(exc, _MISSING) or exc.errno in _MISSING_ERRNOS


def _valid_name(name: str) -> bool:
    """Whether a file or folder name can be a key segment (no backslash, ...)."""
    try:
        validate_key(name)
    except InvalidKeyError:
        return False
    return True


def _find_syncfs() -> Callable[[int], int] | None:
    """Linux ``syncfs(2)`` through libc, or ``None`` where there is none."""
    try:
        func: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return func


_SYNCFS = _find_syncfs()


def _sync_file_system(folder: str) -> None:
    """Write every dirty page of the file system holding ``folder`` to disk."""
    assert _SYNCFS is not None
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), folder)
    finally:
        os.close(fd)


#: Reads whose bytes are in the page cache, up to this size, run on the event loop.
INLINE_READ = 1 << 20
_NOWAIT = hasattr(os, "RWF_NOWAIT") and hasattr(os, "preadv") and os.path.isdir("/proc/self/fd")
_BLOCKS: object = object()  # "this read would block (or needs the slow path): use a thread"
#: Whether ``/proc/self/fd`` tells the path of an open file (Linux): the fast read path.
_PROC_FD = os.path.isdir("/proc/self/fd")
_FAST_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _range_of(
    fd: int, key: str, byte_range: ByteRange | None, if_match: str | None
) -> tuple[ObjectMeta, int, int] | None:
    """The metadata of an open file and the clamped ``(start, end)`` to read from it;
    ``None`` unless it is a regular file; ``ConflictError`` when ``if_match`` fails."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return None
    meta = _meta(key, st, _token(fd))
    check_condition(key, meta, if_match, False)
    start, end = resolve(byte_range, meta.size)
    return meta, start, end


def _mtime_ns(meta: ObjectMeta) -> int:
    """The ``mtime_ns`` inside a token-less version ``inode-mtime-size``."""
    return int((meta.version or "0-0-0").split("-")[1], 16)


@contextmanager
def _opened(path: str) -> Iterator[int]:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_no_follow(path: str, flags: int) -> int:
    # O_NONBLOCK: opening a FIFO must not hang; regular files ignore the flag.
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


def _sweep(folder: str, max_age: float) -> int:
    """Remove the temporary files directly in ``folder`` older than ``max_age`` seconds."""
    cutoff = time.time() - max_age
    removed = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if not entry.name.startswith(TMP_PREFIX):
                continue
            with contextlib.suppress(FileNotFoundError):  # another sweeper was first
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
    return removed


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
            worker thread; ``False`` where even opening a file may be slow (NFS).
        max_gap, max_request, max_concurrency: as for every Store.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durable: bool = True,
        must_exist: bool = False,
        temp_max_age: float | None = TEMP_MAX_AGE,
        inline_reads: bool = True,
        **options: int,
    ):
        super().__init__(**options)
        self._open_options: dict[str, Any] = {
            "durable": durable,
            "temp_max_age": temp_max_age,
            "inline_reads": inline_reads,
            **options,
        }
        self.root = Path(os.path.abspath(root))
        self.durable = durable
        self.temp_max_age = temp_max_age
        self.inline_reads = inline_reads and _NOWAIT
        self._resolved_root: str | None = None
        self._swept: TTLCache[str, bool] = TTLCache(_SWEPT_FOLDERS, temp_max_age or 1.0)
        self._swept_lock = threading.Lock()
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

    # -- paths --------------------------------------------------------------------------

    def _real_root(self) -> str:
        """The root with links resolved; cached once the root exists.

        The root is created by the first write; until then it is resolved on every call,
        since a folder or link appearing there could change the answer.
        """
        real = self._resolved_root
        if real is None:
            real = os.path.realpath(self.root)
            if os.path.isdir(real):
                self._resolved_root = real
        return real

    def _resolve(self, key: str) -> str:
        """The real path of ``key``; refuses any path that resolves outside the root."""
        root = self._real_root()
        try:
            real = os.path.realpath(os.path.join(root, key))
        except OSError as exc:  # a link changed while it was being resolved
            raise self._error(exc, key, "resolve", os.path.join(root, key)) from exc
        if not _within(real, root):
            raise InvalidKeyError(f"invalid key {key!r}: resolves outside the store root")
        return real

    def _check_opened(self, fd: int, key: str, *, close: bool = True) -> None:
        """Refuse a file or folder opened outside the root (closing ``fd`` unless ``close``
        is false). The check is on the open descriptor (``/proc/self/fd``), so a path
        swapped after it was resolved cannot lead outside."""
        if not _PROC_FD:
            return
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as exc:
            if close:
                os.close(fd)
            raise self._error(exc, key, "open", key) from exc
        if not _within(real, self._real_root()):
            if close:
                os.close(fd)
            raise InvalidKeyError(f"invalid key {key!r}: resolves outside the store root")

    def _open_checked(self, path: str, key: str, action: str) -> int | None:
        """Open the resolved ``path`` of ``key`` for reading (the last component not
        followed) and check the descriptor lies inside the root; ``None`` if missing."""
        try:
            fd = _open_no_follow(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            if _is_missing(exc):
                return None
            raise self._error(exc, key, action, path) from exc
        self._check_opened(fd, key)
        return fd

    def _file_in_the_way(self, key: str) -> str | None:
        """The key prefix of ``key`` that exists as a file, if any (for error messages)."""
        root = self._real_root()
        parts = key.split("/")
        for n in range(1, len(parts)):
            prefix = "/".join(parts[:n])
            if os.path.isfile(os.path.join(root, prefix)):
                return prefix
        return None

    def _error(self, exc: OSError, key: str, action: str, path: str) -> AsyncShardError:
        """The asyncshard error for an unexpected ``OSError`` on ``key``."""
        detail = str(exc) if exc.filename else f"{exc} ({path})"
        if isinstance(exc, PermissionError):
            return StorePermissionError(
                f"{self!r}: permission denied on {action} of {key!r}: {detail}"
            )
        return StoreBackendError(f"{self!r}: {action} of {key!r} failed: {detail}")

    def _write_error(self, exc: OSError, key: str, path: str) -> AsyncShardError:
        if exc.errno == errno.ENAMETOOLONG:
            return InvalidKeyError(f"invalid key {key!r}: too long a name for the file system")
        if isinstance(exc, IsADirectoryError):
            return InvalidKeyError(f"invalid key {key!r}: a folder of that name exists")
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            culprit = self._file_in_the_way(key)
            where = f" ({culprit!r} is an object, so it cannot be a folder)" if culprit else ""
            return InvalidKeyError(f"invalid key {key!r}: a file of that name exists{where}")
        return self._error(exc, key, "write", path)

    # -- reads --------------------------------------------------------------------------

    def _open_fast(self, key: str) -> int | None:
        """Open ``key`` for reading without :func:`os.path.realpath` (a Python loop with an
        ``lstat`` per path component, most of a small read's cost): open it directly (the
        last component not followed), then check the file actually opened lies inside the
        root through ``/proc/self/fd``. ``None`` when missing; ``-1`` when the fast path
        does not apply (no ``/proc``, the name itself is a link): resolve the slow way."""
        if not _PROC_FD:
            return -1
        root = self._real_root()
        try:
            fd = os.open(os.path.join(root, key), _FAST_READ_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the name is a link (an alias): the slow path
                return -1
            if _is_missing(exc):
                return None
            raise self._error(exc, key, "read", os.path.join(root, key)) from exc
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            os.close(fd)
            return -1
        if not _within(real, root):  # through a link to outside the root
            os.close(fd)
            raise InvalidKeyError(f"invalid key {key!r}: resolves outside the store root")
        return fd

    def _read(
        self, key: str, byte_range: ByteRange | None, if_match: str | None, path: str = ""
    ) -> GetResult | None:
        fd = -1 if path else self._open_fast(key)
        if fd is None:
            return None
        if fd < 0:
            fd = self._open_checked(path or self._resolve(key), key, "read")
            if fd is None:
                return None
        try:
            found = _range_of(fd, key, byte_range, if_match)
            if found is None:
                return None
            meta, start, end = found
            return GetResult(os.pread(fd, end - start, start) if end > start else b"", meta)
        except OSError as exc:
            if _is_missing(exc):
                return None
            raise self._error(exc, key, "read", path or key) from exc
        finally:
            os.close(fd)

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        if self.inline_reads:
            cached = self._read_cached(key, byte_range, if_match)
            if cached is not _BLOCKS:
                return cached  # type: ignore[return-value]
        return await asyncio.to_thread(self._read, key, byte_range, if_match)

    def _read_cached(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | object | None:
        """A small read whose bytes are in the page cache, on the event loop: no thread
        hop (which costs more than the read itself). ``RWF_NOWAIT`` makes the read fail
        instead of waiting for the disk; then, and for reads over :data:`INLINE_READ`
        bytes, :data:`_BLOCKS` sends it to a worker thread."""
        try:
            fd = self._open_fast(key)
        except AsyncShardError:
            return _BLOCKS  # let the thread path raise it, with its full resolution
        if fd is None:
            return None
        if fd < 0:
            return _BLOCKS
        try:
            found = _range_of(fd, key, byte_range, if_match)
            if found is None:
                return None
            meta, start, end = found
            if end - start > INLINE_READ:
                return _BLOCKS
            buf = bytearray(end - start)
            if buf and os.preadv(fd, [buf], start, os.RWF_NOWAIT) != len(buf):
                return _BLOCKS  # short: changed meanwhile, or partly cached
            return GetResult(memoryview(buf), meta)
        except BlockingIOError:
            return _BLOCKS  # not in the page cache: the disk would be waited for
        except OSError:
            return _BLOCKS  # the thread path reports it
        finally:
            os.close(fd)

    @staticmethod
    def _meta_at(path: str, key: str, *, folder_error: bool = False) -> ObjectMeta | None:
        """The object at the resolved ``path``: ``None`` if missing or not a file.

        With ``folder_error`` a folder raises ``IsADirectoryError`` (a write cannot
        replace it) instead of reading as missing.
        """
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError as exc:
            if _is_missing(exc):
                return None
            raise
        if folder_error and stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        return _meta(key, st, _token(path)) if stat.S_ISREG(st.st_mode) else None

    def _stat(self, key: str) -> ObjectMeta | None:
        path = self._resolve(key)
        fd = self._open_checked(path, key, "head")
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            return _meta(key, st, _token(fd)) if stat.S_ISREG(st.st_mode) else None
        except OSError as exc:
            raise self._error(exc, key, "head", path) from exc
        finally:
            os.close(fd)

    async def _head(self, key: str) -> ObjectMeta | None:
        return await asyncio.to_thread(self._stat, key)

    # -- writes -------------------------------------------------------------------------

    @contextmanager
    def _locked(self, folder: str) -> Iterator[int]:
        """Hold the exclusive ``flock`` of ``folder``; yields its open descriptor."""
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _make_folders(folder: str, created: list[str]) -> None:
        """Create ``folder`` and its missing parents, appending each one made to ``created``."""
        missing: list[str] = []
        path = folder
        while not os.path.isdir(path):
            missing.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        for path in reversed(missing):
            try:
                os.mkdir(path)
            except FileExistsError:
                if not os.path.isdir(path):
                    raise  # a file of that name: the key cannot be written
                continue
            created.append(path)

    def _create_temp(self, folder: str, created: list[str]) -> tuple[int, str]:
        """Create a temp file in ``folder`` (making the folder if needed): ``(fd, path)``."""
        for _ in range(_CREATE_ATTEMPTS):
            tmp = os.path.join(folder, f"{TMP_PREFIX}{uuid.uuid4().hex}")
            try:
                return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), tmp
            except FileNotFoundError:
                # the folder is missing, or a concurrent delete pruned it meanwhile
                with contextlib.suppress(FileNotFoundError):
                    self._make_folders(folder, created)
        raise StoreBackendError(
            f"{self!r}: cannot create a file in {folder}: concurrent deletes keep removing it"
        )

    def _write_data(self, fd: int, data: BytesLike) -> tuple[os.stat_result, str | None]:
        """Write ``data`` and a fresh version token to the temp file: ``(stat, token)``,
        the token ``None`` where the file system keeps no user xattrs."""
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            token: str | None = _new_token()
            if not _set_token(f.fileno(), token or ""):
                token = None
            if self.durable:
                os.fsync(f.fileno())
            return os.fstat(f.fileno()), token

    @staticmethod
    def _newer_than(fd: int, st: os.stat_result, current: ObjectMeta | None) -> os.stat_result:
        """Without tokens, give the temp file an mtime later than the object it replaces
        (the lock is held), so ``inode-mtime-size`` versions of a key only grow even where
        timestamps are coarse and inodes are reused."""
        if current is None or not current.version or current.version.startswith("t"):
            return st
        previous = _mtime_ns(current)
        if st.st_mtime_ns > previous:
            return st
        for step in (1, 1_000, 1_000_000, 1_000_000_000, 2_000_000_000):
            want = previous + step
            os.utime(fd, ns=(st.st_atime_ns, want))
            st = os.fstat(fd)
            if st.st_mtime_ns > previous:
                return st
        raise OSError(errno.EIO, "cannot advance the modification time")

    def _write(self, key: str, data: BytesLike, if_match: str | None, if_absent: bool) -> str:
        path = self._resolve(key)
        folder = os.path.dirname(path)
        created: list[str] = []
        tmp: str | None = None
        try:
            fd, tmp = self._create_temp(folder, created)
            self._check_opened(fd, key)  # a folder swapped for a link to outside
            st, token = self._write_data(fd, data)
            # Unconditional writes take the lock too: delete_if_match checks and unlinks
            # under it, and must not unlink a file renamed in between.
            with self._locked(folder) as dfd:
                self._check_opened(dfd, key, close=False)
                name, tmp_name = os.path.basename(path), os.path.basename(tmp)
                if if_match is not None or if_absent or token is None:
                    current = self._meta_at(path, key, folder_error=True)
                    check_condition(key, current, if_match, if_absent)
                    if token is None:
                        with _opened(tmp) as tfd:
                            st = self._newer_than(tfd, st, current)
                os.replace(tmp_name, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            tmp = None
            self._sweep_if_due(folder)
        except BaseException as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if created:  # remove the folders this write made (if still empty)
                self._prune(folder, top=min(created, key=len))
            if isinstance(exc, OSError) and not isinstance(exc, AsyncShardError):
                raise self._write_error(exc, key, path) from exc
            raise
        return _meta(key, st, token).version or ""

    async def _put(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        return await asyncio.to_thread(self._write, key, data, if_match, if_absent)

    # -- stale temporary files ----------------------------------------------------------

    def _sweep_if_due(self, folder: str) -> None:
        """Remove stale temp files in ``folder`` unless swept within ``temp_max_age``."""
        if self.temp_max_age is None:
            return
        with self._swept_lock:
            if folder in self._swept:
                return
            self._swept[folder] = True
        with contextlib.suppress(OSError):  # best effort: the write itself succeeded
            _sweep(folder, self.temp_max_age)

    def _sweep_tree(self, max_age: float) -> int:
        root = self._real_root()
        removed = 0
        emptied: list[str] = []
        if not os.path.isdir(root):
            return 0
        try:
            for folder, _, files in os.walk(root, onerror=_raise):
                if any(name.startswith(TMP_PREFIX) for name in files):
                    count = _sweep(folder, max_age)
                    removed += count
                    if count and len(files) == count:
                        emptied.append(folder)
        except OSError as exc:
            raise self._error(exc, "/", "temp file cleanup", root) from exc
        for folder in sorted(emptied, key=len, reverse=True):
            self._prune(folder)
        return removed

    async def cleanup_temp_files(self, max_age: float = TEMP_MAX_AGE) -> int:
        """Remove temporary files older than ``max_age`` seconds in the whole tree.

        They are what writes killed before their rename leave behind. Folders left empty
        are removed, as deletes do. Returns how many files were removed.
        """
        if max_age < 0:
            raise ValueError("max_age must be >= 0")
        return await asyncio.to_thread(self._sweep_tree, max_age)

    def _link(self, source: str, target: str, folders: dict[str, str] | None = None) -> int | None:
        """Copy by hard link: a new name for the same file, made atomically (a temp name
        renamed over ``target``). Safe because no write ever changes a file in place
        (every write is a new file renamed over the old one). Copies the bytes where
        links are refused (another file system, a file system without links).

        Both ends go through checked descriptors: the source file opened (and linked
        through ``/proc/self/fd``) and the target folder, as for reads and writes."""
        resolve = self._resolve if folders is None else lambda k: self._batch_path(k, folders)
        src = resolve(source)
        sfd = self._open_checked(src, source, "copy")
        if sfd is None:
            return None
        try:
            st = os.fstat(sfd)
            if not stat.S_ISREG(st.st_mode):
                return None
            try:
                self._link_into(sfd, src, target, resolve(target))
            except StoreBackendError:
                if os.fstat(sfd).st_nlink == 0:
                    return None  # deleted meanwhile
                raise
        finally:
            os.close(sfd)
        return st.st_size

    def _link_into(self, sfd: int, src: str, target: str, path: str) -> None:
        """Give the open file ``sfd`` the name ``target`` (resolved to ``path``)."""
        folder, name = os.path.split(path)
        created: list[str] = []
        tmp = f"{TMP_PREFIX}{uuid.uuid4().hex}"
        dfd: int | None = None
        try:
            self._make_folders(folder, created)
            with self._locked(folder) as dfd:  # as every write: delete_if_match must not race
                self._check_opened(dfd, target, close=False)
                try:
                    linked = f"/proc/self/fd/{sfd}" if _PROC_FD else src
                    os.link(linked, tmp, dst_dir_fd=dfd, follow_symlinks=True)
                except FileNotFoundError:
                    raise
                except OSError:  # EXDEV, EPERM, EMLINK...: copy the bytes instead
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                    tfd = os.open(tmp, flags, 0o644, dir_fd=dfd)
                    with os.fdopen(os.dup(sfd), "rb") as f:
                        f.seek(0)
                        self._write_data(tfd, f.read())
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dfd)  # left when target already was this file
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, tmp))
            if created:
                self._prune(folder, top=min(created, key=len))
            if isinstance(exc, OSError) and not isinstance(exc, AsyncShardError):
                raise self._write_error(exc, target, path) from exc
            raise

    async def _copy(self, source: str, target: str) -> int | None:
        return await asyncio.to_thread(self._link, source, target)

    def _link_batch(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        folders: dict[str, str] = {}
        return [self._link(source, target, folders) for source, target in pairs]

    async def _copy_many(self, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        return await self._bounded(asyncio.to_thread(self._link_batch, pairs))

    # -- batches: one worker thread per batch -------------------------------------------

    def _batch_path(self, key: str, folders: dict[str, str]) -> str:
        """The real path of ``key`` (as :meth:`_resolve`), resolving each folder once per
        batch: one ``lstat`` per object instead of one per path component. A name that
        is itself a link gets the full resolution (links are aliases)."""
        parent, _, name = key.rpartition("/")
        folder = folders.get(parent)
        if folder is None:
            folder = folders[parent] = self._resolve(parent) if parent else self._real_root()
        path = os.path.join(folder, name)
        return self._resolve(key) if os.path.islink(path) else path

    def _read_batch(self, keys: Sequence[str]) -> list[GetResult | None]:
        folders: dict[str, str] = {}
        return [self._read(key, None, None, self._batch_path(key, folders)) for key in keys]

    async def _get_many(self, keys: Sequence[str]) -> list[GetResult | None]:
        return await self._bounded(asyncio.to_thread(self._read_batch, keys))

    def _write_batch(self, items: Sequence[tuple[str, BytesLike]]) -> list[str | None]:
        """Stage every object in a temp file, make them all durable with one sync of the
        file system (``syncfs``; a ``fsync`` per file where it is missing), then rename
        each over its object. On failure the temp files not yet renamed are removed."""
        group_sync = self.durable and _SYNCFS is not None
        staged: list[tuple[str, str, str, list[str]]] = []  # key, tmp, path, folders made
        versions: list[str | None] = []
        key, path, renamed = "", "", 0
        folders: dict[str, str] = {}
        try:
            for key, data in items:
                path = self._batch_path(key, folders)
                created: list[str] = []
                fd, tmp = self._create_temp(os.path.dirname(path), created)
                staged.append((key, tmp, path, created))
                self._check_opened(fd, key)  # a folder swapped for a link to outside
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    token: str | None = _new_token()
                    if not _set_token(f.fileno(), token or ""):
                        token = None
                    if self.durable and not group_sync:
                        os.fsync(f.fileno())
                    versions.append(_meta(key, os.fstat(f.fileno()), token).version)
            if group_sync and staged:
                _sync_file_system(os.path.dirname(staged[0][2]))
            for renamed in range(len(staged)):
                key, tmp, path, _ = staged[renamed]
                with self._locked(os.path.dirname(path)) as dfd:  # as every write (_write)
                    self._check_opened(dfd, key, close=False)
                    os.replace(
                        os.path.basename(tmp),
                        os.path.basename(path),
                        src_dir_fd=dfd,
                        dst_dir_fd=dfd,
                    )
            renamed = len(staged)
        except BaseException as exc:
            for _, tmp, path, created in staged[renamed:]:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                if created:
                    self._prune(os.path.dirname(path), top=min(created, key=len))
            if isinstance(exc, OSError) and not isinstance(exc, AsyncShardError):
                raise self._write_error(exc, key, path) from exc
            raise
        return versions

    async def _put_many(self, items: Sequence[tuple[str, BytesLike]]) -> list[str | None]:
        return await self._bounded(asyncio.to_thread(self._write_batch, items))

    def _prune(self, folder: str, *, top: str | None = None) -> None:
        """Remove ``folder`` and then its parents while they are empty.

        Stops at the root (never removed), at the first folder that is not empty, or
        after removing ``top``.
        """
        root = self._real_root()
        while folder != root and _within(folder, root):
            try:
                os.rmdir(folder)
            except OSError:
                return
            if folder == top:
                return
            folder = os.path.dirname(folder)

    def _open_folder(self, folder: str, key: str) -> int | None:
        """The checked descriptor of ``folder`` (inside the root), ``None`` if missing."""
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            if _is_missing(exc) or exc.errno == errno.ENOTDIR:
                return None
            raise self._error(exc, key, "open", folder) from exc
        self._check_opened(fd, key)
        return fd

    def _unlink(self, key: str, folders: dict[str, tuple[str, int | None]]) -> str | None:
        """Remove the object ``key``; the folder it was in, or ``None`` if it was missing.

        The name is removed from the folder's open descriptor, checked to lie inside the
        root, so a folder swapped for a link after it was resolved cannot lead outside.
        ``folders`` caches each folder's path and descriptor across one batch (the caller
        closes them): one ``realpath`` and one ``open`` per folder, not per key."""
        # The folder is resolved, the name is not: deleting a link removes the link.
        parent, _, name = key.rpartition("/")
        cached = folders.get(parent)
        if cached is None:
            folder = self._resolve(parent) if parent else self._real_root()
            cached = folders[parent] = (folder, self._open_folder(folder, key))
        folder, dfd = cached
        if dfd is None:
            return None
        try:
            os.unlink(name, dir_fd=dfd)
        except OSError as exc:
            if _is_missing(exc):
                return None
            if isinstance(exc, (IsADirectoryError, PermissionError)) and stat.S_ISDIR(
                os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
            ):
                return None  # a folder is not an object (macOS says EPERM, Linux EISDIR)
            raise self._error(exc, key, "delete", os.path.join(folder, name)) from exc
        return folder

    def _unlink_many(self, keys: Sequence[str]) -> None:
        """Remove the objects, then prune each folder they leave empty once.

        Every key is tried; the first failure is raised afterwards.
        """
        folders: set[str] = set()
        opened: dict[str, tuple[str, int | None]] = {}
        failure: AsyncShardError | None = None
        try:
            for key in keys:
                try:
                    folder = self._unlink(key, opened)
                except AsyncShardError as exc:
                    failure = failure or exc
                    continue
                if folder is not None:
                    folders.add(folder)
        finally:
            for _, fd in opened.values():
                if fd is not None:
                    os.close(fd)
        for folder in sorted(folders, key=len, reverse=True):  # deepest first
            self._prune(folder)
        if failure is not None:
            raise failure

    async def _delete(self, key: str) -> None:
        await _to_completion(self._unlink_many, [key])

    async def _delete_many(self, keys: Sequence[str]) -> None:
        """One worker-thread hop for the whole batch; ``delete`` counts one per key."""
        self._count_request("delete", len(keys))
        await self._bounded(_to_completion(self._unlink_many, keys))

    @property
    def supports_conditional_deletes(self) -> bool:
        return True

    def _unlink_if_match(self, key: str, version: str) -> None:
        parent, _, name = key.rpartition("/")
        try:
            folder = self._resolve(parent) if parent else self._real_root()
            with self._locked(folder) as dfd:  # the lock of writes: no write slips in
                self._check_opened(dfd, key, close=False)
                check_condition(key, self._stat(key), version, False)
                os.unlink(name, dir_fd=dfd)
        except OSError as exc:
            if _is_missing(exc):
                raise ConflictError(f"{key}: object does not exist", key=key) from None
            raise self._error(exc, key, "delete", key) from exc
        self._prune(folder)

    async def _delete_if_match(self, key: str, version: str) -> None:
        await asyncio.to_thread(self._unlink_if_match, key, version)

    # -- listing ------------------------------------------------------------------------

    def _entries(self, folder: str, key: str) -> Iterator[tuple[os.DirEntry[str], bool]]:
        """``(entry, is_folder)`` for each listable entry of ``folder`` (key prefix ``key``).

        Listable: folders (not links to them) and regular files (or links to regular files
        inside the root) whose names are valid key segments, temp files excepted.
        """
        root = self._real_root()
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    name = entry.name
                    if not _valid_name(name):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        yield entry, True
                    elif (
                        entry.is_file()
                        and not name.startswith(TMP_PREFIX)
                        and (not entry.is_symlink() or _within(os.path.realpath(entry.path), root))
                    ):
                        yield entry, False
        except OSError as exc:
            if _is_missing(exc):
                return
            raise self._error(exc, key or "/", "list", folder) from exc

    def _walk(self, prefix: str) -> list[str]:
        parent = prefix.rpartition("/")[0]
        start = self._resolve(parent) if parent else self._real_root()
        keys: list[str] = []
        todo = [(start, parent + "/" if parent else "")]
        while todo:
            folder, base = todo.pop()
            for entry, is_folder in self._entries(folder, base):
                key = base + entry.name
                if is_folder:
                    if _overlaps(key + "/", prefix):
                        todo.append((entry.path, key + "/"))
                elif key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(self._walk, prefix):
            yield key

    def _scan(self, prefix: str) -> tuple[list[str], list[str]]:
        folder = self._resolve(prefix[:-1]) if prefix else self._real_root()
        keys: list[str] = []
        prefixes: list[str] = []
        for entry, is_folder in self._entries(folder, prefix):
            if is_folder:
                prefixes.append(prefix + entry.name + "/")
            else:
                keys.append(prefix + entry.name)
        return sorted(keys), sorted(prefixes)

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        return await asyncio.to_thread(self._scan, prefix)


def _raise(exc: OSError) -> None:
    raise exc


async def _to_completion(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a worker thread; a cancelled caller still waits for it to end."""
    future = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise
