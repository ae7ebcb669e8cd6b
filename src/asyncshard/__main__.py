"""``python -m asyncshard``: the ``asyncshard`` command."""

from asyncshard.cli import main

if __name__ == "__main__":
    main()
