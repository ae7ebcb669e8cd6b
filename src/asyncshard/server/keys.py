"""URL paths to store keys: the server's only way into the store (pure).

The raw request path (before any decoding or normalisation) is split on ``/``, each
segment is percent-decoded on its own and must be UTF-8, and the result goes through the
stores' own key validation. So ``..`` and ``.`` segments (plain or encoded as ``%2e``),
empty segments (``//``, hence absolute paths), an encoded ``/`` (``%2F``) inside a
segment, backslashes and NUL are all rejected with :class:`InvalidKeyError`: nothing
outside the served root has a URL.
"""

from __future__ import annotations

import functools
from typing import NamedTuple
from urllib.parse import quote, unquote_to_bytes

from asyncshard.errors import InvalidKeyError
from asyncshard.store import validate_key


class UrlPath(NamedTuple):
    """What a URL path names: an object key, or a folder (``""`` or a prefix ending in ``/``)."""

    key: str
    is_dir: bool


def _segment(raw: str) -> str:
    try:
        text = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidKeyError(f"invalid path segment {raw!r}: not UTF-8") from None
    if "/" in text:
        raise InvalidKeyError(f"invalid path segment {raw!r}: an encoded '/' is not allowed")
    return text


#: Paths up to this long have their answer remembered (4,096 of them: a bounded memory,
#: whatever the clients send).
REMEMBERED_PATH = 256


def parse_path(raw_path: str) -> UrlPath:
    """The key or folder that the raw request path ``raw_path`` names.

    ``/`` is the root folder, ``/a/b/`` the folder ``a/b/`` and ``/a/b`` the key ``a/b``.
    The answers for the most recent short paths are remembered (viewers ask for the same
    paths again and again); a failure is not.
    """
    if len(raw_path) <= REMEMBERED_PATH:
        return _remembered(raw_path)
    return _parse(raw_path)


def _parse(raw_path: str) -> UrlPath:
    path = raw_path
    if "?" in path or "#" in path:
        path = path.split("?", 1)[0].split("#", 1)[0]
    if not path.startswith("/"):
        raise InvalidKeyError(f"invalid request path {raw_path!r}: not an absolute path")
    body = path[1:]
    if not body:
        return UrlPath("", True)
    is_dir = body.endswith("/")
    if body.isascii() and "%" not in body:  # nothing to decode: the segments as they are
        key = validate_key(body[:-1] if is_dir else body)
    else:
        segments = [_segment(s) for s in (body[:-1] if is_dir else body).split("/")]
        key = validate_key("/".join(segments))
    return UrlPath(key + "/" if is_dir else key, is_dir)


_remembered = functools.lru_cache(maxsize=4096)(_parse)


def key_url_path(key: str) -> str:
    """The URL path of a key or folder (each segment percent-encoded)."""
    return "/" + "/".join(quote(s, safe="") for s in key.split("/"))
