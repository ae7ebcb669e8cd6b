"""Folder listings: HTML for browsers and Neuroglancer, JSON for programs (pure).

``GET /folder/`` answers an HTML page with one ``<a href="name">`` per object and one
``<a href="sub/">`` per sub-folder, hrefs relative to the folder and percent-encoded:
the format Neuroglancer's ``http`` key-value store parses (it keeps the links that
resolve below the folder; the ``../`` link is for people and is ignored by it).

``GET /folder/?list=json`` (or an ``Accept`` header that names ``application/json`` and
not ``text/html``) answers::

    {"prefix": "folder/", "keys": ["a", "b"], "prefixes": ["sub/"]}

with names relative to ``prefix`` (``prefix + name`` is the full key), sorted.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote


def wants_json(query: Mapping[str, str], accept: str | None) -> bool:
    """Whether a listing request asks for JSON rather than HTML."""
    fmt = query.get("list") or query.get("format")
    if fmt is not None:
        return fmt.lower() == "json"
    accept = (accept or "").lower()
    return "application/json" in accept and "text/html" not in accept


def _names(prefix: str, full: Sequence[str]) -> list[str]:
    return sorted(k[len(prefix) :] for k in full if k.startswith(prefix) and len(k) > len(prefix))


def listing_json(prefix: str, keys: Sequence[str], prefixes: Sequence[str]) -> dict[str, Any]:
    """The JSON listing of ``prefix`` from full keys and full child prefixes."""
    return {"prefix": prefix, "keys": _names(prefix, keys), "prefixes": _names(prefix, prefixes)}


def listing_html(prefix: str, keys: Sequence[str], prefixes: Sequence[str]) -> str:
    """The HTML listing of ``prefix`` from full keys and full child prefixes."""
    title = html.escape("/" + prefix)
    rows: list[str] = []
    if prefix:
        rows.append('<li><a href="../">../</a></li>')
    for name in _names(prefix, prefixes):
        bare = name.rstrip("/")
        href = quote(bare, safe="") + "/"
        rows.append(f'<li><a href="{html.escape(href)}">{html.escape(bare)}/</a></li>')
    for name in _names(prefix, keys):
        href = quote(name, safe="")
        rows.append(f'<li><a href="{html.escape(href)}">{html.escape(name)}</a></li>')
    body = "\n".join(rows)
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>Index of {title}</title></head>\n"
        f"<body><h1>Index of {title}</h1>\n<ul>\n{body}\n</ul>\n</body></html>\n"
    )
