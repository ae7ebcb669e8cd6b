"""The ``asyncshard verify`` and ``asyncshard repair`` commands (click)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import click
from tqdm import tqdm

from asyncshard.cli_options import in_flight_option
from asyncshard.convert.api import run_sync
from asyncshard.errors import AsyncShardError, DatasetMismatchError, NoShardedDataError
from asyncshard.integrity.report import IntegrityReport
from asyncshard.integrity.scan import DEFAULT_IN_FLIGHT, repair_async, verify_async
from asyncshard.interrupts import on_interrupt
from asyncshard.storage_flags import command_error, storage_flags, storage_options

__all__ = ["repair", "verify"]

#: Errors besides every command's that mean the command was pointed at the wrong thing
#: (exit status 2, as fsck's usage errors; 0: intact or repaired, 1: damage remains).
USAGE_ERRORS = (NoShardedDataError, DatasetMismatchError)


def _common(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options of both commands."""
    for decorator in reversed(
        [
            click.argument("url"),
            click.option(
                "-a",
                "--dataset",
                "datasets",
                multiple=True,
                help="A Zarr array path or precomputed scale key (repeatable; default: all).",
            ),
            click.option(
                "--decode",
                is_flag=True,
                help="Also decode every chunk through its codecs (Zarr: crc32c, gzip, zstd, "
                "blosc, then the chunk's size; precomputed: gzip).",
            ),
            in_flight_option(DEFAULT_IN_FLIGHT, "Whole shards in memory at once."),
            click.option("--json", "as_json", is_flag=True, help="Print the report as JSON."),
            click.option("-q", "--quiet", is_flag=True, help="No progress bar."),
            storage_flags,
        ]
    ):
        func = decorator(func)
    return func


@on_interrupt(
    "shards not yet read are unchecked (a repair leaves each shard whole: repaired or as it "
    "was); run the same command again"
)
def _run(
    scan: Callable[..., Coroutine[Any, Any, IntegrityReport]],
    url: str,
    options: dict[str, Any],
    **extra: Any,
) -> None:
    """Run a scan with a progress bar; print the report; exit as fsck does: 0 intact or
    repaired, 1 damage remains (or the scan could not finish), 2 a usage error."""
    flags = options.pop("endpoint"), options.pop("anon"), options.pop("option")
    as_json, quiet = options.pop("as_json"), options.pop("quiet")
    bar = tqdm(unit=" shards", file=sys.stderr, disable=quiet or None, leave=False)
    try:
        report = run_sync(
            scan(
                url,
                options.pop("datasets") or None,
                decode=options.pop("decode"),
                max_in_flight=options.pop("max_in_flight"),
                on_shard=lambda _key: bar.update(),
                storage_options=storage_options(url, *flags),
                **extra,
            )
        )
    except (AsyncShardError, OSError, ValueError) as exc:
        raise command_error(exc, USAGE_ERRORS) from None
    finally:
        bar.close()
    click.echo(json.dumps(report.to_json(), indent=1) if as_json else str(report))
    sys.exit(report.exit_code)


@click.command("verify")
@_common
def verify(url: str, **options: Any) -> None:
    """Check every shard of every sharded dataset under URL (Zarr v3 arrays, precomputed
    scales); exit 0 when intact, 1 when damaged, 2 on a usage error.

    Each shard is read whole: its index must decode (and match its checksum), every
    chunk must lie inside it, overlap no other chunk and match its crc32c codec. The
    summary counts the intact chunks no check reaches (no checksum codec), and why.
    """
    _run(verify_async, url, options)


@click.command("repair")
@_common
@click.option("--dry-run", is_flag=True, help="Report what would be rewritten; change nothing.")
@click.option(
    "--from",
    "source",
    metavar="SOURCE",
    help="Put back lost chunks from the same datasets at SOURCE (a backup, or the flat "
    "original; any layout that stores chunks the same way).",
)
@click.option("--from-endpoint", metavar="URL", help="--endpoint of SOURCE.")
@click.option("--from-option", multiple=True, metavar="KEY=VALUE", help="-o of SOURCE.")
def repair(
    url: str,
    dry_run: bool,
    source: str | None,
    from_endpoint: str | None,
    from_option: tuple[str, ...],
    **options: Any,
) -> None:
    """Rewrite each damaged shard at URL from its intact chunks (and those --from
    SOURCE has); list the chunks restored and lost.

    A chunk from SOURCE is used only if it passes the checks verify applies (and
    decodes, where the codecs allow). Writes are conditional on the version inspected:
    a shard another writer changed meanwhile is left alone. Exits 0 when everything is
    intact or repaired, 1 when damage remains (chunks lost, a dry run), 2 on a usage
    error.
    """
    if source is None:
        if from_endpoint is not None or from_option:
            raise click.UsageError("--from-endpoint and --from-option need --from SOURCE")
        _run(repair_async, url, options, dry_run=dry_run)
        return
    source_options = storage_options(
        source, from_endpoint, False, from_option, endpoint_flag="--from-endpoint"
    )
    _run(
        repair_async,
        url,
        options,
        dry_run=dry_run,
        source=source,
        source_storage_options=source_options,
    )
