"""The ``asyncshard cp`` command (click), with a tqdm progress bar on a terminal.

``cli.py`` registers it. ``cp -r SRC DST`` copies the folder SRC into the folder DST;
``cp SRC DST`` copies one object (DST ending in ``/``: into that folder, same name).
SRC and DST are store URLs or local paths.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click
from tqdm import tqdm

from asyncshard.convert.api import run_sync
from asyncshard.errors import AsyncShardError, CopyError, UnknownSchemeError
from asyncshard.interrupts import on_interrupt
from asyncshard.sizes import size_option
from asyncshard.storage_flags import command_error, pair_options, storage_flags
from asyncshard.transfer.copying import DEFAULT_MAX_BUFFER, DEFAULT_PART_SIZE, copy_tree_async
from asyncshard.transfer.summary import CopiedObject, CopySummary

__all__ = ["cp", "split_object_url"]


class CopyProgress:
    """A tqdm bar of objects done (no total: the listing streams), with bytes copied
    and the rate; failed keys are written above it as they fail."""

    def __init__(self, bars: bool, quiet: bool) -> None:
        self.quiet = quiet
        self.bar = tqdm(
            unit=" objects",
            file=sys.stderr,
            dynamic_ncols=True,
            disable=quiet or not bars,
            leave=False,
        )
        self.bytes = 0
        self.started = time.perf_counter()

    def __call__(self, done: CopiedObject) -> None:
        if done.outcome == "failed" and not self.quiet:
            tqdm.write(f"failed: {done.key}", file=sys.stderr)
            sys.stderr.flush()
        if done.outcome == "copied":
            self.bytes += done.size
        rate = self.bytes / max(time.perf_counter() - self.started, 1e-9)
        size = tqdm.format_sizeof(self.bytes, "B", 1024)
        self.bar.set_postfix_str(f"{size}, {tqdm.format_sizeof(rate, 'B/s', 1024)}", False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def split_object_url(url: str) -> tuple[str, str]:
    """``(folder URL, object name)`` of a URL or path naming one object."""
    trimmed = url.rstrip("/")
    if "://" in trimmed:
        scheme, _, rest = trimmed.partition("://")
        bucket, slash, path = rest.partition("/")
        folder, _, name = path.rpartition("/")
        if not slash or not name:
            raise click.UsageError(f"{url!r} names no object (a bucket alone: use -r)")
        return f"{scheme}://{bucket}/{folder}" if folder else f"{scheme}://{bucket}", name
    folder, name = os.path.split(os.path.abspath(trimmed))
    return folder, name


@click.command("cp")
@click.argument("src")
@click.argument("dst")
@click.option(
    "-r", "--recursive", is_flag=True, help="Copy every object below the folder SRC into DST."
)
@click.option(
    "--size-only",
    is_flag=True,
    help="Skip objects of equal size without comparing contents (fast, but blind to an "
    "object rewritten at the same size).",
)
@size_option("--part-size", DEFAULT_PART_SIZE, "Larger objects are read and written in parts.")
@size_option("--max-buffer", DEFAULT_MAX_BUFFER, "Bytes held in memory at once, at most.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar, no summary.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="A progress bar on standard error (default: only when it is a terminal).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--to-endpoint", metavar="URL", help="--endpoint of DST (then -o is SRC's only).")
@click.option("--to-option", multiple=True, metavar="KEY=VALUE", help="-o of DST. Repeatable.")
@storage_flags
def cp(src: str, dst: str, recursive: bool, **options: Any) -> None:
    """Copy the object SRC to DST, or with -r every object below the folder SRC into
    the folder DST. SRC and DST are URLs (s3://, gs://, az://, http(s):// as a source,
    file://) or local paths.

    Objects already equal at DST are skipped (equal size and MD5 ETags, else equal
    bytes, compared by streaming both), so an interrupted copy is completed by running
    it again; no object is ever visible half-written. The storage flags apply to each
    cloud URL (--anon to SRC only); --to-endpoint and --to-option set DST's instead.
    Exits 1 if any object failed (naming the first ones), or if SRC holds nothing.
    """
    _copy(src, dst, recursive, options)


@on_interrupt("objects copied so far are whole; run the same command again to copy the rest")
def _copy(src: str, dst: str, recursive: bool, options: dict[str, Any]) -> None:
    """The cp command, its options as click passed them."""
    flags = options.pop("endpoint"), options.pop("anon"), options.pop("option")
    to = options.pop("to_endpoint"), options.pop("to_option")
    try:
        src_options, dst_options = pair_options(src, dst, flags, to)
    except UnknownSchemeError as exc:  # s3:bucket, a typo
        raise command_error(exc) from None
    part_size, max_buffer = options.pop("part_size"), options.pop("max_buffer")
    for name, value in (("--part-size", part_size), ("--max-buffer", max_buffer)):
        if value <= 0:
            raise click.BadParameter("must be more than 0 bytes", param_hint=name)
    prefix = dst_prefix = ""
    keys: list[str] | None = None
    if recursive:
        if "://" not in src and os.path.isfile(src):
            raise click.UsageError(f"{src!r} is a file: copy it without -r")
    else:
        if "://" not in src and os.path.isdir(src):
            raise click.UsageError(f"{src!r} is a folder: copy it with cp -r")
        src, name = split_object_url(src)
        if dst.endswith("/") or ("://" not in dst and os.path.isdir(dst)):
            target = name
        else:
            dst, target = split_object_url(dst)
        prefix, dst_prefix, keys = name, target, [name]
    bars = options.pop("progress")
    quiet, as_json = options.pop("quiet"), options.pop("as_json")
    # one object: no bar, and its failure is the error line, not a line above a bar
    progress = CopyProgress(sys.stderr.isatty() if bars is None else bars, quiet or not recursive)
    try:
        summary = run_sync(
            copy_tree_async(
                src,
                dst,
                prefix,
                dst_prefix,
                keys=keys,
                size_only=options.pop("size_only"),
                part_size=part_size,
                max_buffer=max_buffer,
                progress=progress,
                storage_options=src_options,
                dst_storage_options=dst_options,
            )
        )
    except CopyError as exc:
        progress.close()
        if keys is not None:  # one object: its error is the whole story
            raise click.ClickException(exc.summary.failures[0][1]) from None
        _report(exc.summary, as_json, quiet)
        raise click.ClickException(
            "\n".join([f"failed ({exc.summary.failed}):", *exc.summary.failure_lines()])
        ) from None
    except (AsyncShardError, OSError, ValueError) as exc:
        raise command_error(exc) from None
    finally:
        progress.close()
    _report(summary, as_json, quiet)


def _report(summary: CopySummary, as_json: bool, quiet: bool) -> None:
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=1))
    elif not quiet:
        click.echo(str(summary))
