"""LocalStore: objects as files below a root folder.

* Reads seek to the range and read only it; blocking calls run in worker threads.
* Writes go to a temporary file in the destination folder and are renamed over the
  object, so a failure at any point leaves the previous object intact.
* Versions are ``inode-mtime_ns-size`` in hex; every write makes a new file, so a new
  version. Conditional writes compare the version under an exclusive ``flock`` on the
  destination folder, which also excludes other processes using asyncshard.
* Every path is checked (after resolving links) to lie inside the root.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from asyncshard.errors import InvalidKeyError
from asyncshard.ranges import ByteRange, resolve
from asyncshard.store import BytesLike, GetResult, ObjectMeta, Store, check_condition

TMP_PREFIX = ".asyncshard-tmp-"
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def _meta(key: str, st: os.stat_result) -> ObjectMeta:
    version = f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"
    modified = datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)
    return ObjectMeta(key, st.st_size, version, modified)


def _overlaps(folder: str, prefix: str) -> bool:
    """Whether keys below ``folder`` (ending in ``/``) can start with ``prefix``."""
    return folder.startswith(prefix) or prefix.startswith(folder)


class LocalStore(Store):
    """A Store over a local folder (created on first write)."""

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True, **options: int):
        super().__init__(**options)
        self.root = Path(os.path.abspath(root))
        self.durable = durable

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    # -- paths --------------------------------------------------------------------------

    def _real_root(self) -> str:
        return os.path.realpath(self.root)

    def _path(self, key: str) -> Path:
        """The file for ``key``; refuses any path that resolves outside the root."""
        path = self.root / key
        real, root = os.path.realpath(path), self._real_root()
        if real != root and not real.startswith(root + os.sep):
            raise InvalidKeyError(f"invalid key {key!r}: resolves outside the store root")
        return path

    # -- reads --------------------------------------------------------------------------

    def _read(self, key: str, byte_range: ByteRange | None, if_match: str | None) -> GetResult:
        with open(self._path(key), "rb") as f:
            meta = _meta(key, os.fstat(f.fileno()))
            check_condition(key, meta, if_match, False)
            start, end = resolve(byte_range, meta.size)
            f.seek(start)
            return GetResult(f.read(end - start), meta)

    async def _get(
        self, key: str, byte_range: ByteRange | None, if_match: str | None
    ) -> GetResult | None:
        try:
            return await asyncio.to_thread(self._read, key, byte_range, if_match)
        except _MISSING:
            return None

    def _stat(self, key: str) -> ObjectMeta | None:
        try:
            st = os.stat(self._path(key))
        except _MISSING:
            return None
        return None if stat.S_ISDIR(st.st_mode) else _meta(key, st)

    async def _head(self, key: str) -> ObjectMeta | None:
        return await asyncio.to_thread(self._stat, key)

    # -- writes -------------------------------------------------------------------------

    @contextmanager
    def _locked(self, folder: Path) -> Iterator[None]:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write_temp(self, path: Path, data: BytesLike) -> tuple[Path, os.stat_result]:
        for _ in range(8):  # a concurrent delete may prune the folder between the calls
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f"{TMP_PREFIX}{uuid.uuid4().hex}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:
                continue
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    if self.durable:
                        os.fsync(f.fileno())
                    return tmp, os.fstat(f.fileno())
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        raise FileNotFoundError(f"cannot create a file in {path.parent}")

    def _write(self, key: str, data: BytesLike, if_match: str | None, if_absent: bool) -> str:
        path = self._path(key)
        if path.is_dir():
            raise InvalidKeyError(f"invalid key {key!r}: a folder of that name exists")
        tmp, st = self._write_temp(path, data)
        try:
            if if_match is None and not if_absent:
                os.replace(tmp, path)
            else:
                with self._locked(path.parent):
                    check_condition(key, self._stat(key), if_match, if_absent)
                    os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return _meta(key, st).version or ""

    async def _put(
        self, key: str, data: BytesLike, if_match: str | None, if_absent: bool
    ) -> str | None:
        return await asyncio.to_thread(self._write, key, data, if_match, if_absent)

    def _unlink(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except _MISSING:
            return
        parent = path.parent
        while parent != self.root:  # prune folders the delete left empty
            try:
                parent.rmdir()
            except OSError:
                return
            parent = parent.parent

    async def _delete(self, key: str) -> None:
        await asyncio.to_thread(self._unlink, key)

    # -- listing ------------------------------------------------------------------------

    def _walk(self, prefix: str) -> list[str]:
        folder = prefix.rpartition("/")[0]
        start = self._path(folder) if folder else self.root
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(start):
            rel = os.path.relpath(dirpath, self.root)
            base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            dirnames[:] = [d for d in dirnames if _overlaps(base + d + "/", prefix)]
            keys.extend(
                base + name
                for name in filenames
                if not name.startswith(TMP_PREFIX) and (base + name).startswith(prefix)
            )
        return sorted(keys)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(self._walk, prefix):
            yield key

    def _scan(self, prefix: str) -> tuple[list[str], list[str]]:
        keys: list[str] = []
        prefixes: list[str] = []
        try:
            with os.scandir(self._path(prefix[:-1]) if prefix else self.root) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        prefixes.append(prefix + entry.name + "/")
                    elif entry.is_file() and not entry.name.startswith(TMP_PREFIX):
                        keys.append(prefix + entry.name)
        except _MISSING:
            pass
        return sorted(keys), sorted(prefixes)

    async def _list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        return await asyncio.to_thread(self._scan, prefix)
