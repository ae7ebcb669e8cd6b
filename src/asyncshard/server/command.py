"""``asyncshard serve``: run the server over a store URL, or over the demo volume."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from asyncshard import loops
from asyncshard.cache import DEFAULT_CACHE_BYTES
from asyncshard.errors import AsyncShardError
from asyncshard.server.config import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_CACHE_CONTROL,
    DEFAULT_DATA_CACHE_BYTES,
    DEFAULT_WRITE_TIMEOUT,
    AppConfig,
)
from asyncshard.server.demo import neuroglancer_state, neuroglancer_url, write_demo
from asyncshard.server.runner import (
    CannotServe,
    ServeConfig,
    check_url,
    configure_logging,
    serve_config,
)
from asyncshard.server.workers import WorkerFailed, serve_workers
from asyncshard.sharding.engine import DEFAULT_RECHECK_AFTER
from asyncshard.sizes import size_option
from asyncshard.storage_flags import command_error, storage_flags, storage_options

TOKEN_ENV = "ASYNCSHARD_TOKEN"
DEFAULT_PORT = 8000


def _link_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


@contextlib.contextmanager
def _demo_folder(folder: str) -> Iterator[str]:
    if folder:
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="asyncshard-demo-") as tmp:
        yield tmp


@click.command("serve")
@click.argument("url", required=False)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option(
    "--port", default=DEFAULT_PORT, show_default=True, type=int, help="Port (0: any free port)."
)
@click.option(
    "--allow-origin",
    default="*",
    show_default=True,
    help="Access-Control-Allow-Origin: *, an origin or a comma-separated list; '' for no CORS.",
)
@click.option(
    "--cache-control",
    default=DEFAULT_CACHE_CONTROL,
    show_default=True,
    help="Cache-Control of objects; '' sends none.",
)
@size_option("--cache-bytes", DEFAULT_CACHE_BYTES, "Shard-index cache of --unshard.")
@size_option(
    "--data-cache-bytes",
    DEFAULT_DATA_CACHE_BYTES,
    "Chunk-data cache of --unshard, else small local files kept, per process (0: none).",
)
@click.option(
    "--recheck-after",
    default=DEFAULT_RECHECK_AFTER,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds a cached shard index may answer 'no such chunk' before the shard is "
    "checked again (--unshard; 0: always).",
)
@click.option(
    "--unshard",
    is_flag=True,
    help="Serve sharded Zarr v3 arrays and precomputed volumes "
    "as if unsharded (for viewers without sharding support).",
)
@click.option("--writable", is_flag=True, help="Accept PUT and DELETE with the bearer token.")
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    help=f"Bearer token for writes (or ${TOKEN_ENV}); --writable without one makes one up.",
)
@click.option(
    "--demo",
    "demo",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[FOLDER]",
    help="Write a small sharded demo volume (zarr3 and precomputed) to FOLDER (default: a "
    "temporary folder), serve it and print a Neuroglancer link.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Server processes sharing the port (SO_REUSEPORT), each with its own caches; "
    "use about one per core.",
)
@size_option(
    "--buffer-bytes",
    DEFAULT_BUFFER_BYTES,
    "Body bytes one server process holds for all clients at once; pieces shrink to "
    "64 KiB when it runs low.",
)
@click.option(
    "--write-timeout",
    default=DEFAULT_WRITE_TIMEOUT,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a client may accept no data before it is disconnected.",
)
@click.option("--quiet", is_flag=True, help="No access log.")
@storage_flags
def serve(
    url: str | None,
    host: str,
    port: int,
    demo: str | None,
    workers: int,
    quiet: bool,
    endpoint: str | None,
    anon: bool,
    option: tuple[str, ...],
    **answer: Any,
) -> None:
    """Serve the store at URL over HTTP to web viewers (Neuroglancer, vizarr...).

    Range requests, ETags, CORS and folder listings for any store: a local folder,
    s3://bucket/prefix, gs://..., http(s)://... With --demo, serve a generated volume.
    Its root is listed once first: credentials refused, no such bucket, an unreachable
    endpoint or (read-only) nothing there exit 1. Error answers give a request id; the
    details go to the log.
    """
    if (url is None) == (demo is None):
        raise click.UsageError("give a store URL to serve, or --demo [FOLDER]")
    writable = answer["writable"]
    if writable and answer["unshard"]:
        raise click.UsageError("--unshard serves a read-only view: it excludes --writable")
    if workers > 1 and not hasattr(socket, "SO_REUSEPORT"):
        raise click.UsageError("--workers needs SO_REUSEPORT, which this system lacks")
    if writable and not answer["token"]:
        answer["token"] = secrets.token_urlsafe(24)
        click.echo(
            f"Write token (send 'Authorization: Bearer <token>'): {answer['token']}", err=True
        )
    app_config = AppConfig(**answer)  # the flags' own checks keep its ValueErrors away
    configure_logging(quiet)
    try:
        loops.loop_factory()  # a bad ASYNCSHARD_EVENT_LOOP fails here, not in each worker
        storage = storage_options(url, endpoint, anon, option)
        with _demo_folder(demo or "") as folder:
            if demo is not None:
                summary = loops.run(write_demo(folder))
                click.echo(
                    f"Wrote the demo volume (z, y, x = {summary['shape_zyx']}) to {folder}: "
                    f"{summary['zarr_shards']} zarr3 shards, "
                    f"{summary['precomputed_shards']} precomputed shards."
                )
                url = str(Path(folder).resolve())
            assert url is not None
            config = ServeConfig(
                url,
                app_config,
                host=host,
                port=port,
                quiet=quiet,
                workers=workers,
                storage_options=storage,
            )

            def ready(bound: int) -> None:
                base = f"http://{_link_host(host)}:{bound}"
                more = f" with {workers} worker processes" if workers > 1 else ""
                click.echo(f"Serving {url} at {base}/{more} (Ctrl-C to stop)")
                if demo is not None:
                    link = neuroglancer_url(neuroglancer_state(base))
                    click.echo("Open the demo in Neuroglancer (zarr3 left, precomputed right):")
                    click.echo(link)
                sys.stdout.flush()

            if workers == 1:
                loops.run(serve_config(config, ready=ready))
            else:
                loops.run(check_url(config))
                serve_workers(config, ready)
    except CannotServe as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(
                f"Address already in use: port {port} on {host} is taken; choose another "
                "with --port, or --port 0 for a free one"
            ) from None
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    except (AsyncShardError, ValueError, WorkerFailed) as exc:
        raise command_error(exc) from None
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass


def main() -> None:  # pragma: no cover - ``python -m asyncshard.server.command``
    serve(prog_name="asyncshard serve")


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
