"""Listings of the local backend: only what the API accepts.

Listable: folders (not links to them) and regular files (or links to regular files
inside the root) whose names are valid key segments; temp files and the staging folders
of batch writes are hidden.

Every folder is listed through a descriptor: the listed folder is opened level by level
below the root (:meth:`.Root.open_dir`) and each folder below it relative to its
parent's descriptor, links not followed. A folder swapped for a link meanwhile is not
entered, so no listing names what lies outside the root.

A listing streams (:class:`KeyStream`): keys are yielded as ``scandir`` reads them, in
the order the file system gives, folder after folder, and the store hands them on in
batches of :data:`BATCH` (one worker-thread hop each). What it holds is one batch, and
per open folder its descriptor and the names of the subfolders still to list: a
million-key listing holds kilobytes, not the whole listing (the Store contract leaves
the order of a listing unspecified).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Generator, Iterator

from asyncshard.backends.local.files import TMP_PREFIX, is_missing, overlaps, valid_name
from asyncshard.backends.local.root import Root

__all__ = ["BATCH", "KeyStream", "scan", "walk"]

#: Keys per worker-thread hop of a streamed listing.
BATCH = 2048


def walk(root: Root, prefix: str) -> Generator[str]:
    """Every key starting with ``prefix``, in file-system order, as it is read."""
    parent = prefix.rpartition("/")[0]
    base = parent + "/" if parent else ""
    fd = root.open_dir(parent, prefix or "/")
    if fd is None:
        return
    # the folders open from the listed one down to the current one, each with the
    # names of its subfolders still to list: as many descriptors as levels
    stack: list[tuple[int, str, list[str]]] = []
    try:
        while True:
            folders: list[str] = []
            for name in _entries(root, fd, base, folders):
                key = base + name
                if key.startswith(prefix):
                    yield key
            stack.append((fd, base, [n for n in folders if overlaps(f"{base}{n}/", prefix)]))
            fd = -1
            while fd < 0 and stack:
                top, above, todo = stack[-1]
                if not todo:
                    stack.pop()
                    os.close(top)
                    continue
                name = todo.pop()
                base = f"{above}{name}/"
                opened = root.open_below(top, name, base)
                fd = -1 if opened is None else opened  # gone, or a link now: skipped
            if fd < 0:
                return
    finally:
        if fd >= 0:  # being listed: not on the stack yet
            os.close(fd)
        for held, _, _ in stack:
            os.close(held)


class KeyStream:
    """A :func:`walk` taken in batches from worker threads, closable from any thread.

    :meth:`close` while a batch is being read (the awaiting listing was cancelled)
    leaves the closing to that batch, when it ends: a generator cannot be closed while
    it runs, and its descriptors must not outlive the listing.
    """

    def __init__(self, root: Root, prefix: str) -> None:
        self._keys = walk(root, prefix)
        self._lock = threading.Lock()
        self._busy = False
        self._closed = False

    def take(self, n: int = BATCH) -> list[str]:
        """The next ``n`` keys at most (fewer: the listing ended)."""
        with self._lock:
            if self._closed:
                return []
            self._busy = True
        try:
            return list(itertools.islice(self._keys, n))
        finally:
            with self._lock:
                self._busy = False
                if self._closed:
                    self._keys.close()

    def close(self) -> None:
        """Release the listing's descriptors (now, or when the batch being read ends)."""
        with self._lock:
            self._closed = True
            if self._busy:
                return
        self._keys.close()


def scan(root: Root, prefix: str) -> tuple[list[str], list[str]]:
    """The keys and the sub-prefixes directly below ``prefix`` (``""`` or ending in ``/``)."""
    fd = root.open_dir(prefix[:-1], prefix or "/")
    if fd is None:
        return [], []
    folders: list[str] = []
    try:
        files = list(_entries(root, fd, prefix, folders))
    finally:
        os.close(fd)
    return sorted(prefix + name for name in files), sorted(f"{prefix}{n}/" for n in folders)


def _entries(root: Root, fd: int, key: str, folders: list[str]) -> Iterator[str]:
    """The names of the listable files in the open folder ``fd`` (the folder key
    ``key``, ``""`` or ending in ``/``), as read; the names of its folders are added
    to ``folders``."""
    try:
        with os.scandir(fd) as it:
            for entry in it:
                name = entry.name
                if name.startswith(TMP_PREFIX) or not valid_name(name):
                    continue  # a temp file or a batch's staging folder; a name no key has
                if entry.is_dir(follow_symlinks=False):
                    folders.append(name)
                elif entry.is_symlink():
                    if root.links_to_file(fd, name, key):
                        yield name
                elif entry.is_file(follow_symlinks=False):
                    yield name
    except OSError as exc:
        if is_missing(exc):
            return
        raise root.error(exc, key or "/", "list", os.path.join(root.real(), key)) from exc
