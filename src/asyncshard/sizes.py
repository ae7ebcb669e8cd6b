"""Byte sizes on the command line: ``1048576``, ``512k``, ``256M``, ``1GiB``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["FORMS", "parse_size", "size_option"]

_SIZE = re.compile(r"\s*([0-9]+)\s*([kmgt]?)(i?b)?\s*", re.IGNORECASE)
F = TypeVar("F", bound=Callable[..., Any])


def parse_size(text: str) -> int:
    """``1048576``, ``512k``, ``256M``, ``1GiB`` -> bytes (binary multiples)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (use e.g. 268435456, 256M or 1GiB)")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number * (1 << (10 * " kmgt".index(unit or " ")))


#: The accepted forms, as the help of every size option ends.
FORMS = "SIZE: bytes, or a number with k, M, G or T (binary multiples; 256M, 1GiB)."


def _size(ctx: click.Context, param: click.Parameter, value: str | int) -> int:
    try:
        return parse_size(str(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def size_option(flag: str, default: int, help: str) -> Callable[[F], F]:
    """A click option taking a size in bytes (``256M``, ``1GiB``...), shown as ``SIZE``.

    Args:
        flag: The option's name.
        default: The default, in bytes (shown in MiB).
        help: What the size bounds; the accepted forms are added.
    """
    return click.option(
        flag,
        metavar="SIZE",
        default=f"{default >> 20}M",
        callback=_size,
        show_default=True,
        help=f"{help} {FORMS}",
    )
