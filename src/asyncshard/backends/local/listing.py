"""Listings of the local backend: only what the API accepts.

Listable: folders (not links to them) and regular files (or links to regular files
inside the root) whose names are valid key segments; temp files and the staging folders
of batch writes are hidden.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from asyncshard.backends.local.files import (
    TMP_PREFIX,
    is_missing,
    overlaps,
    valid_name,
    within,
)
from asyncshard.backends.local.root import Root


def walk(root: Root, prefix: str) -> list[str]:
    """Every key starting with ``prefix``, sorted."""
    parent = prefix.rpartition("/")[0]
    keys: list[str] = []
    todo = [(root.folder(parent), parent + "/" if parent else "")]
    while todo:
        folder, base = todo.pop()
        for entry, is_folder in _entries(root, folder, base):
            key = base + entry.name
            if is_folder:
                if overlaps(key + "/", prefix):
                    todo.append((entry.path, key + "/"))
            elif key.startswith(prefix):
                keys.append(key)
    return sorted(keys)


def scan(root: Root, prefix: str) -> tuple[list[str], list[str]]:
    """The keys and the sub-prefixes directly below ``prefix`` (``""`` or ending in ``/``)."""
    folder = root.folder(prefix[:-1])
    keys: list[str] = []
    prefixes: list[str] = []
    for entry, is_folder in _entries(root, folder, prefix):
        if is_folder:
            prefixes.append(prefix + entry.name + "/")
        else:
            keys.append(prefix + entry.name)
    return sorted(keys), sorted(prefixes)


def _entries(root: Root, folder: str, key: str) -> Iterator[tuple[os.DirEntry[str], bool]]:
    """``(entry, is_folder)`` for each listable entry of ``folder`` (key prefix ``key``)."""
    real = root.real()
    try:
        with os.scandir(folder) as it:
            for entry in it:
                name = entry.name
                if not valid_name(name):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if not name.startswith(TMP_PREFIX):  # a batch's staging folder
                        yield entry, True
                elif (
                    entry.is_file()
                    and not name.startswith(TMP_PREFIX)
                    and (not entry.is_symlink() or within(os.path.realpath(entry.path), real))
                ):
                    yield entry, False
    except OSError as exc:
        if is_missing(exc):
            return
        raise root.error(exc, key or "/", "list", folder) from exc
