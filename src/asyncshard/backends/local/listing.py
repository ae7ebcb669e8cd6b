"""Listings of the local backend: only what the API accepts.

Listable: folders (not links to them) and regular files (or links to regular files
inside the root) whose names are valid key segments; temp files and the staging folders
of batch writes are hidden.

Every folder is listed through a descriptor: the listed folder is opened level by level
below the root (:meth:`.Root.open_dir`) and each folder below it relative to its
parent's descriptor, links not followed. A folder swapped for a link meanwhile is not
entered, so no listing names what lies outside the root.
"""

from __future__ import annotations

import os

from asyncshard.backends.local.files import TMP_PREFIX, is_missing, overlaps, valid_name
from asyncshard.backends.local.root import Root


def walk(root: Root, prefix: str) -> list[str]:
    """Every key starting with ``prefix``, sorted."""
    parent = prefix.rpartition("/")[0]
    base = parent + "/" if parent else ""
    fd = root.open_dir(parent, prefix or "/")
    if fd is None:
        return []
    keys: list[str] = []
    # the folders open from the listed one down to the current one, each with the
    # names of its subfolders still to list: as many descriptors as levels
    stack: list[tuple[int, str, list[str]]] = []
    try:
        while True:
            files, folders = _entries(root, fd, base)
            keys += [key for key in (base + name for name in files) if key.startswith(prefix)]
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
                return sorted(keys)
    finally:
        for held, _, _ in stack:
            os.close(held)


def scan(root: Root, prefix: str) -> tuple[list[str], list[str]]:
    """The keys and the sub-prefixes directly below ``prefix`` (``""`` or ending in ``/``)."""
    fd = root.open_dir(prefix[:-1], prefix or "/")
    if fd is None:
        return [], []
    try:
        files, folders = _entries(root, fd, prefix)
    finally:
        os.close(fd)
    return sorted(prefix + name for name in files), sorted(f"{prefix}{n}/" for n in folders)


def _entries(root: Root, fd: int, key: str) -> tuple[list[str], list[str]]:
    """The names of the listable files and of the folders in the open folder ``fd``
    (the folder key ``key``, ``""`` or ending in ``/``)."""
    files: list[str] = []
    folders: list[str] = []
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
                        files.append(name)
                elif entry.is_file(follow_symlinks=False):
                    files.append(name)
    except OSError as exc:
        if is_missing(exc):
            return files, folders
        raise root.error(exc, key or "/", "list", os.path.join(root.real(), key)) from exc
    return files, folders
