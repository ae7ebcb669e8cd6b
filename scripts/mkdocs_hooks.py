"""MkDocs hook: the configuration reference, generated from the code when the site builds.

``docs/reference/configuration.md`` holds ``<!-- options: NAME -->`` markers; each becomes a
table read from the code itself (signatures, dataclass fields, docstrings, and obstore's
typed configuration stubs), so the reference cannot drift from what the code accepts.
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import griffe

SRC = Path(__file__).resolve().parent.parent / "src"
MARKER = re.compile(r"<!-- options: ([\w.:]+) -->")
#: Parameters that are not options: the location, and the catch-alls.
NOT_OPTIONS = {"self", "cls", "url", "root", "inner", "layout", "fmt", "format", "config"}


def _package(name: str) -> griffe.Object:
    loader = griffe.GriffeLoader(search_paths=[str(SRC), *sys.path], docstring_parser="google")
    module = loader.load(name)
    loader.resolve_aliases(implicit=True, external=False)
    return module


_CACHE: dict[str, griffe.Object] = {}


def _find(path: str) -> griffe.Object:
    top, _, rest = path.partition(".")
    if top not in _CACHE:
        _CACHE[top] = _package(top)
    obj = _CACHE[top]
    return obj[rest] if rest else obj


def _described(docstring: griffe.Docstring | None, kinds: tuple[str, ...]) -> dict[str, str]:
    """Name -> description from a docstring's Args/Attributes sections; an entry naming
    several (``a, b: ...``) describes each."""
    found: dict[str, str] = {}
    if docstring is None:
        return found
    for section in docstring.parse("google"):
        if section.kind.value not in kinds:
            continue
        for item in section.value:
            for name in str(item.name).split(","):
                found[name.strip()] = " ".join(str(item.description).split())
    return found


#: reST roles and literals of the docstrings, as Markdown code.
_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc):`~?(?:[\w.]*\.)?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _cell(text: str) -> str:
    text = _LITERAL.sub(r"`\1`", _ROLE.sub(r"`\1`", text))
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """Code in a table cell: as HTML, since a ``|`` (a union type) would end the cell."""
    return f"<code>{html.escape(text).replace('|', '&#124;')}</code>" if text else ""


def _size(value: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value >= 1 << shift and value % (1 << shift) == 0:
            return f"{value >> shift} {unit}"
    return str(value)


def _default(value: Any) -> str:
    """A default value as the reference shows it (sizes in KiB/MiB, none as a dash)."""
    if value is inspect.Parameter.empty or value is dataclasses.MISSING:
        return "required"
    if value is None:
        return "—"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1024:
        return f"`{value}` ({_size(value)})"
    return f"`{_cell(repr(value))}`"


def _runtime(path: str) -> Any:
    """The object at a dotted path, imported."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _table(rows: list[tuple[str, str, str, str]]) -> str:
    lines = ["| option | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{n}` | {_code(t)} | {d} | {_cell(m)} |" for n, t, d, m in rows]
    return "\n".join(lines)


def keyword_rows(path: str) -> list[tuple[str, str, str, str]]:
    """The keyword-only options of a function (its positional parameters say what it
    works on, not how)."""
    live = inspect.signature(_runtime(path)).parameters
    return [
        row for row in signature_rows(path) if live[row[0]].kind is inspect.Parameter.KEYWORD_ONLY
    ]


def signature_rows(path: str) -> list[tuple[str, str, str, str]]:
    """The keyword options of a class's ``__init__`` (or a function), described from its
    own docstring (the class's, for ``__init__``)."""
    obj = _find(path)
    function = obj.members["__init__"] if obj.is_class else obj
    meaning = _described(obj.docstring, ("parameters",))
    meaning.update(_described(function.docstring, ("parameters",)))
    annotations = {p.name: str(p.annotation or "") for p in function.parameters}
    live = _runtime(path)
    rows = []
    for param in inspect.signature(live).parameters.values():
        if param.name in NOT_OPTIONS or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        rows.append(
            (
                param.name,
                annotations.get(param.name, ""),
                _default(param.default),
                meaning.get(param.name, ""),
            )
        )
    return rows


def field_rows(path: str) -> list[tuple[str, str, str, str]]:
    """The fields of a dataclass, described from its ``Attributes`` section."""
    obj = _find(path)
    meaning = _described(obj.docstring, ("attributes",))
    annotations = {n: str(m.annotation or "") for n, m in obj.members.items() if m.is_attribute}
    return [
        (f.name, annotations.get(f.name, ""), _default(f.default), meaning.get(f.name, ""))
        for f in dataclasses.fields(_runtime(path))
    ]


def obstore_rows(path: str) -> list[tuple[str, str, str, str]]:
    """The keys of one of obstore's typed configuration dicts (from its stubs)."""
    obj = _find(path)
    rows = []
    for name, member in obj.members.items():
        if not member.is_attribute or name.startswith("_"):
            continue
        text = member.docstring.value if member.docstring else ""
        first = text.split("\n\n", 1)[0]
        env = re.findall(r"\*\*Environment variables?\*\*:?\s*((?:.|\n)*?)(?:\n\n|$)", text)
        if env:
            first += " Environment: " + ", ".join(re.findall(r"`([A-Z0-9_]+)`", env[0]))
        rows.append((name, str(member.annotation or ""), "—", first))
    return rows


GENERATORS = {
    "signature": signature_rows,
    "keywords": keyword_rows,
    "fields": field_rows,
    "obstore": obstore_rows,
}


def render(spec: str) -> str:
    """``kind:dotted.path`` -> a Markdown table."""
    kind, _, path = spec.partition(":")
    return _table(GENERATORS[kind](path))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the configuration reference's markers."""
    return MARKER.sub(lambda m: render(m.group(1)), markdown)
