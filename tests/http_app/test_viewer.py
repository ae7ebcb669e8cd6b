"""A real viewer: Neuroglancer's bundled client in headless chromium reads the served demo.

The ``neuroglancer`` wheel serves its built client (``neuroglancer.Viewer()`` on
127.0.0.1); chromium renders it with software WebGL2 and is driven through the DevTools
protocol. The viewer shows the demo volume twice, side by side: the sharded zarr3 array
(left) and the sharded precomputed volume (right), both read from the asyncshard server.
Once the viewer reports every layer loaded and ready, ``Page.captureScreenshot`` is taken
and checked: each panel shows structured data (not a blank or uniform canvas) and the two
panels show the same image. The server's request log shows how the data was read.

Set ``ASYNCSHARD_SCREENSHOTS=<folder>`` to keep the screenshots.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import neuroglancer
import numpy as np
import numpy.typing as npt
import pytest
from aiohttp import web
from PIL import Image

from asyncshard.backends import LocalStore
from asyncshard.ranges import Offset, Range
from asyncshard.server.app import LoggedRequest, make_app
from asyncshard.server.config import AppConfig
from asyncshard.server.demo import (
    PRECOMPUTED_PATH,
    SCALE_KEY,
    ZARR_PATH,
    neuroglancer_state,
)
from asyncshard.server.ranges import parse_range_header
from tests.http_app.browser import Chromium, Page, chromium_binary
from tests.servers._threaded import ThreadedApp

WIDTH, HEIGHT = 1200, 700
LOAD_TIMEOUT = 25.0
STATUS_JS = """(() => {
  const v = window.viewer;
  if (!v) return JSON.stringify({phase: "starting"});
  const layers = v.layerManager.managedLayers.map((l) => {
    if (l.layer === null) return {name: l.name, state: "loading"};
    const errors = (l.layer.dataSources || [])
      .map((d) => d.loadState && d.loadState.error ? String(d.loadState.error.message) : null)
      .filter((e) => e !== null);
    return {name: l.name, state: errors.length ? "error" : "ok", errors};
  });
  return JSON.stringify({phase: "running", ready: v.isReady(), layers});
})()"""


@pytest.fixture(scope="session")
def browser() -> Iterator[Chromium]:
    """Headless chromium (installed with apt-get when missing)."""
    try:
        binary = chromium_binary()
    except RuntimeError as exc:
        pytest.fail(f"no usable chromium: {exc}")
    chromium = Chromium(binary, width=WIDTH, height=HEIGHT).start()
    try:
        yield chromium
    finally:
        chromium.stop()


@pytest.fixture(scope="session")
def viewer() -> Any:
    """Neuroglancer's python server, serving its bundled client on 127.0.0.1."""
    neuroglancer.set_server_bind_address("127.0.0.1")
    return neuroglancer.Viewer()


class DemoServer:
    """``asyncshard serve`` over the demo folder, in a thread, logging its requests."""

    def __init__(self, folder: Path, **options: Any) -> None:
        self.log: deque[LoggedRequest] = deque()
        self.folder = folder
        self.options = options
        self._app = ThreadedApp(self._factory, "asyncshard-demo")

    async def _factory(self) -> web.Application:
        return make_app(LocalStore(self.folder), AppConfig(**self.options), request_log=self.log)

    def __enter__(self) -> DemoServer:
        self._app.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._app.stop()

    @property
    def url(self) -> str:
        return self._app.url


@pytest.fixture
async def page(browser: Chromium) -> AsyncIterator[Page]:
    async with aiohttp.ClientSession() as session:
        tab = await browser.page(session)
        try:
            yield tab
        finally:
            await tab.close()


def viewer_state(base_url: str) -> dict[str, Any]:
    """The demo's viewer state, without axis lines and scale bar (cleaner statistics)."""
    state = neuroglancer_state(base_url)
    state.update(showAxisLines=False, showScaleBar=False, showDefaultAnnotations=False)
    return state


async def load_and_capture(page: Page, viewer: Any, state: dict[str, Any]) -> bytes:
    """Show ``state``, wait until every layer loaded and the viewer is ready, screenshot.

    A page that does not get ready in time is reloaded once.
    """
    viewer.set_state(neuroglancer.ViewerState(state))
    names = {layer["name"] for layer in state["layers"]}
    last: Any = None
    for attempt in range(2):
        await page.navigate(viewer.get_viewer_url())
        deadline = time.monotonic() + LOAD_TIMEOUT
        streak = 0
        while time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            try:
                last = json.loads(await page.evaluate(STATUS_JS))
            except (RuntimeError, TypeError, json.JSONDecodeError):
                continue  # navigating: no document yet
            layers = last.get("layers", [])
            errors = [layer for layer in layers if layer["state"] == "error"]
            if errors:
                pytest.fail(f"Neuroglancer could not load a layer: {errors}\n{page.console}")
            loaded = {layer["name"] for layer in layers if layer["state"] == "ok"}
            streak = streak + 1 if last.get("ready") and loaded == names else 0
            if streak >= 3:  # ready on consecutive polls: the chunks are drawn
                await asyncio.sleep(0.3)
                return await page.screenshot()
        print(f"attempt {attempt + 1}: not ready after {LOAD_TIMEOUT} s: {last}")
    pytest.fail(f"the viewer never got ready: {last}\nconsole: {page.console[-20:]}")


def grey(png: bytes) -> npt.NDArray[np.float64]:
    return np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)


def panel_crops(
    img: npt.NDArray[np.float64], radius: int = 70
) -> tuple[npt.NDArray[np.float64], list[npt.NDArray[np.float64]]]:
    """The centre of the left panel, and the centres of the right panel shifted by up to
    a few pixels (the two panels differ by the splitter's width)."""
    h, w = img.shape
    cy = 48 + (h - 48) // 2  # below the top bar and the layer bars
    left = img[cy - radius : cy + radius, w // 4 - radius : w // 4 + radius]
    rights = [
        img[
            cy + dy - radius : cy + dy + radius, 3 * w // 4 + dx - radius : 3 * w // 4 + dx + radius
        ]
        for dx in range(-15, 16)
        for dy in range(-5, 6)
    ]
    return left, rights


def assert_shows_the_volume_twice(png: bytes, name: str) -> None:
    """Both panels show structured data, and the same data."""
    keep = os.environ.get("ASYNCSHARD_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{name}.png").write_bytes(png)
    img = grey(png)
    assert img.shape == (HEIGHT, WIDTH)
    left, rights = panel_crops(img)
    for crop in (left, rights[len(rights) // 2]):
        assert crop.std() > 25, f"{name}: a panel is (nearly) uniform: std {crop.std():.1f}"
        assert len(np.unique(crop)) > 50, f"{name}: a panel has too few grey levels"
        assert crop.max() - crop.min() > 120
    best = max(float(np.corrcoef(left.ravel(), r.ravel())[0, 1]) for r in rights)
    assert best > 0.95, f"{name}: the zarr3 and precomputed panels differ (corr {best:.2f})"


def shard_reads(log: deque[LoggedRequest], prefix: str) -> list[LoggedRequest]:
    return [r for r in log if r.method == "GET" and r.path.startswith(prefix)]


def _first_byte(header: str) -> int | None:
    """Where the one range of a ``Range`` header starts, as the server parses it
    (``None``: a suffix, several ranges, or a header the server ignores)."""
    ranges = parse_range_header(header)
    if ranges is None or len(ranges) != 1:
        return None
    (rng,) = ranges
    if isinstance(rng, Range):
        return rng.start
    return rng.offset if isinstance(rng, Offset) else None


def not_whole(reads: list[LoggedRequest]) -> list[LoggedRequest]:
    """The reads that are not of whole objects, in log (answer) order.

    Allowed: a whole object (200), a whole object the browser had cached and revalidated
    (304), and the rest of a whole object whose transfer the browser cut short, once it
    was asked for whole: Neuroglancer cancels requests it no longer needs, and chromium
    keeps the part it got (the answer has an ETag and ``Accept-Ranges``) and later asks
    for the remaining bytes (206, ``bytes=A-B`` with ``A > 0``)."""
    asked_whole: set[str] = set()
    odd: list[LoggedRequest] = []
    for r in reads:
        if r.range is None:
            asked_whole.add(r.path)
            if r.status not in (200, 304):
                odd.append(r)
            continue
        start = _first_byte(r.range)
        resumed = r.path in asked_whole and start is not None and start > 0
        if not (resumed and r.status == 206):
            odd.append(r)
    return odd


def test_only_resumed_transfers_of_whole_objects_pass_as_whole() -> None:
    """The check of the unsharded view's reads, on a log chromium produced in CI."""
    chunk, other = "/demo.zarr/c/2/0/6", "/demo.zarr/c/2/1/6"
    resumed = [
        LoggedRequest("GET", chunk, None, 200),
        LoggedRequest("GET", chunk, "bytes=3663-3663", 206),
        LoggedRequest("GET", chunk, "bytes=3663-7596", 206),
        LoggedRequest("GET", other, None, 304),
    ]
    assert not_whole(resumed) == []
    odd = [
        LoggedRequest("GET", "/demo.zarr/c/3/1/6", "bytes=10-20", 206),  # never asked whole
        LoggedRequest("GET", chunk, "bytes=-64", 206),  # a suffix: a shard index read
        LoggedRequest("GET", chunk, "bytes=0-99", 206),  # from the start: no resumption
        LoggedRequest("GET", chunk, "bytes=100-", 416),
        LoggedRequest("GET", chunk, None, 404),
    ]
    assert not_whole([*resumed, *odd]) == odd


async def test_neuroglancer_shows_sharded_zarr3_and_precomputed(
    page: Page, viewer: Any, demo_folder: Path
) -> None:
    with DemoServer(demo_folder) as server:
        png = await load_and_capture(page, viewer, viewer_state(server.url))
        log = list(server.log)
    assert_shows_the_volume_twice(png, "sharded")
    zarr = shard_reads(server.log, f"/{ZARR_PATH}/c/")
    pre = shard_reads(server.log, f"/{PRECOMPUTED_PATH}/{SCALE_KEY}/")
    for reads in (zarr, pre):
        assert reads, log
        assert all(r.range is not None and r.status == 206 for r in reads), reads
    assert all(r.path.endswith(".shard") for r in pre)
    assert len({r.path for r in zarr}) > 1 and len({r.path for r in pre}) > 1, "several shards"


async def test_neuroglancer_through_the_unsharded_view(
    page: Page, viewer: Any, demo_folder: Path
) -> None:
    """``--unshard``: the same state, both layers read as unsharded data."""
    with DemoServer(demo_folder, unshard=True) as flat:
        png = await load_and_capture(page, viewer, viewer_state(flat.url))
    assert_shows_the_volume_twice(png, "unshard")
    zarr = shard_reads(flat.log, f"/{ZARR_PATH}/c/")
    pre = shard_reads(flat.log, f"/{PRECOMPUTED_PATH}/{SCALE_KEY}/")
    for reads in (zarr, pre):
        assert reads and not not_whole(reads), not_whole(reads)
    coords = [tuple(int(c) for c in r.path.rsplit("/c/", 1)[1].split("/")) for r in zarr]
    assert max(max(c) for c in coords) > 1, "inner-chunk keys beyond the 2x2x2 shard grid"
    assert not any(r.path.endswith(".shard") for r in pre), "chunk names, not shard files"


LIST_JS = """(async (url) => {
  // Neuroglancer's getHtmlDirectoryListing (src/kvstore/http/html_directory_listing.ts),
  // run in the page: a cross-origin fetch asking for HTML, hrefs through XPath.
  const response = await fetch(url, {headers: {accept: "text/html"}});
  const type = response.headers.get("content-type");
  if (!response.ok || type === null || !/\\btext\\/html\\b/i.test(type)) return null;
  const doc = new DOMParser().parseFromString(await response.text(), "text/html");
  const nodes = doc.evaluate("//a/@href", doc, null, XPathResult.UNORDERED_NODE_SNAPSHOT_TYPE);
  const out = new Set();
  for (let i = 0; i < nodes.snapshotLength; ++i) {
    const href = nodes.snapshotItem(i).textContent.split(/[?#]/)[0];
    const resolved = new URL(href, url).toString();
    if (href && resolved.startsWith(url) && resolved !== url) {
      out.add(decodeURIComponent(resolved.substring(url.length)));
    }
  }
  return Array.from(out).sort();
})"""


async def test_the_browser_lists_folders_the_way_neuroglancer_does(
    page: Page, viewer: Any, demo_folder: Path
) -> None:
    """Neuroglancer's listing algorithm, cross-origin from its own page, in chromium."""
    await page.navigate(viewer.get_viewer_url())
    with DemoServer(demo_folder) as server, DemoServer(demo_folder, unshard=True) as flat:
        for _ in range(40):  # the page's origin must be loaded before fetching
            if await page.evaluate("document.readyState") == "complete":
                break
            await asyncio.sleep(0.1)
        listed = await page.evaluate(f'{LIST_JS}("{server.url}/")', await_promise=True)
        assert listed == [f"{PRECOMPUTED_PATH}/", f"{ZARR_PATH}/"]
        listed = await page.evaluate(
            f'{LIST_JS}("{server.url}/{ZARR_PATH}/c/1/1/")', await_promise=True
        )
        assert listed == ["0", "1"]  # shard objects
        listed = await page.evaluate(f'{LIST_JS}("{flat.url}/{ZARR_PATH}/c/")', await_promise=True)
        assert listed == ["0/", "1/"]  # unsharded view: folders as stored, chunks not listed
