"""Parsing metadata JSON (``zarr.json``, ``info``, draft metadata) from untrusted bytes.

One parser for every metadata document: anything that is not a JSON object (invalid
UTF-8 or JSON, nesting too deep for the parser, integers with more digits than Python
converts, a top-level array) is an :class:`~asyncshard.errors.InvalidMetadataError`
naming the key, never a ``RecursionError`` or a bare ``ValueError``.
"""

from __future__ import annotations

import json
from typing import Any

from asyncshard.errors import InvalidMetadataError

__all__ = ["parse_json_object"]


def parse_json_object(raw: bytes | bytearray | memoryview, key: str) -> dict[str, Any]:
    """The JSON object ``raw`` holds; ``InvalidMetadataError`` (naming ``key``) otherwise."""
    try:
        doc = json.loads(bytes(raw))
    except RecursionError:
        raise InvalidMetadataError(f"{key}: JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, over-long integers
        raise InvalidMetadataError(f"{key}: not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise InvalidMetadataError(f"{key}: expected a JSON object, got {type(doc).__name__}")
    return doc
