"""Version strings of cloud objects: the ETag, plus the backend's object version if any.

A version is ``<etag>`` or ``<etag>#<version>`` (GCS generation, S3 version id), opaque
to callers. Conditional reads send the ETag; conditional writes send the ETag (S3,
Azure) or the generation (GCS).
"""

from __future__ import annotations


def encode_version(e_tag: str | None, version: str | None) -> str | None:
    """The version string of an object with ``e_tag`` and backend ``version``."""
    if version is None:
        return e_tag
    return f"{e_tag or ''}#{version}"


def decode_version(value: str) -> tuple[str | None, str | None]:
    """``(e_tag, version)`` of a version string made by :func:`encode_version`."""
    e_tag, sep, version = value.rpartition("#")
    if not sep or '"' in version:
        return value, None
    return e_tag or None, version or None


def same_etag(a: str, b: str) -> bool:
    """Whether two version strings carry the same ETag (what ``If-Match`` compares)."""
    return decode_version(a)[0] == decode_version(b)[0]
