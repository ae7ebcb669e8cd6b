"""Folder listings: HTML in the format Neuroglancer parses, JSON for programs."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin

import aiohttp
import pytest

from asyncshard.backends import LocalStore
from asyncshard.server.listing import listing_html, listing_json, wants_json
from tests.http_app.conftest import Served, ServeFactory


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v is not None]


def neuroglancer_entries(base: str, html: str) -> tuple[list[str], list[str]]:
    """What Neuroglancer's http kvstore makes of a listing of ``base`` (a folder URL):
    links resolved against it, kept when strictly below it, split into keys and folders."""
    parser = Links()
    parser.feed(html)
    keys, dirs = [], []
    for href in parser.hrefs:
        resolved = urljoin(base, href.split("?")[0].split("#")[0])
        if resolved.startswith(base) and resolved != base:
            name = unquote(resolved[len(base) :])
            (dirs if name.endswith("/") else keys).append(name.rstrip("/"))
    return sorted(keys), sorted(dirs)


async def test_html_listing_of_the_root(served: Served, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{served.url}/", headers={"Accept": "text/html"}) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/html")
        html = await r.text()
    assert neuroglancer_entries(f"{served.url}/", html) == (["empty", "meta.json", "obj"], ["d"])


async def test_html_listing_of_a_folder(served: Served, http: aiohttp.ClientSession) -> None:
    base = f"{served.url}/d/"
    async with http.get(base) as r:
        html = await r.text()
    assert neuroglancer_entries(base, html) == (["a", "b.bin"], ["sp ace", "sub"])
    assert '<a href="../">' in html  # for people; Neuroglancer drops it (outside the folder)
    base = f"{served.url}/d/sp%20ace/"
    async with http.get(base) as r:
        html = await r.text()
    assert neuroglancer_entries(base, html) == (["naïve key#1?.bin"], [])


async def test_listed_links_fetch_the_objects(served: Served, http: aiohttp.ClientSession) -> None:
    base = f"{served.url}/d/sp%20ace/"
    async with http.get(base) as r:
        parser = Links()
        parser.feed(await r.text())
    href = next(h for h in parser.hrefs if h != "../")
    async with http.get(aiohttp.client.URL(urljoin(base, href), encoded=True)) as r:
        assert (r.status, await r.read()) == (200, b"u")


@pytest.mark.parametrize(
    ("query", "accept"),
    [("?list=json", None), ("", "application/json"), ("?format=json", "text/html")],
)
async def test_json_listing(
    served: Served, http: aiohttp.ClientSession, query: str, accept: str | None
) -> None:
    headers = {"Accept": accept} if accept else {}
    async with http.get(f"{served.url}/d/{query}", headers=headers) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("application/json")
        assert await r.json() == {
            "prefix": "d/",
            "keys": ["a", "b.bin"],
            "prefixes": ["sp ace/", "sub/"],
        }


async def test_missing_folder_is_404_but_an_empty_root_lists(
    serve: ServeFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    empty = tmp_path / "empty-root"
    empty.mkdir()
    async with serve(store=LocalStore(empty)) as s:
        async with http.get(f"{s.url}/?list=json") as r:
            assert r.status == 200
            assert await r.json() == {"prefix": "", "keys": [], "prefixes": []}
        async with http.get(f"{s.url}/nope/") as r:
            assert r.status == 404


def test_wants_json() -> None:
    assert wants_json({"list": "json"}, "text/html")
    assert not wants_json({"list": "html"}, "application/json")
    assert wants_json({}, "application/json")
    assert not wants_json({}, "text/html,application/json;q=0.9")
    assert not wants_json({}, None)
    assert not wants_json({}, "*/*")


def test_listing_escapes_names() -> None:
    html = listing_html("x/", ['x/<b>&"', "x/a:b"], ["x/s s/"])
    assert '<a href="%3Cb%3E%26%22">&lt;b&gt;&amp;&quot;</a>' in html
    assert 'href="a%3Ab"' in html  # never a scheme
    assert 'href="s%20s/"' in html
    assert listing_json("x/", ["x/a"], ["x/s/"]) == {
        "prefix": "x/",
        "keys": ["a"],
        "prefixes": ["s/"],
    }
