"""The event loop of asyncshard's entry points: uvloop unless ``ASYNCSHARD_EVENT_LOOP``
says otherwise, and a clear error for a loop that is unknown or missing."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import uvloop
from click.testing import CliRunner

from asyncshard import EventLoopError, LocalStore, blocking, loops
from asyncshard.blocking import run_blocking
from asyncshard.cli import cli
from asyncshard.convert import runner
from asyncshard.convert.api import run_sync
from asyncshard.server import command, workers
from asyncshard.server.config import AppConfig
from asyncshard.server.runner import ServeConfig


async def loop_type() -> type:
    return type(asyncio.get_running_loop())


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[asyncio.AbstractEventLoop]]:
    """Every loop uvloop creates while the test runs."""
    made: list[asyncio.AbstractEventLoop] = []
    original = uvloop.new_event_loop

    def recording() -> asyncio.AbstractEventLoop:
        loop = original()
        made.append(loop)
        return loop

    monkeypatch.setattr(uvloop, "new_event_loop", recording)
    monkeypatch.delenv(loops.ENV, raising=False)
    yield made


@pytest.mark.parametrize("value", ["", "auto", "uvloop", " UVLOOP "])
def test_uvloop_by_default_and_on_request(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(loops.ENV, value)
    assert loops.run(loop_type()) is uvloop.Loop


def test_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loops.ENV, "asyncio")
    kind = loops.run(loop_type())
    assert kind is not uvloop.Loop and issubclass(kind, asyncio.BaseEventLoop)


def test_an_unknown_loop_is_a_typed_error_and_the_coroutine_never_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(loops.ENV, "tokio")
    started = []

    async def work() -> None:
        started.append(True)

    coro = work()
    with pytest.raises(EventLoopError, match=r"ASYNCSHARD_EVENT_LOOP='tokio'.*auto, uvloop"):
        loops.run(coro)
    assert started == [] and inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
    monkeypatch.setattr(blocking, "_loop", None)  # the background loop not started yet
    monkeypatch.setattr(blocking, "_thread", None)
    coro = work()
    with pytest.raises(EventLoopError):
        blocking.run_blocking(coro)
    assert started == [] and inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED


def test_uvloop_asked_for_but_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    monkeypatch.setenv(loops.ENV, "uvloop")
    with pytest.raises(EventLoopError, match="not installed"):
        loops.new_event_loop()
    monkeypatch.setenv(loops.ENV, "auto")  # auto falls back to asyncio's loop
    assert loops.run(loop_type()) is not uvloop.Loop


def test_the_command_line_runs_on_uvloop(tmp_path: Path, created: list[object]) -> None:
    (tmp_path / "k").write_bytes(b"x")
    result = CliRunner().invoke(cli, ["ls", str(tmp_path)])
    assert result.exit_code == 0 and result.stdout.split() == ["k"]
    assert len(created) == 1


def test_the_command_line_refuses_an_unknown_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(loops.ENV, "trio")
    result = CliRunner().invoke(cli, ["ls", str(tmp_path)])
    assert result.exit_code == 1
    assert "EventLoopError" in result.stderr and "trio" in result.stderr


def test_synchronous_conversions_run_on_uvloop(created: list[object]) -> None:
    assert run_sync(loop_type()) is uvloop.Loop
    assert len(created) == 1


def test_synchronous_store_calls_run_on_the_chosen_loop(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    run_blocking(store.set("k", b"v"))
    assert bytes(run_blocking(store.get("k")) or b"") == b"v"
    # the background loop started on first use, of the kind the environment chose
    loop = loops.new_event_loop()
    loop.close()
    assert run_blocking(loop_type()) is type(loop)


def test_serve_and_each_worker_run_on_the_chosen_loop(
    tmp_path: Path, created: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[type] = []

    async def serve_config(config: ServeConfig, **kwargs: object) -> None:
        seen.append(type(asyncio.get_running_loop()))  # instead of serving until stopped

    monkeypatch.setattr(command, "serve_config", serve_config)
    monkeypatch.setattr(workers, "serve_config", serve_config)
    (tmp_path / "k").write_bytes(b"x")
    result = CliRunner().invoke(command.serve, [str(tmp_path), "--quiet"])
    assert result.exit_code == 0, result.output
    # what a --workers process runs, run here (its SIGINT setting left alone)
    monkeypatch.setattr(workers.signal, "signal", lambda *args: None)
    _, ready = multiprocessing.Pipe()
    workers._worker(ServeConfig(str(tmp_path), AppConfig(), quiet=True), 0, ready)
    assert seen == [uvloop.Loop, uvloop.Loop] and len(created) == 2


def test_serve_with_workers_refuses_an_unknown_loop_before_starting_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(loops.ENV, "tokio")
    started: list[object] = []
    monkeypatch.setattr(command, "serve_workers", lambda *args: started.append(args))
    (tmp_path / "k").write_bytes(b"x")
    args = [str(tmp_path), "--workers", "2", "--writable", "--quiet"]
    result = CliRunner().invoke(command.serve, args)
    assert result.exit_code == 1 and started == []
    assert result.stderr.strip().splitlines()[-1].startswith("Error: EventLoopError:")


def test_dask_tasks_run_on_the_chosen_loop(
    created: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[type] = []

    async def run_tasks(*args: object) -> None:
        seen.append(type(asyncio.get_running_loop()))

    monkeypatch.setattr(runner, "run_tasks", run_tasks)
    spec = SimpleNamespace(executor=lambda store: None)
    target = runner.StoreAddress("memory://", {})
    assert runner.run_batch(target, None, spec, [], 1) == []  # type: ignore[arg-type]
    assert seen == [uvloop.Loop] and len(created) == 1
