"""Deletes of the local backend: unlink through checked folder descriptors, then prune.

A delete removes the name from its folder's open descriptor, checked to lie inside the
root, so a folder swapped for a link after it was resolved cannot lead outside. Folders
a delete leaves empty are removed, so listings never show a prefix without keys.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence

from asyncshard.backends.local.files import TMP_PREFIX, is_missing, locked
from asyncshard.backends.local.root import FolderFds, Root
from asyncshard.errors import AsyncShardError, ConflictError
from asyncshard.store import check_condition


def unlink_many(root: Root, keys: Sequence[str]) -> None:
    """Remove the objects, then prune each folder they leave empty once.

    Every key is tried; the first failure is raised afterwards.
    """
    folders: set[str] = set()
    failure: AsyncShardError | None = None
    with FolderFds(root) as opened:
        for key in keys:
            try:
                folder = _unlink(root, key, opened)
            except AsyncShardError as exc:
                failure = failure or exc
                continue
            if folder is not None:
                folders.add(folder)
    for folder in sorted(folders, key=len, reverse=True):  # deepest first
        root.prune(folder)
    if failure is not None:
        raise failure


def prune_below(root: Root, prefix: str) -> None:
    """Remove every folder below the folder ``prefix`` (``""`` or ending in ``/``) that
    holds nothing, deepest first, then the folder itself and its parents while empty
    (never the root). Links are not followed: each folder is opened and removed
    relative to its parent's descriptor. A folder that is not empty (an object, a temp
    file, a folder that stays) stays; one that vanished meanwhile is fine."""
    try:
        top = root.folder(prefix[:-1])
        fd = root.open_dir(prefix[:-1], prefix or "/")
    except AsyncShardError:
        return  # a prefix that leads outside the root or through a file: nothing ours
    if fd is None:
        return
    # the folders open from the top down to the current one, each with the names of
    # its subfolders still to visit; a folder is removed once all below it were
    stack: list[tuple[int, str, list[str]]] = [(fd, "", _subfolders(fd))]
    try:
        while stack:
            held, name, todo = stack[-1]
            if todo:
                sub = todo.pop()
                with contextlib.suppress(AsyncShardError):
                    opened = root.open_below(held, sub, sub)
                    if opened is not None and opened >= 0:
                        stack.append((opened, sub, _subfolders(opened)))
                continue
            stack.pop()
            os.close(held)
            if stack:  # not the top: removed through its parent, if empty
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=stack[-1][0])
    finally:
        for held, _, _ in stack:
            os.close(held)
    root.prune(top)


def _subfolders(fd: int) -> list[str]:
    """The folders (not links) in the open folder ``fd``, but for the staging folders of
    batches: one is empty for a moment before its first temp file, and left to the
    sweeps, which remove it once stale."""
    try:
        with os.scandir(fd) as it:
            return [
                e.name
                for e in it
                if e.is_dir(follow_symlinks=False) and not e.name.startswith(TMP_PREFIX)
            ]
    except OSError:
        return []


def _unlink(root: Root, key: str, folders: FolderFds) -> str | None:
    """Remove the object ``key``; the folder it was in, or ``None`` if it was missing.

    ``folders`` opens each folder once per batch: one ``realpath`` and one ``open`` per
    folder, not per key."""
    # The folder is resolved, the name is not: deleting a link removes the link.
    parent, _, name = key.rpartition("/")
    folder, dfd = folders.get(parent, key)
    if dfd is None:
        return None
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError as exc:
        if is_missing(exc):
            return None
        if isinstance(exc, (IsADirectoryError, PermissionError)) and stat.S_ISDIR(
            os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
        ):
            return None  # a folder is not an object (macOS says EPERM, Linux EISDIR)
        raise root.error(exc, key, "delete", os.path.join(folder, name)) from exc
    return folder


def unlink_if_match(root: Root, key: str, version: str) -> None:
    """Remove ``key`` if it is at ``version`` (``ConflictError`` otherwise), checked and
    unlinked under the folder lock every write renames under."""
    parent, _, name = key.rpartition("/")
    try:
        folder = root.folder(parent)
        with locked(folder) as dfd:
            root.check_opened(dfd, key, close=False)
            check_condition(key, root.meta(key), version, False)
            os.unlink(name, dir_fd=dfd)
    except OSError as exc:
        if is_missing(exc):
            raise ConflictError(f"{key}: object does not exist", key=key) from None
        raise root.error(exc, key, "delete", key) from exc
    root.prune(folder)
