"""The conversion journal: one small object next to the metadata of a converting node.

It records the pass in flight (``source`` and ``target`` metadata) and where the whole
conversion is going (``final``), and lives from before the first new object is written
until the last old object is deleted. With it, a later run knows whether the metadata
was switched (resume by deleting the old objects), or not (resume writing, or roll back
the new objects if the request changed); without it, objects in the target key space
are not ours and the conversion refuses to overwrite them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from asyncshard.errors import ConversionError
from asyncshard.store import Store

__all__ = ["JOURNAL_NAME", "Journal", "journal_key", "normalize", "read_journal"]

JOURNAL_NAME = "asyncshard-conversion.json"
_FORMAT = "asyncshard-conversion"


def journal_key(prefix: str) -> str:
    """Key of the journal of the node whose keys start with ``prefix``."""
    return prefix + JOURNAL_NAME


def normalize(doc: Any) -> Any:
    """``doc`` as it reads back from JSON (tuples become lists), for comparisons."""
    return json.loads(json.dumps(doc))


@dataclass(frozen=True)
class Journal:
    """A pass in flight: ``source`` -> ``target`` metadata, on the way to ``final``."""

    source: dict[str, Any]
    target: dict[str, Any]
    final: dict[str, Any]

    def to_bytes(self) -> bytes:
        """The journal object."""
        doc = {
            "format": _FORMAT,
            "version": 1,
            "source": self.source,
            "target": self.target,
            "final": self.final,
        }
        return json.dumps(doc, indent=1).encode()

    async def write(self, store: Store, prefix: str) -> None:
        """Write (or replace) the journal of ``prefix``."""
        await store.set(journal_key(prefix), self.to_bytes())


async def read_journal(store: Store, prefix: str) -> Journal | None:
    """The journal of ``prefix``, or ``None``; ``ConversionError`` if it is unreadable."""
    key = journal_key(prefix)
    raw = await store.get(key)
    if raw is None:
        return None
    try:
        doc = json.loads(bytes(raw))
        if doc.get("format") != _FORMAT:
            raise ValueError(f"format is {doc.get('format')!r}")
        return Journal(dict(doc["source"]), dict(doc["target"]), dict(doc["final"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConversionError(f"{key}: unreadable conversion journal ({exc})") from None


async def remove_journal(store: Store, prefix: str) -> None:
    """Delete the journal of ``prefix`` (the conversion is complete)."""
    await store.erase_values([journal_key(prefix)])
