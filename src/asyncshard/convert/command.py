"""The ``asyncshard shard|unshard|reshard`` commands (click), with a tqdm progress bar.

``cli.py`` registers them: ``cli.add_command(shard)`` and so on. Each converts every
Zarr v3 array of the store at URL (or the ``--array`` paths), or the scales of a
Neuroglancer precomputed volume when the store holds an ``info`` file.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import click
from tqdm import tqdm

from asyncshard.backends.registry import opened
from asyncshard.cli_options import in_flight_option
from asyncshard.convert.api import run_sync
from asyncshard.convert.autoshape import DEFAULT_SHARD_BYTES
from asyncshard.convert.migrate import copy_store
from asyncshard.convert.plan import Request
from asyncshard.convert.precomputed import (
    is_precomputed,
    shard_precomputed_async,
    unshard_precomputed_async,
)
from asyncshard.convert.report import (
    ConversionSummary,
    PassDone,
    PassStarted,
    ProgressEvent,
    TaskDone,
    describe_change,
)
from asyncshard.convert.zarr import convert_store
from asyncshard.errors import AsyncShardError
from asyncshard.formats.zarr3.keys import Separator
from asyncshard.interrupts import on_interrupt
from asyncshard.sizes import size_option
from asyncshard.storage_flags import command_error, pair_options, storage_flags, storage_options
from asyncshard.store import Store

__all__ = ["reshard", "shard", "unshard"]


class Progress:
    """A line per pass naming it and, where ``bars`` says so, a tqdm bar per pass: shards
    (tasks) done, bytes written and the write rate."""

    def __init__(self, quiet: bool, bars: bool = True) -> None:
        self.quiet = quiet
        self.bars = bars
        self.bar: tqdm[Any] | None = None
        self.bytes = 0
        self.started = 0.0

    def __call__(self, event: ProgressEvent) -> None:
        if self.quiet:
            return
        if isinstance(event, PassStarted):
            self.close()
            step = f" pass {event.index}/{event.passes}" if event.passes > 1 else ""
            source, arrow, target = event.description.partition(" -> ")
            what = describe_change(source, target) if arrow else event.description
            tqdm.write(f"{event.array or '/'}{step}: {what}", file=sys.stderr)
            sys.stderr.flush()  # seen now, also where standard error is a pipe
            self.bar = tqdm(
                total=event.tasks,
                desc=f"{event.array or '/'}{step}",
                unit="shard",
                file=sys.stderr,
                dynamic_ncols=True,
                disable=not self.bars,
            )
            self.bytes, self.started = 0, time.perf_counter()
        elif isinstance(event, TaskDone) and self.bar is not None:
            self.bytes += event.result.bytes_written
            rate = self.bytes / max(time.perf_counter() - self.started, 1e-9)
            size = tqdm.format_sizeof(self.bytes, "B", 1024)
            speed = tqdm.format_sizeof(rate, "B/s", 1024)
            self.bar.set_postfix_str(f"{size}, {speed}", refresh=False)
            self.bar.update(1)
        elif isinstance(event, PassDone):
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _shape(value: str | None) -> int | tuple[int, ...] | Literal["auto"] | None:
    if value is None or value.lower() == "none":
        return None
    if value.lower() == "auto":
        return "auto"
    try:
        parts = [int(p) for p in value.replace("x", ",").split(",")]
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: expected N, N,N,... (chunks per shard) or auto"
        ) from None
    if any(p < 1 for p in parts):
        raise click.BadParameter(f"{value!r}: chunks per shard must be positive")
    return parts[0] if len(parts) == 1 else tuple(parts)


@contextmanager
def _dask(scheduler: str | None, workers: int | None) -> Iterator[Any]:
    """A ``distributed.Client`` if asked for (an address, or a local cluster)."""
    if scheduler is None and workers is None:
        yield None
        return
    try:
        import distributed
    except ImportError:
        raise click.ClickException(
            "Dask is not installed: pip install 'asyncshard[dask]'"
        ) from None
    client_type: Any = distributed.Client
    if scheduler is not None:
        with client_type(scheduler) as client:
            yield client
        return
    cluster_type: Any = distributed.LocalCluster
    with (
        # dashboard on a free port: None still takes 8787, and warns when that is in use
        cluster_type(n_workers=workers, threads_per_worker=1, dashboard_address=":0") as cluster,
        client_type(cluster) as client,
    ):
        yield client


async def _convert(
    url: str,
    storage: dict[str, Any],
    fmt: str,
    conversion: Callable[[Store, bool], Coroutine[Any, Any, ConversionSummary]],
) -> ConversionSummary:
    """The one path of every command: open the store once, detect its format once
    (``fmt`` ``auto``), and hand the opened store to ``conversion(store, precomputed)``."""
    async with opened(url, storage) as store:
        precomputed = fmt == "precomputed" or (fmt == "auto" and await is_precomputed(store))
        return await conversion(store, precomputed)


@on_interrupt("arrays stay readable; run the same command again to finish the conversion")
def _run(
    url: str,
    fmt: str,
    zarr_request: Request | None,
    shard_precomputed: bool,
    options: dict[str, Any],
) -> None:
    quiet, as_json = options.pop("quiet"), options.pop("as_json")
    flags = options.pop("endpoint"), options.pop("anon"), options.pop("option")
    dest = options.pop("to", None)
    dest_flags = options.pop("to_endpoint", None), options.pop("to_option", ())
    scheduler, workers = options.pop("dask_scheduler"), options.pop("dask_workers")
    if scheduler is not None and workers is not None:
        raise click.UsageError("give --dask-scheduler or --dask-workers, not both")
    bars = options.pop("progress")
    progress = Progress(quiet, sys.stderr.isatty() if bars is None else bars)
    try:
        if dest is None:
            storage = storage_options(url, *flags)
        else:
            if zarr_request is None:
                raise click.UsageError("missing SHAPE (chunks per shard, e.g. 8 or 4,4,16)")
            if zarr_request.shard_shape is None:
                raise click.UsageError(
                    "--to writes a sharded copy: SHAPE none (unsharding) works in place only"
                )
            if fmt == "precomputed":
                raise click.UsageError("--to converts Zarr hierarchies, not precomputed volumes")
            if options["rebuild_manifest"]:
                raise click.UsageError("--rebuild-manifest applies to in-place conversions")
            if options["sharding"] is not None:
                raise click.UsageError(_SHARDING_APPLIES)
            storage, to_storage = pair_options(url, dest, flags, dest_flags)
        if dest is None and (dest_flags[0] is not None or dest_flags[1]):
            raise click.UsageError("--to-endpoint and --to-option need --to DEST")
        with _dask(scheduler, workers) as client:
            common = {
                "max_in_flight": options["max_in_flight"],
                "client": client,
                "progress": progress,
            }

            def conversion(
                store: Store, precomputed: bool
            ) -> Coroutine[Any, Any, ConversionSummary]:
                if precomputed:
                    if zarr_request is not None and zarr_request.shard_shape is not None:
                        raise click.UsageError("precomputed volumes take --sharding, not SHAPE")
                    scales = options["arrays"] or None
                    if shard_precomputed:
                        return shard_precomputed_async(
                            store,
                            options["sharding"],
                            scales,
                            target_shard_bytes=options["shard_bytes"],
                            **common,
                        )
                    return unshard_precomputed_async(store, scales, **common)
                if zarr_request is None:
                    raise click.UsageError("missing SHAPE (chunks per shard, e.g. 8 or 4,4,16)")
                if options["sharding"] is not None:
                    raise click.UsageError(_SHARDING_APPLIES + "; Zarr arrays take SHAPE")
                return convert_store(
                    store,
                    zarr_request,
                    options["arrays"] or None,
                    manifest=options["manifest"],
                    rebuild_manifest=options["rebuild_manifest"],
                    **common,
                )

            if dest is not None and zarr_request is not None:  # checked above
                summary = run_sync(
                    copy_store(
                        url,
                        dest,
                        zarr_request,
                        options["arrays"] or None,
                        to_storage_options=to_storage,
                        storage_options=storage,
                        **common,
                    )
                )
            else:
                summary = run_sync(_convert(url, storage, fmt, conversion))
    except (AsyncShardError, OSError, ValueError) as exc:
        raise command_error(exc) from None
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=1))
    elif not quiet:
        click.echo(str(summary))


def _options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options every conversion command takes."""
    decorators = [
        click.option(
            "-a",
            "--array",
            "arrays",
            multiple=True,
            metavar="PATH",
            help="Convert only this array (precomputed: this scale key). Repeatable.",
        ),
        click.option(
            "--format",
            "fmt",
            type=click.Choice(["auto", "zarr", "precomputed"]),
            default="auto",
            show_default=True,
            help="Store format; auto: precomputed if there is an info file.",
        ),
        in_flight_option(8, "Shards in memory at once (per Dask worker thread with Dask)."),
        click.option(
            "--dask-scheduler",
            metavar="ADDRESS",
            help="Run the shard tasks on this dask.distributed scheduler.",
        ),
        click.option(
            "--dask-workers",
            type=click.IntRange(min=1),
            metavar="N",
            help="Run the shard tasks on a local Dask cluster of N processes.",
        ),
        click.option(
            "--no-manifest",
            "manifest",
            flag_value=False,
            default=True,
            help="Do not add the nonempty_chunks attribute (kept if present).",
        ),
        click.option(
            "--rebuild-manifest",
            is_flag=True,
            help="Rebuild nonempty_chunks from the data on skipped arrays.",
        ),
        click.option("-q", "--quiet", is_flag=True, help="No progress bar, no summary."),
        click.option(
            "--progress/--no-progress",
            default=None,
            help="Progress bars on standard error (default: only when it is a terminal).",
        ),
        click.option(
            "--json",
            "as_json",
            is_flag=True,
            help="Print the summary as one JSON document on standard output, and nothing "
            "else there (keys: docs/conversion.md).",
        ),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return storage_flags(func)


_SEPARATOR = click.option(
    "--separator",
    type=click.Choice(["/", "."]),
    help="Key separator of the result (default: the array's own, kept in two passes; "
    "the other one takes one).",
)
_INDEX = click.option(
    "--index-location",
    type=click.Choice(["start", "end"]),
    help="Where shard indexes go (default: end, or as they are).",
)


def _json(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from None


_SHARD_BYTES = size_option(
    "--shard-bytes",
    DEFAULT_SHARD_BYTES,
    "Decoded bytes per shard for SHAPE auto (and precomputed without --sharding).",
)
_SHARDING = click.option(
    "--sharding",
    metavar="JSON",
    callback=_json,
    help="Precomputed sharding spec (JSON; precomputed volumes in place only); default: "
    "chosen from each scale's size.",
)
_SHARDING_APPLIES = "--sharding applies to precomputed volumes sharded in place"


_TO = [
    click.option(
        "--to",
        metavar="DEST",
        help="Write the sharded copy of the whole hierarchy (Zarr v2 or v3; OME-Zarr 0.4 "
        "becomes 0.5) to DEST and leave URL untouched.",
    ),
    click.option(
        "--to-endpoint", metavar="URL", help="--endpoint of DEST (then -o is URL's only)."
    ),
    click.option("--to-option", multiple=True, metavar="KEY=VALUE", help="-o of DEST. Repeatable."),
]


def _to_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in reversed(_TO):
        func = decorator(func)
    return func


@click.command("shard")
@click.argument("url")
@click.argument("shape", required=False)
@_SEPARATOR
@_INDEX
@_SHARDING
@_SHARD_BYTES
@_to_options
@_options
def shard(
    url: str,
    shape: str | None,
    separator: Separator | None,
    index_location: Any,
    shard_bytes: int,
    **options: Any,
) -> None:
    """Shard the arrays at URL: SHAPE chunks per shard (8, or 4,4,16 per axis, or auto:
    chosen per array for shards of --shard-bytes).

    Chunk bytes are moved, not re-encoded; arrays already in that layout are skipped;
    an interrupted run leaves readable arrays and is completed by running it again.
    With --to DEST, the sharded copy goes to DEST (Zarr v2 sources need it); the
    storage flags apply to each cloud URL of the two (--anon to URL only), and
    --to-endpoint and --to-option set DEST's instead.
    """
    request = None
    if shape is not None:
        request = Request(_shape(shape), separator, index_location, shard_bytes=shard_bytes)
    options["shard_bytes"] = shard_bytes
    _run(url, options.pop("fmt"), request, True, options)


@click.command("unshard")
@click.argument("url")
@_SEPARATOR
@_options
def unshard(url: str, separator: Separator | None, **options: Any) -> None:
    """Turn the sharded arrays at URL back into one object per chunk."""
    options["sharding"] = None
    _run(url, options.pop("fmt"), Request(None, separator), False, options)


@click.command("reshard")
@click.argument("url")
@click.argument("shape")
@_SEPARATOR
@_INDEX
@_SHARD_BYTES
@_to_options
@_options
def reshard(
    url: str,
    shape: str,
    separator: Separator | None,
    index_location: Any,
    shard_bytes: int,
    **options: Any,
) -> None:
    """Change the shard shape of the arrays at URL (SHAPE "none" unshards, "auto"
    chooses it per array for shards of --shard-bytes).

    With --to DEST, the resharded copy of the whole hierarchy goes to DEST and URL is
    left untouched (as shard --to).
    """
    target = _shape(shape)
    options["sharding"] = None
    options["shard_bytes"] = shard_bytes
    location = None if target is None else index_location
    request = Request(target, separator, location, shard_bytes=shard_bytes)
    _run(url, options.pop("fmt"), request, target is not None, options)


def commands() -> Sequence[click.Command]:
    """The conversion commands, for ``cli.add_command``."""
    return [shard, unshard, reshard]
