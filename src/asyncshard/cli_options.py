"""Click options shared by the commands of several subsystems, spelt the same in each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["AliasedOption", "in_flight_option"]

F = TypeVar("F", bound=Callable[..., Any])


class AliasedOption(click.Option):
    """A click option whose names after its first long one are aliases: accepted, not
    shown in ``--help`` or the CLI reference."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        """The help line, naming the short and the canonical long name only.

        Args:
            ctx: The click context.
        """
        longs = [o for o in self.opts if o.startswith("--")]
        shown = [o for o in self.opts if not o.startswith("--") or o == longs[0]]
        everything, self.opts = self.opts, shown
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = everything


def in_flight_option(default: int, help: str) -> Callable[[F], F]:
    """``-j/--max-in-flight N`` (also ``--in-flight``): how many shards a command holds in
    memory at once, passed as ``max_in_flight``.

    Args:
        default: The default number.
        help: What is in flight, for the help text.
    """
    return click.option(
        "-j",
        "--max-in-flight",
        "--in-flight",
        "max_in_flight",
        cls=AliasedOption,
        type=click.IntRange(min=1),
        default=default,
        show_default=True,
        help=help,
    )
