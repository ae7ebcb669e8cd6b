"""Ctrl-C in a command: one line saying what state things are in and how to finish,
and exit status 130 (as shells report a command ended by SIGINT), never click's bare
"Aborted!" with status 1, which ``verify`` would mean as "damage found"."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click

from asyncshard.startup import EXIT_INTERRUPTED

__all__ = ["EXIT_INTERRUPTED", "Interrupted", "on_interrupt"]

P = ParamSpec("P")
R = TypeVar("R")


class Interrupted(click.ClickException):
    """The command was interrupted: exit status 130."""

    exit_code = EXIT_INTERRUPTED


def on_interrupt(message: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a command end with ``Error: interrupted: <message>`` on Ctrl-C.

    Args:
        message: What the interruption left and how to finish (e.g. "run it again").
    """

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return func(*args, **kwargs)
            except KeyboardInterrupt:
                raise Interrupted(f"interrupted: {message}") from None

        return wrapper

    return decorate
