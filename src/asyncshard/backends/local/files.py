"""File-level helpers of the local backend: versions, metadata, locks, folders, sync.

Nothing here knows the store root; :mod:`.root` confines paths to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import os
import stat
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

from asyncshard.errors import InvalidKeyError
from asyncshard.ranges import ByteRange, resolve
from asyncshard.store import ObjectMeta, check_condition, validate_key

T = TypeVar("T")

TMP_PREFIX = ".asyncshard-tmp-"
#: Age (seconds since the last write to it) from which a temporary file is stale.
TEMP_MAX_AGE = 3600.0
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)
#: errnos that mean "no such object" on reads: a name too long to exist, a link loop (or
#: a link where the checked path had a file: ``O_NOFOLLOW``).
_MISSING_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP})
#: Whether ``/proc/self/fd`` tells the path of an open file (Linux): descriptors are checked.
PROC_FD = os.path.isdir("/proc/self/fd")

#: Extended attribute holding an object's version token (random, written with the object).
VERSION_XATTR = "user.asyncshard.version"
#: errnos of ``getxattr`` meaning "no token here": none set, or no xattrs on this file system.
_NO_TOKEN_ERRNOS = frozenset({errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM})
#: Versions made of a token start with it (``inode-mtime-size`` ones are hex digits).
TOKEN_PREFIX = "t"
#: ``ioctl`` asking a file's inode generation (Linux ``FS_IOC_GETVERSION``: ext2/3/4,
#: btrfs and others), a number drawn anew whenever an inode number is used again. The
#: number as x86, arm and risc-v encode it; where it means nothing (powerpc, mips, sparc
#: encode ``_IOR`` otherwise) the call fails and versions carry no generation.
FS_IOC_GETVERSION = 0x80087601 if struct.calcsize("l") == 8 else 0x80047601
#: What versions are made of besides the size and mtime: the token (``str``), else the
#: inode's generation (``int``), else neither (``None``).
Tag = str | int | None


# -- versions -------------------------------------------------------------------------


def new_token() -> str:
    """A fresh version token: 128 random bits, never reused for another write."""
    return os.urandom(16).hex()


def set_token(fd: int, token: str) -> bool:
    """Store ``token`` on the open file; ``False`` where the file system has no user xattrs."""
    try:
        os.setxattr(fd, VERSION_XATTR, token.encode())
    except OSError as exc:
        if exc.errno in _NO_TOKEN_ERRNOS:
            return False
        raise
    return True


def token_of(target: int | str) -> str | None:
    """The version token of an open file or a (not followed) path, if it has one."""
    try:
        if isinstance(target, int):
            return os.getxattr(target, VERSION_XATTR).decode("ascii")
        return os.getxattr(target, VERSION_XATTR, follow_symlinks=False).decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None


def generation_of(target: int | str) -> int | None:
    """The inode generation of an open file or a (not followed) path, where the file
    system tells it."""
    try:
        if isinstance(target, int):
            return _generation(target)
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _generation(fd)
    finally:
        os.close(fd)


def _generation(fd: int) -> int | None:
    try:
        answer = fcntl.ioctl(fd, FS_IOC_GETVERSION, bytes(8))
    except OSError:  # ENOTTY, EINVAL, EOPNOTSUPP: not this file system
        return None
    return int(struct.unpack_from("I", answer)[0])  # the kernel writes an int


def tag_of(target: int | str) -> Tag:
    """What an open file's or a path's version is made of: its token, else its inode
    generation (see :func:`meta_of`)."""
    return token_of(target) or generation_of(target)


def version_of(st: os.stat_result, tag: Tag = None) -> str:
    """A file's version: ``t<token>``, else ``inode.generation-mtime-size``
    (``inode-mtime-size`` without a generation).

    Without tokens the generation tells a file from a later one that got its freed inode
    number (a delete and a new write of the same size within one clock tick)."""
    if isinstance(tag, str) and tag:
        return f"{TOKEN_PREFIX}{tag}"
    inode = f"{st.st_ino:x}" if not isinstance(tag, int) else f"{st.st_ino:x}.{tag:x}"
    return f"{inode}-{st.st_mtime_ns:x}-{st.st_size:x}"


def meta_of(key: str, st: os.stat_result, tag: Tag = None) -> ObjectMeta:
    """The object metadata of a file (its version: :func:`version_of`)."""
    modified = datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)
    return ObjectMeta(key, st.st_size, version_of(st, tag), modified)


def meta_at(path: str, key: str, *, folder_error: bool = False) -> ObjectMeta | None:
    """The object at the resolved ``path``: ``None`` if missing or not a file.

    With ``folder_error`` a folder raises ``IsADirectoryError`` (a write cannot
    replace it) instead of reading as missing.
    """
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        if is_missing(exc):
            return None
        raise
    if folder_error and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    return meta_of(key, st, tag_of(path)) if stat.S_ISREG(st.st_mode) else None


def range_of(
    fd: int, key: str, byte_range: ByteRange | None, if_match: str | None
) -> tuple[ObjectMeta, int, int] | None:
    """The metadata of an open file and the clamped ``(start, end)`` to read from it;
    ``None`` unless it is a regular file; ``ConflictError`` when ``if_match`` fails."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return None
    meta = meta_of(key, st, tag_of(fd))
    check_condition(key, meta, if_match, False)
    start, end = resolve(byte_range, meta.size)
    return meta, start, end


def data_of(fd: int) -> bytes | None:
    """The whole content of an open file, without its version; ``None`` unless it is a
    regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return None
    return os.pread(fd, st.st_size, 0) if st.st_size else b""


def newer_than(fd: int, st: os.stat_result, current: ObjectMeta | None) -> os.stat_result:
    """Without tokens, give the temp file an mtime later than the object it replaces
    (the lock is held), so ``inode-mtime-size`` versions of a key only grow even where
    timestamps are coarse and inodes are reused."""
    if current is None or not current.version or current.version.startswith(TOKEN_PREFIX):
        return st
    previous = int((current.version or "0-0-0").split("-")[1], 16)
    if st.st_mtime_ns > previous:
        return st
    for step in (1, 1_000, 1_000_000, 1_000_000_000, 2_000_000_000):
        os.utime(fd, ns=(st.st_atime_ns, previous + step))
        st = os.fstat(fd)
        if st.st_mtime_ns > previous:
            return st
    raise OSError(errno.EIO, "cannot advance the modification time")


# -- names and paths ------------------------------------------------------------------


def overlaps(folder: str, prefix: str) -> bool:
    """Whether keys below ``folder`` (ending in ``/``) can start with ``prefix``."""
    return folder.startswith(prefix) or prefix.startswith(folder)


def within(path: str, root: str) -> bool:
    """Whether the resolved ``path`` is ``root`` or lies below it."""
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


def is_missing(exc: OSError) -> bool:
    """Whether ``exc`` means "no such object"."""
    return isinstance(exc, _MISSING) or exc.errno in _MISSING_ERRNOS


def valid_name(name: str) -> bool:
    """Whether a file or folder name can be a key segment (no backslash, ...)."""
    try:
        validate_key(name)
    except InvalidKeyError:
        return False
    return True


# -- files and folders ----------------------------------------------------------------


@contextmanager
def opened_for_write(path: str) -> Iterator[int]:
    """An open write descriptor of ``path`` (not followed), closed on exit."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def open_no_follow(path: str, flags: int) -> int:
    """Open ``path`` without following a link at its last component."""
    # O_NONBLOCK: opening a FIFO must not hang; regular files ignore the flag.
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


@contextmanager
def locked(folder: str) -> Iterator[int]:
    """Hold the exclusive ``flock`` of ``folder``; yields its open descriptor."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def make_folders(folder: str, created: list[str]) -> None:
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


def not_temp(key: str) -> str:
    """Refuse a key with a name that a temp file or a staging folder would have: such
    names are hidden from listings and swept as stale."""
    if TMP_PREFIX in key and any(part.startswith(TMP_PREFIX) for part in key.split("/")):
        raise InvalidKeyError(
            f"invalid key {key!r}: names starting with {TMP_PREFIX!r} are the store's "
            "temporary files"
        )
    return key


def sweep(folder: str, max_age: float) -> int:
    """Remove the temporary files directly in ``folder`` older than ``max_age`` seconds,
    and the staging folders of batch writes last changed that long ago (with their temp
    files); the number of temp files removed."""
    cutoff = time.time() - max_age
    removed = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if not entry.name.startswith(TMP_PREFIX):
                continue
            with contextlib.suppress(FileNotFoundError):  # another sweeper was first
                st = entry.stat(follow_symlinks=False)
                if st.st_mtime >= cutoff:
                    continue
                if stat.S_ISREG(st.st_mode):
                    os.unlink(entry.path)
                    removed += 1
                elif stat.S_ISDIR(st.st_mode):  # a staging folder left by a killed batch
                    removed += sweep(entry.path, max_age)
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)
    return removed


def _find_syncfs() -> Callable[[int], int] | None:
    """Linux ``syncfs(2)`` through libc, or ``None`` where there is none."""
    try:
        func: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return func


SYNCFS = _find_syncfs()


def sync_file_system(folder: str) -> None:
    """Write every dirty page of the file system holding ``folder`` to disk."""
    assert SYNCFS is not None
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), folder)
    finally:
        os.close(fd)


async def to_completion(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a worker thread; a cancelled caller still waits for it to end."""
    future = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise
