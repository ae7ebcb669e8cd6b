"""``python -m asyncshard``: the ``asyncshard`` command."""

from asyncshard.cli import cli

if __name__ == "__main__":
    cli(prog_name="asyncshard")
