"""The ``asyncshard`` command: browse and edit any store from the shell."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, ParamSpec, TypeVar

import click

from asyncshard import __version__, loops
from asyncshard.backends.registry import open_store
from asyncshard.errors import AsyncShardError, InvalidKeyError
from asyncshard.interrupts import EXIT_INTERRUPTED, Interrupted
from asyncshard.keys import dir_prefix
from asyncshard.ranges import ByteRange, parse_range
from asyncshard.startup import started
from asyncshard.storage_flags import command_error, storage_flags, storage_options
from asyncshard.store import Store
from asyncshard.transfer import copy_tree_async, remove_tree_async

P = ParamSpec("P")
R = TypeVar("R")


def run_async(func: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """Run an async command; turn expected failures into one line and exit status 1 (2
    for a usage error: :func:`~asyncshard.storage_flags.command_error`)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return loops.run(func(*args, **kwargs))
        except BrokenPipeError:
            raise  # the reader went away (``ls | head``): click ends quietly, status 1
        except (AsyncShardError, OSError) as exc:
            raise command_error(exc) from None

    return wrapper


def _open(url: str, flags: dict[str, Any]) -> Store:
    """The store at ``url`` with the storage flags' options."""
    return open_store(url, storage_options(url, flags["endpoint"], flags["anon"], flags["option"]))


def _range(ctx: click.Context, param: click.Parameter, value: str | None) -> ByteRange | None:
    if value is None:
        return None
    try:
        return parse_range(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


class _Group(click.Group):
    """The command group: Ctrl-C anywhere in a command (parsing it, or in a command
    without a message of its own) is ``Error: interrupted`` and status 130, not click's
    "Aborted!" and 1."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _interrupted():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _interrupted():
            return super().invoke(ctx)


@contextlib.contextmanager
def _interrupted() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted("interrupted") from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="asyncshard")
def cli() -> None:
    """asyncshard: sharded chunk data on memory, local files, S3, GCS and HTTP."""


@cli.command("ls")
@click.argument("url")
@click.argument("prefix", default="")
@click.option("-r", "--recursive", is_flag=True, help="List every key below PREFIX.")
@storage_flags
@run_async
async def ls(url: str, prefix: str, recursive: bool, **flags: Any) -> None:
    """List the keys and folders directly below PREFIX (all keys with -r).

    Exits 1 when nothing is listed: no such folder or prefix, or an empty one (stores
    tell them apart no more than ``aws s3 ls`` does).
    """
    listed = 0
    async with _open(url, flags) as store:
        if recursive:
            async for key in store.list_prefix(prefix):
                click.echo(key)
                listed += 1
        else:
            keys, prefixes = await store.list_dir(prefix)
            for name in sorted(keys + prefixes):
                click.echo(name)
            listed = len(keys) + len(prefixes)
    if not listed:
        raise click.ClickException(_nothing_at(f"{url.rstrip('/')}/{prefix}" if prefix else url))


def _nothing_at(where: str) -> str:
    """The error of ``ls`` and ``rm -r`` that found no object at ``where``."""
    return f"nothing at {where}: no such folder, or an empty one"


@cli.command("cat")
@click.argument("url")
@click.argument("key")
@click.option(
    "--range", "byte_range", callback=_range, help="START-END (end exclusive), START- or -LENGTH."
)
@storage_flags
@run_async
async def cat(url: str, key: str, byte_range: ByteRange | None, **flags: Any) -> None:
    """Write the object KEY (or a byte range of it) to standard output."""
    async with _open(url, flags) as store:
        data = await store.get(key, byte_range)
    if data is None:
        raise click.ClickException(f"no such key: {key}")
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@cli.command("put")
@click.argument("url")
@click.argument("key")
@click.argument("source", type=click.Path(exists=True, allow_dash=True))
@storage_flags
@run_async
async def put(url: str, key: str, source: str, **flags: Any) -> None:
    """Store the contents of SOURCE (a file, or - for standard input) as KEY; a folder
    SOURCE is copied below KEY (as ``cp -r SOURCE URL/KEY``)."""
    if os.path.isdir(source):
        async with _open(url, flags) as store:
            summary = await copy_tree_async(source, store, dst_prefix=dir_prefix(key))
        click.echo(str(summary))
        return
    with click.open_file(source, "rb") as file:
        data = file.read()
    async with _open(url, flags) as store:
        await store.set(key, data)


@cli.command("rm")
@click.argument("url")
@click.argument("keys", nargs=-1)
@click.option(
    "-r",
    "--recursive",
    is_flag=True,
    help="Delete every object below URL (or below each folder KEYS names).",
)
@click.option(
    "-y", "--yes", is_flag=True, help="Do not ask for confirmation (needed off a terminal)."
)
@storage_flags
def rm(url: str, keys: tuple[str, ...], recursive: bool, yes: bool, **flags: Any) -> None:
    """Delete the objects KEYS (missing ones are ignored), or with -r every object below
    the folder URL (or below the folders KEYS below it), printing how many.

    -r asks for confirmation on a terminal; elsewhere (scripts, pipes) it refuses to run
    without -y, so that a mistyped URL cannot empty a bucket unseen. Exits 1 when -r
    finds nothing to delete: no such folder, or an empty one (a typo is no success).
    """
    if not recursive:
        if not keys:
            raise click.UsageError("missing KEYS (or -r to delete everything below URL)")
        _delete(url, keys, flags)
        return
    try:
        prefixes = tuple(dir_prefix(k) for k in keys)
    except InvalidKeyError as exc:
        raise click.BadParameter(str(exc), param_hint="KEYS") from None
    where = [f"{url.rstrip('/')}/{p}" for p in prefixes] or [url]
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(
                "rm -r deletes every object below " + ", ".join(where) + ": give -y to "
                "confirm (standard input is no terminal to ask on)"
            )
        click.confirm(f"Delete every object below {', '.join(where)}?", abort=True)
    removed = _delete(url, prefixes or ("",), flags, tree=True)
    if not removed:  # a typo must not pass for a success
        raise click.ClickException(_nothing_at(", ".join(where)))
    noun = "object" if removed == 1 else "objects"
    click.echo(f"removed {removed} {noun} below {', '.join(where)}")


@run_async
async def _delete(
    url: str, keys: tuple[str, ...], flags: dict[str, Any], tree: bool = False
) -> int:
    """Delete ``keys`` (``tree``: every object below each) at ``url``; how many."""
    async with _open(url, flags) as store:
        if not tree:
            await store.erase_values(keys)
            return len(set(keys))
        return sum([await remove_tree_async(store, prefix) for prefix in keys])


def _register_commands() -> None:
    """Attach the commands that live with their subsystems."""
    from asyncshard.convert.command import reshard, shard, unshard
    from asyncshard.integrity.command import repair, verify
    from asyncshard.server.command import serve
    from asyncshard.transfer.command import cp

    for command in (serve, shard, unshard, reshard, verify, repair, cp):
        cli.add_command(command)


_register_commands()


def main() -> None:
    """Entry point of the ``asyncshard`` command (console script and ``python -m``)."""
    started()  # Ctrl-C from here on: _Group's one line and status 130
    try:
        cli(prog_name="asyncshard")
    except KeyboardInterrupt:  # outside click's main: after the command, say
        click.echo("Error: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
