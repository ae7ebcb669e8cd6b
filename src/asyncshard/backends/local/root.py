"""The root folder of a LocalStore: keys to paths, confined to the root.

Every key is resolved below the root (links by ``realpath``) and refused unless it lies
inside the root, and every descriptor opened for a key is checked again through
``/proc/self/fd``, so a path swapped for a link after it was resolved cannot lead
outside. Listings and prunes open folders level by level relative to their parent's
descriptor, links not followed (:meth:`Root.open_dir`, :meth:`Root.prune`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from asyncshard.backends.local.files import (
    PROC_FD,
    is_missing,
    meta_of,
    open_no_follow,
    tag_of,
    within,
)
from asyncshard.errors import (
    AsyncShardError,
    InvalidKeyError,
    StoreBackendError,
    StorePermissionError,
)
from asyncshard.store import ObjectMeta

#: Flags of a read-only open that never follows a link at the last component.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)

#: Flags of a folder's descriptor (listed, or a parent to open and remove names in).
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)

#: Folder key -> resolved folder path, shared by the objects of one batch.
Folders = dict[str, str]


class Root:
    """The root folder of one store; ``label`` names the store in error messages."""

    def __init__(self, path: Path, label: str):
        self.path = path
        self.label = label
        self._resolved: str | None = None

    def real(self) -> str:
        """The root with links resolved; cached once the root exists.

        The root is created by the first write; until then it is resolved on every call,
        since a folder or link appearing there could change the answer.
        """
        real = self._resolved
        if real is None:
            real = os.path.realpath(self.path)
            if os.path.isdir(real):
                self._resolved = real
        return real

    def resolve(self, key: str) -> str:
        """The real path of ``key``; refuses any path that resolves outside the root.

        Only the key's own folders are looked at (the root is resolved once): one
        ``lstat`` per component of the key, none for the folders above the root. A
        component that is a link, or that a link replaced, takes the full ``realpath``.
        """
        root = self.real()
        path = root.rstrip(os.sep)
        parts = key.split("/")
        for i, part in enumerate(parts):
            step = f"{path}{os.sep}{part}"
            try:
                st = os.lstat(step)
            except OSError:  # missing (or not a folder): nothing below it is a link
                return os.path.join(step, *parts[i + 1 :])
            if stat.S_ISLNK(st.st_mode):
                return self._resolve_links(key)
            path = step
        return path

    def _resolve_links(self, key: str) -> str:
        """:meth:`resolve` of a key whose path holds a link: ``realpath``, checked."""
        root = self.real()
        try:
            real = os.path.realpath(os.path.join(root, key))
        except OSError as exc:  # a link changed while it was being resolved
            raise self.error(exc, key, "resolve", os.path.join(root, key)) from exc
        if not within(real, root):
            raise InvalidKeyError(f"invalid key {key!r}: resolves outside the store root")
        return real

    def folder(self, parent: str) -> str:
        """The real path of the folder key ``parent`` (``""`` is the root)."""
        return self.resolve(parent) if parent else self.real()

    def batch_path(self, key: str, folders: Folders | None) -> str:
        """The real path of ``key`` (as :meth:`resolve`), resolving each folder once per
        batch (``folders``): one ``lstat`` per object instead of one per path component.
        A name that is itself a link gets the full resolution (links are aliases)."""
        if folders is None:
            return self.resolve(key)
        parent, _, name = key.rpartition("/")
        folder = folders.get(parent)
        if folder is None:
            folder = folders[parent] = self.folder(parent)
        path = os.path.join(folder, name)
        return self.resolve(key) if os.path.islink(path) else path

    def check_opened(self, fd: int, key: str, *, close: bool = True) -> None:
        """Refuse a file or folder opened outside the root (closing ``fd`` unless ``close``
        is false). The check is on the open descriptor (``/proc/self/fd``), so a path
        swapped after it was resolved cannot lead outside."""
        if not PROC_FD:
            return
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as exc:
            if close:
                os.close(fd)
            raise self.error(exc, key, "open", key) from exc
        if not within(real, self.real()):
            if close:
                os.close(fd)
            raise InvalidKeyError(f"invalid key {key!r}: resolves outside the store root")

    def open_checked(self, path: str, key: str, action: str) -> int | None:
        """Open the resolved ``path`` of ``key`` for reading (the last component not
        followed) and check the descriptor lies inside the root; ``None`` if missing."""
        try:
            fd = open_no_follow(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            if is_missing(exc):
                return None
            raise self.error(exc, key, action, path) from exc
        self.check_opened(fd, key)
        return fd

    def meta(self, key: str) -> ObjectMeta | None:
        """The metadata of the object ``key``; ``None`` if missing or not a file."""
        path = self.resolve(key)
        fd = self.open_checked(path, key, "head")
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            return meta_of(key, st, tag_of(fd)) if stat.S_ISREG(st.st_mode) else None
        except OSError as exc:
            raise self.error(exc, key, "head", path) from exc
        finally:
            os.close(fd)

    def open_fast(self, key: str, *, check: bool = True) -> int | None:
        """Open ``key`` for reading without :func:`os.path.realpath` (a Python loop with an
        ``lstat`` per path component, most of a small read's cost): open it directly (the
        last component not followed), then check the file actually opened lies inside the
        root (:meth:`inside`), unless ``check`` is false: then the caller does. ``None``
        when missing; ``-1`` when the fast path does not apply (no ``/proc``, the name
        itself is a link): resolve the slow way."""
        if not PROC_FD:
            return -1
        path = self.real() + "/" + key
        try:
            fd = os.open(path, READ_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the name is a link (an alias): the slow path
                return -1
            if is_missing(exc):
                return None
            raise self.error(exc, key, "read", path) from exc
        if check and not self.inside(fd, key):
            return -1
        return fd

    def inside(self, fd: int, key: str) -> bool:
        """Whether ``fd``, opened by :meth:`open_fast`, lies inside the root (through
        ``/proc/self/fd``); closed unless it does. ``False`` if the link cannot be read
        (the slow path then answers); :class:`InvalidKeyError` if it leads outside."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            os.close(fd)
            return False
        if not within(real, self.real()):  # through a link to outside the root
            os.close(fd)
            raise InvalidKeyError(f"invalid key {key!r}: resolves outside the store root")
        return True

    def open_folder(self, folder: str, key: str) -> int | None:
        """The checked descriptor of ``folder`` (inside the root), ``None`` if missing."""
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            if is_missing(exc) or exc.errno == errno.ENOTDIR:
                return None
            raise self.error(exc, key, "open", folder) from exc
        self.check_opened(fd, key)
        return fd

    def open_dir(self, parent: str, key: str) -> int | None:
        """A descriptor of the folder key ``parent`` (``""`` is the root); ``None`` if
        missing or not a folder.

        Each level is opened below the last, links not followed, so the folder is the one
        the names lead to inside the root, whatever is swapped meanwhile. A level that
        is a link (an alias inside the root) takes the full resolution, and the folder
        opened is checked (:meth:`open_folder`)."""
        root = self.real()
        try:
            fd = os.open(root, DIR_FLAGS)
        except OSError as exc:
            if is_missing(exc):
                return None
            raise self.error(exc, key, "open", root) from exc
        for part in parent.split("/") if parent else ():
            child = self.open_below(fd, part, key)
            os.close(fd)
            if child is None:
                return None
            if child < 0:  # a link, or a file: the full resolution says which
                return self.open_folder(self.folder(parent), key)
            fd = child
        return fd

    def open_below(self, fd: int, name: str, key: str) -> int | None:
        """The folder ``name`` in the open folder ``fd``, not followed if a link: its
        descriptor; ``None`` if missing; ``-1`` if a link or not a folder."""
        try:
            return os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                return -1
            if is_missing(exc):
                return None
            raise self.error(exc, key, "open", name) from exc

    def links_to_file(self, fd: int, name: str, folder: str) -> bool:
        """Whether the link ``name`` in the open folder ``fd`` (the folder key
        ``folder``) leads to a regular file inside the root: the file it leads to is
        opened (``O_PATH``) and its descriptor checked, not a path."""
        real = self.real()
        if not PROC_FD:
            path = os.path.realpath(os.path.join(real, folder, name))
            return within(path, real) and os.path.isfile(path)
        try:
            target = os.open(name, os.O_PATH | os.O_CLOEXEC, dir_fd=fd)
        except OSError:  # dangling, a loop, not allowed: not an object
            return False
        try:
            if not stat.S_ISREG(os.fstat(target).st_mode):
                return False
            return within(os.readlink(f"/proc/self/fd/{target}"), real)
        except OSError:
            return False
        finally:
            os.close(target)

    def prune(self, folder: str, *, top: str | None = None) -> None:
        """Remove the resolved ``folder`` and then its parents while they are empty.

        Stops at the root (never removed), at the first folder that is not empty, or
        after removing ``top``. Each level is opened below the last (links not
        followed) and each folder removed through its parent's descriptor, so a folder
        swapped for a link meanwhile is never followed: nothing outside is removed.
        """
        root = self.real()
        if folder == root or not within(folder, root):
            return
        parts = os.path.relpath(folder, root).split(os.sep)
        last = -1
        if top is not None and within(folder, top) and within(top, root) and top != root:
            last = os.path.relpath(top, root).count(os.sep)
        try:
            levels = [os.open(root, DIR_FLAGS)]
        except OSError:
            return
        try:
            for part in parts[:-1]:
                child = self.open_below(levels[-1], part, part)
                if child is None or child < 0:
                    return  # a level vanished or is a link now: nothing of ours to prune
                levels.append(child)
            for depth in range(len(parts) - 1, -1, -1):
                try:
                    os.rmdir(parts[depth], dir_fd=levels[depth])
                except OSError:
                    return
                if depth == last:
                    return
        except AsyncShardError:
            return  # a level that cannot be opened: left as it is
        finally:
            for fd in levels:
                os.close(fd)

    def error(self, exc: OSError, key: str, action: str, path: str) -> AsyncShardError:
        """The asyncshard error for an unexpected ``OSError`` on ``key``."""
        detail = str(exc) if exc.filename else f"{exc} ({path})"
        if isinstance(exc, PermissionError):
            return StorePermissionError(
                f"{self.label}: permission denied on {action} of {key!r}: {detail}"
            )
        return StoreBackendError(f"{self.label}: {action} of {key!r} failed: {detail}")

    def write_error(self, exc: OSError, key: str, path: str) -> AsyncShardError:
        """The asyncshard error for an ``OSError`` while writing ``key``."""
        if exc.errno == errno.ENAMETOOLONG:
            return InvalidKeyError(f"invalid key {key!r}: too long a name for the file system")
        if isinstance(exc, IsADirectoryError):
            return InvalidKeyError(f"invalid key {key!r}: a folder of that name exists")
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            culprit = self._file_in_the_way(key)
            where = f" ({culprit!r} is an object, so it cannot be a folder)" if culprit else ""
            return InvalidKeyError(f"invalid key {key!r}: a file of that name exists{where}")
        return self.error(exc, key, "write", path)

    def _file_in_the_way(self, key: str) -> str | None:
        """The key prefix of ``key`` that exists as a file, if any (for error messages)."""
        root = self.real()
        parts = key.split("/")
        for n in range(1, len(parts)):
            prefix = "/".join(parts[:n])
            if os.path.isfile(os.path.join(root, prefix)):
                return prefix
        return None


class FolderFds:
    """The checked descriptors of the folders one batch touches, opened once each and
    closed when the ``with`` block ends. A name opened or unlinked relative to one (no
    ``/`` in it, the link not followed) stays inside the root, so the objects of a batch
    need no per-object ``realpath`` or ``/proc`` check."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self._open: dict[str, tuple[str, int | None]] = {}

    def get(self, parent: str, key: str) -> tuple[str, int | None]:
        """The resolved path of the folder key ``parent`` and its descriptor (``None``
        if it is missing); ``key`` names the object in error messages."""
        cached = self._open.get(parent)
        if cached is None:
            folder = self.root.folder(parent)
            cached = self._open[parent] = (folder, self.root.open_folder(folder, key))
        return cached

    def __enter__(self) -> FolderFds:
        return self

    def __exit__(self, *exc: object) -> None:
        for _, fd in self._open.values():
            if fd is not None:
                os.close(fd)
        self._open.clear()
