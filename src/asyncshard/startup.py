"""Ctrl-C while the ``asyncshard`` command is still starting (importing its modules, the
first second or so): one line and exit status 130, never a traceback.

The package imports this module first, before anything slow, and it only acts in the
``asyncshard`` command's own process (the console script, or ``python -m asyncshard``):
there it handles SIGINT until :func:`started` hands Ctrl-C back to Python (and to
:mod:`asyncshard.interrupts`). Standard library only, so that it is in place at once.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["EXIT_INTERRUPTED", "LINE", "exit_if_the_command", "is_the_command", "started"]

#: Exit status after Ctrl-C (as shells report a command ended by SIGINT).
EXIT_INTERRUPTED = 130

#: What Ctrl-C while starting prints (as :class:`asyncshard.interrupts.Interrupted` would).
LINE = "Error: interrupted: the command had not started; nothing was done\n"


def is_the_command() -> bool:
    """Whether this process is the ``asyncshard`` command (its console script, or
    ``python -m asyncshard``), not a program that imports the library."""
    argv = list(getattr(sys, "orig_argv", ()))
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1] == "asyncshard":
        return True
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in ("asyncshard", "asyncshard.exe")


def exit_if_the_command(signum: int = signal.SIGINT, frame: object = None) -> None:
    """In the ``asyncshard`` command, print :data:`LINE` and exit 130 (nothing to clean
    up: no command has run); elsewhere return. The SIGINT handler while starting.

    Args:
        signum: The signal (as a signal handler is called).
        frame: The interrupted frame (unused).
    """
    if is_the_command():
        sys.stderr.write(LINE)
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)


def started() -> None:
    """The command is ready to handle Ctrl-C itself: restore Python's SIGINT handler."""
    if signal.getsignal(signal.SIGINT) is exit_if_the_command:
        signal.signal(signal.SIGINT, signal.default_int_handler)


if is_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, exit_if_the_command)
