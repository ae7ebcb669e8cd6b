"""``asyncshard serve``: run the server over a store URL, or over the demo volume."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from aiohttp import web

from asyncshard.backends.local import LocalStore
from asyncshard.backends.registry import open_store
from asyncshard.cache import DEFAULT_CACHE_BYTES
from asyncshard.errors import AsyncShardError
from asyncshard.server.app import DEFAULT_CACHE_CONTROL, make_app
from asyncshard.server.demo import neuroglancer_state, neuroglancer_url, write_demo

TOKEN_ENV = "ASYNCSHARD_TOKEN"
DEFAULT_PORT = 8000
#: Access log: client, request line, status, bytes sent and the Range asked for.
ACCESS_LOG_FORMAT = '%a "%r" %s %b range=%{Range}i'
_SIZE = re.compile(r"\s*([0-9]+)\s*([kmgt]?)(i?b)?\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``1048576``, ``512k``, ``256M``, ``1GiB`` -> bytes (binary multiples)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (use e.g. 268435456, 256M or 1GiB)")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number * (1 << (10 * " kmgt".index(unit or " ")))


def _size(ctx: click.Context, param: click.Parameter, value: str | int) -> int:
    try:
        return parse_size(str(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _link_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


async def run_app(
    app: web.Application,
    host: str,
    port: int,
    *,
    ready: Callable[[int], None] | None = None,
    access_log: bool = True,
) -> None:
    """Serve ``app`` on ``host:port`` until SIGINT/SIGTERM; ``ready(port)`` once listening."""
    runner = web.AppRunner(
        app,
        access_log=logging.getLogger("aiohttp.access") if access_log else None,
        access_log_format=ACCESS_LOG_FORMAT,
        handler_cancellation=True,
    )
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        if ready is not None:
            ready(bound)
        await stop.wait()
    finally:
        await runner.cleanup()


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
@click.option(
    "--cache-bytes",
    default=f"{DEFAULT_CACHE_BYTES >> 20}M",
    callback=_size,
    show_default=True,
    help="Shard-index cache of --unshard, in bytes (256M, 1G...).",
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
@click.option("--quiet", is_flag=True, help="No access log.")
def serve(
    url: str | None,
    host: str,
    port: int,
    allow_origin: str,
    cache_control: str,
    cache_bytes: int,
    unshard: bool,
    writable: bool,
    token: str | None,
    demo: str | None,
    quiet: bool,
) -> None:
    """Serve the store at URL over HTTP to web viewers (Neuroglancer, vizarr...).

    Range requests, ETags, CORS and folder listings for any store: a local folder,
    s3://bucket/prefix, gs://..., http(s)://... With --demo, serve a generated volume.
    """
    if (url is None) == (demo is None):
        raise click.UsageError("give a store URL to serve, or --demo [FOLDER]")
    if writable and unshard:
        raise click.UsageError("--unshard serves a read-only view: it excludes --writable")
    if writable and not token:
        token = secrets.token_urlsafe(24)
        click.echo(f"Write token (send 'Authorization: Bearer <token>'): {token}", err=True)
    if not quiet:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        logging.getLogger("aiohttp.access").setLevel(logging.INFO)
    try:
        with _demo_folder(demo or "") as folder:
            if demo is not None:
                summary = asyncio.run(write_demo(folder))
                click.echo(
                    f"Wrote the demo volume (z, y, x = {summary['shape_zyx']}) to {folder}: "
                    f"{summary['zarr_shards']} zarr3 shards, "
                    f"{summary['precomputed_shards']} precomputed shards."
                )
                url = str(Path(folder).resolve())
            assert url is not None
            store = open_store(url)
            if isinstance(store, LocalStore) and not writable and not store.root.is_dir():
                raise click.ClickException(f"no such folder: {store.root}")
            app = make_app(
                store,
                allow_origin=allow_origin,
                cache_control=cache_control or None,
                unshard=unshard,
                cache_bytes=cache_bytes,
                writable=writable,
                token=token,
            )

            def ready(bound: int) -> None:
                base = f"http://{_link_host(host)}:{bound}"
                click.echo(f"Serving {url} at {base}/ (Ctrl-C to stop)")
                if demo is not None:
                    link = neuroglancer_url(neuroglancer_state(base))
                    click.echo("Open the demo in Neuroglancer (zarr3 left, precomputed right):")
                    click.echo(link)
                sys.stdout.flush()

            asyncio.run(run_app(app, host, port, ready=ready, access_log=not quiet))
    except (AsyncShardError, OSError, ValueError) as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass


def main() -> None:  # pragma: no cover - ``python -m asyncshard.server.command``
    serve(prog_name="asyncshard serve")


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
