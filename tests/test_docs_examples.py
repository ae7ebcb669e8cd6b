"""Every code example of the documentation site runs.

The pages are those of ``mkdocs.yml``'s nav, with the README and CHANGELOG sections they
include through snippets (``--8<-- "README.md:name"``) read where they are included, each
once. Every fenced block is one of:

* ``python``: run, the blocks of one page in order in one namespace (as a reader runs
  them), in a fresh temporary working directory;
* ``sh``/``bash``/``console``: each ``asyncshard ...`` command (``$ `` prompts and ``\\``
  continuations allowed) run through the CLI, which must exit 0;
* ``text`` (output, listings, diagrams, synopses): not run;
* anything preceded by ``<!-- not-run: REASON -->`` (installs, servers that run until
  stopped, the test suite itself): not run.

Any other block fails :func:`test_every_block_runs_or_is_marked`, so a new example
cannot escape silently. Docstrings (which the API reference renders) are held to the
same rule: their fenced blocks run as a page's do; ``>>>`` examples are refused.

Examples reach storage the way the docs show it: ``s3://bucket/...`` and
``gs://bucket/...`` run against the suite's SeaweedFS and GCS fake (a fresh prefix per
page; the endpoint and credentials are those the docs write, replaced by the test
server's, or the ``AWS_*`` environment variables the examples rely on). A page's data
comes from setup hooks, named right before the block that needs it:
``<!-- example-setup: NAME[, NAME] -->``, NAME one of :data:`SETUPS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncshard import open_store
from asyncshard.cli import cli
from tests.servers.fixtures import (  # noqa: F401 - shared session servers
    gcs_fake,
    s3_server,
    unique_prefix,
)
from tests.servers.gcs_fake import FakeGCS, service_account_key
from tests.servers.s3 import S3Server

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"\s*$')
MARKER = re.compile(r"^<!-- (not-run|example-setup): (.+?) -->$")
RUN_PYTHON = {"python", "py"}
RUN_SHELL = {"sh", "bash", "console", "shell"}
NOT_RUN = {"text"}


@dataclass
class Block:
    """One fenced block: where it is written, its fence info, code, and its marker."""

    source: str
    line: int
    info: str
    code: str
    marker: tuple[str, str] | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def runs(self) -> bool:
        if self.marker is not None and self.marker[0] == "not-run":
            return False
        return self.info in RUN_PYTHON | RUN_SHELL

    @property
    def accounted_for(self) -> bool:
        """Runs, or is marked as not run (``text`` fence or a not-run comment)."""
        marked = self.marker is not None and self.marker[0] == "not-run" and self.marker[1]
        return self.runs or self.info in NOT_RUN or bool(marked)

    @property
    def setups(self) -> list[str]:
        if self.marker is None or self.marker[0] != "example-setup":
            return []
        return [name.strip() for name in self.marker[1].split(",")]


@dataclass
class Page:
    """A nav page and the blocks written on it (its own and those it includes)."""

    path: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def runnable(self) -> list[Block]:
        return [b for b in self.blocks if b.runs]


def nav_pages() -> list[str]:
    """The Markdown files of mkdocs.yml's nav, in order."""
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str) and node.endswith(".md"):
            found.append(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(nav)
    return found


def _section(path: str, name: str | None) -> list[tuple[str, int, str]]:
    """``(file, line number, line)`` of a snippet: a whole file, or its section between
    ``--8<-- [start:name]`` and ``--8<-- [end:name]``."""
    lines = (ROOT / path).read_text().splitlines()
    numbered = [(path, i + 1, line) for i, line in enumerate(lines)]
    if name is None:
        return numbered
    start = next(i for i, line in enumerate(lines) if f"--8<-- [start:{name}]" in line)
    end = next(i for i, line in enumerate(lines) if f"--8<-- [end:{name}]" in line)
    return numbered[start + 1 : end]


def _expanded(page: str) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for source, number, line in _section(f"docs/{page}", None):
        match = SNIPPET.match(line)
        if match:
            out.extend(_section(match.group(1), match.group(2)))
        else:
            out.append((source, number, line))
    return out


def _blocks(lines: list[tuple[str, int, str]]) -> list[Block]:
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        source, number, line = lines[i]
        match = FENCE.match(line)
        if not match:
            i += 1
            continue
        indent, info = match.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j][2].strip() == "```")
        code = "\n".join(text[len(indent) :] for _, _, text in lines[i + 1 : end])
        before = [text.strip() for _, _, text in lines[max(0, i - 2) : i] if text.strip()]
        marker = MARKER.match(before[-1]) if before else None
        found = (marker.group(1), marker.group(2).strip()) if marker else None
        blocks.append(Block(source, number, info, code, found))
        i = end + 1
    return blocks


def _docstring_pages() -> list[Page]:
    """The modules whose docstrings hold examples (the API reference renders them):
    fenced blocks as on a page, and doctest lines (``>>>``), which are not run here and
    so are never accounted for."""
    pages = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        text = path.read_text()
        if "```" not in text and ">>> " not in text:
            continue
        name = path.relative_to(ROOT).as_posix()
        numbered = [(name, i + 1, line) for i, line in enumerate(text.splitlines())]
        page = Page(name, _blocks(numbered))
        page.blocks += [
            Block(name, n, "doctest", line) for _, n, line in numbered if ">>> " in line
        ]
        pages.append(page)
    return pages


def site_pages() -> list[Page]:
    """Every nav page with its blocks (a block included by two pages counts once), and
    the docstrings' examples."""
    seen: set[str] = set()
    pages = []
    for path in nav_pages():
        page = Page(path)
        for block in _blocks(_expanded(path)):
            if block.where not in seen:
                seen.add(block.where)
                page.blocks.append(block)
        pages.append(page)
    return pages + _docstring_pages()


PAGES = site_pages()
BLOCKS = [b for page in PAGES for b in page.blocks]


def test_every_block_runs_or_is_marked() -> None:
    unmarked = [f"{b.where} (```{b.info})" for b in BLOCKS if not b.accounted_for]
    assert not unmarked, (
        "code blocks that neither run nor say why not: give them a runnable fence "
        "(python, sh) or mark them (```text for output and listings, or "
        "<!-- not-run: reason --> before the fence): " + ", ".join(unmarked)
    )


def test_the_site_has_the_examples_it_should() -> None:
    """The collection itself works: README sections arrive through the guide pages,
    and the examples of every kind are found."""
    sources = {b.source for b in BLOCKS}
    assert {"README.md", "docs/cloud.md", "docs/conversion.md"} <= sources
    running = [b for b in BLOCKS if b.runs]
    assert sum(b.info == "python" for b in running) >= 9
    assert any(b.info in RUN_SHELL for b in running)
    assert all(name in SETUPS for b in BLOCKS for name in b.setups), "unknown setup hook"
    assert all(hook.__doc__ for hook in SETUPS.values()), "every setup hook says what it writes"


# -- running ------------------------------------------------------------------------------


@dataclass
class Context:
    """What one page's examples run with: a working directory, and the test servers
    (started only for pages that reach them)."""

    cwd: Path
    prefix: str
    s3: S3Server | None = None
    gcs: FakeGCS | None = None

    def s3_url(self, path: str) -> str:
        assert self.s3 is not None, "this setup needs a page with s3:// examples"
        return f"s3://{self.s3.bucket}/{self.prefix}/{path}"


def _rewrite(code: str, ctx: Context) -> str:
    """The docs' locations and credentials, made the test servers' ones."""
    code = code.replace("/tmp/", f"{ctx.cwd}/")
    if ctx.s3 is not None:
        s3 = ctx.s3
        code = re.sub(r"s3://(?:bucket|asyncshard)/", f"s3://{s3.bucket}/{ctx.prefix}/", code)
        code = re.sub(r"http://127\.0\.0\.1:(?:9000|8333)", s3.endpoint, code)
        code = re.sub(
            r'access_key_id=("?)(?:minioadmin|KEY)\1',
            rf"access_key_id=\g<1>{s3.access_key}\1",
            code,
        )
        code = re.sub(
            r'secret_access_key=("?)(?:minioadmin|SECRET)\1',
            rf"secret_access_key=\g<1>{s3.secret_key}\1",
            code,
        )
        code = code.replace("region=us-east-1", f"region={s3.region}")
    if ctx.gcs is not None:
        code = code.replace("gs://bucket/", f"gs://asyncshard-test/{ctx.prefix}/")
        code = code.replace("/path/key.json", str(ctx.cwd / "key.json"))
    return code


def _commands(code: str) -> Iterator[str]:
    """The ``asyncshard`` commands of a shell block (prompts, comments, continuations)."""
    for command in code.replace("\\\n", " ").splitlines():
        command = command.strip().removeprefix("$ ")
        if not command or command.startswith("#"):
            continue
        assert command.startswith("asyncshard "), (
            f"{command!r}: only asyncshard commands run; mark the block "
            "<!-- not-run: reason --> if it cannot run"
        )
        yield command


def _run(block: Block, ctx: Context, namespace: dict[str, Any]) -> None:
    code = _rewrite(block.code, ctx)
    if block.info in RUN_PYTHON:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, block.where, "exec"), namespace)
        return
    for command in _commands(code):
        args = shlex.split(command)[1:]
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 0, f"{block.where}: {command}\n{result.output}"


def _runnable_pages() -> list[Page]:
    return [page for page in PAGES if page.runnable]


@pytest.mark.parametrize("page", _runnable_pages(), ids=lambda p: p.path)
def test_the_examples_of_a_page_run(
    page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.chdir(tmp_path)
    ctx = Context(tmp_path, unique_prefix())
    code = "\n".join(b.code for b in page.runnable)
    if "s3://" in code:
        ctx.s3 = request.getfixturevalue("s3_server")
        for name, value in {  # as a user sets them; the examples' own values are replaced
            "AWS_ACCESS_KEY_ID": ctx.s3.access_key,
            "AWS_SECRET_ACCESS_KEY": ctx.s3.secret_key,
            "AWS_REGION": ctx.s3.region,
            "AWS_ENDPOINT_URL": ctx.s3.endpoint,
        }.items():
            monkeypatch.setenv(name, value)
    if "gs://" in code:
        ctx.gcs = request.getfixturevalue("gcs_fake")
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    for block in page.runnable:
        for name in block.setups:
            SETUPS[name](ctx)
        _run(block, ctx, namespace)


# -- setup hooks: the data a page's examples expect ---------------------------------------


def _upload(folder: Path, url: str, ctx: Context) -> None:
    """Every file under ``folder`` to ``url`` (the S3 test server)."""
    assert ctx.s3 is not None

    async def run() -> None:
        async with open_store(url, **ctx.s3.options()) as store:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                await store.set(path.relative_to(folder).as_posix(), path.read_bytes())

    asyncio.run(run())


def _flat_scan(folder: Path) -> None:
    """A flat Zarr v3 array, 3-d, 8^3 chunks: what the conversion examples shard."""
    from tests.convert.helpers import make_array

    make_array(folder, (32, 32, 64), (8, 8, 8))


def flat_scan(ctx: Context) -> None:
    """``scan.zv`` in the working directory."""
    _flat_scan(ctx.cwd / "scan.zv")


def flat_scan_s3(ctx: Context) -> None:
    """``s3://bucket/scan.zv``."""
    _flat_scan(ctx.cwd / "upload" / "scan.zv")
    _upload(ctx.cwd / "upload", ctx.s3_url(""), ctx)


def ome_image(ctx: Context) -> None:
    """``image.zarr`` in the working directory: OME-Zarr 0.4 (Zarr v2) with labels."""
    from tests.convert.ome_data import write_image_04

    write_image_04(ctx.cwd / "image.zarr")


def demo_s3(ctx: Context) -> None:
    """The ``serve --demo`` volume as ``s3://bucket/data/images/raw`` (sharded Zarr v3)
    and ``s3://bucket/data/em`` (a precomputed volume with a sharded scale ``8_8_8``)."""
    from asyncshard.server.demo import PRECOMPUTED_PATH, ZARR_PATH, write_demo

    demo = ctx.cwd / "demo"
    asyncio.run(write_demo(demo))
    _upload(demo / ZARR_PATH, ctx.s3_url("data/images/raw/"), ctx)
    _upload(demo / PRECOMPUTED_PATH, ctx.s3_url("data/em/"), ctx)


def object_s3(ctx: Context) -> None:
    """One object under ``s3://bucket/data/`` (so that ``ls`` lists something)."""
    (ctx.cwd / "upload").mkdir()
    (ctx.cwd / "upload" / "hello.txt").write_text("hello")
    _upload(ctx.cwd / "upload", ctx.s3_url("data/"), ctx)


def key_file(ctx: Context) -> None:
    """The service-account key file the GCS example names (pointing at the GCS fake)."""
    assert ctx.gcs is not None
    (ctx.cwd / "key.json").write_text(service_account_key(ctx.gcs.url))


SETUPS: dict[str, Callable[[Context], None]] = {
    "flat-scan": flat_scan,
    "flat-scan-s3": flat_scan_s3,
    "ome-image": ome_image,
    "demo-s3": demo_s3,
    "object-s3": object_s3,
    "key-file": key_file,
}
