#!/usr/bin/env python
"""The server's request handler alone, beside the minimal handlers, in one process.

``bench_serve.py`` measures whole servers under wrk; this one measures only the Python
that answers a request: the handler of ``asyncshard serve`` (flat files) and of
``serve --unshard`` (inner chunks of shards), and the two minimal handlers of
``minimal_server.py``, each called in a loop on the same 2,000 random chunk paths of
the ``bench_serve.py`` dataset (requests built once with aiohttp's
``make_mocked_request``; nothing is sent). Prints microseconds per request (best of
``--rounds``, after a warm-up pass) and *minimal / asyncshard* (above 1: asyncshard is
faster). What it leaves out (parsing the request, writing the answer) is the same
aiohttp code for every handler. The "revalidated" rows ask the same chunks with
``If-None-Match`` and their ETag, as a browser does under ``Cache-Control: no-cache``
(answered 304); the minimal handlers have no validators and send the body again.

    python benchmarks/bench_handler.py [--rounds 5] [--loop uvloop]

For a before/after, run it again with ``PYTHONPATH=<worktree of the older commit>/src``
(the line "asyncshard from ..." says which code ran) and compare the ratios.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import asyncshard
from asyncshard import loops
from asyncshard.backends.local import LocalStore
from asyncshard.backends.local.descriptors import SETTLED_NS
from asyncshard.server import AppConfig, make_app
from asyncshard.server.app import RESPOND
from benchmarks import minimal_server
from benchmarks.bench_serve import GRID, write_dataset
from benchmarks.common import add_loop_argument, use_loop

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def requests(array: str, n: int = 2000) -> list[web.Request]:
    """``n`` GET requests of random chunks of ``array`` (the paths bench_serve asks)."""
    rng = random.Random(5)
    x, y, z = GRID
    out = []
    for _ in range(n):
        path = f"/{array}/c/{rng.randrange(x)}/{rng.randrange(y)}/{rng.randrange(z)}"
        out.append(make_mocked_request("GET", path, match_info={"path": path[1:]}))
    return out


async def per_request(
    handler: Handler, reqs: list[web.Request], rounds: int, status: int = 200
) -> float:
    """Microseconds per answered request, the best of ``rounds`` passes."""
    for request in reqs:  # warm up: caches, remembered metadata
        answer = await handler(request)
        assert answer.status == status, answer.status
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for request in reqs:
            await handler(request)
        best = min(best, (time.perf_counter() - start) / len(reqs))
    return best * 1e6


async def measure(root: Path, rounds: int) -> None:
    cases: list[tuple[str, str, Handler, Handler]] = []
    for array, unshard in (("flat", False), ("arr", True)):
        app = make_app(LocalStore(root), AppConfig(unshard=unshard))
        minimal = (
            minimal_server.flat_handler(root)
            if array == "flat"
            else minimal_server.shard_handler(minimal_server.shard_table(root, array))
        )
        label = "serve --unshard" if unshard else "serve, flat"
        cases.append((label, array, app[RESPOND], minimal))
    print(f"asyncshard from {Path(asyncshard.__file__).parent}")
    print(f"{'handler':30} {'asyncshard us':>14} {'minimal us':>11} {'minimal/asyncshard':>19}")
    for label, array, ours, minimal in cases:
        reqs = requests(array)
        mine = await per_request(ours, reqs, rounds)
        theirs = await per_request(minimal, reqs, rounds)
        print(f"{label:30} {mine:14.1f} {theirs:11.1f} {theirs / mine:18.2f}x")
        again = await revalidations(ours, reqs)
        mine = await per_request(ours, again, rounds, status=304)
        print(f"{label + ', revalidated':30} {mine:14.1f} {theirs:11.1f} {theirs / mine:18.2f}x")


async def revalidations(handler: Handler, reqs: list[web.Request]) -> list[web.Request]:
    """``reqs`` as a browser sends them again under ``Cache-Control: no-cache``: with
    ``If-None-Match`` and the ETag of the answer it has (answered 304)."""
    out = []
    for request in reqs:
        etag = (await handler(request)).headers["ETag"]
        path = request.raw_path
        out.append(
            make_mocked_request(
                "GET", path, headers={"If-None-Match": etag}, match_info={"path": path[1:]}
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    add_loop_argument(parser, "the event loop the handlers run on")
    args = parser.parse_args()
    use_loop(args.loop)
    with tempfile.TemporaryDirectory(prefix="bench-handler-") as tmp:
        root = Path(tmp)
        write_dataset(root)
        time.sleep(SETTLED_NS / 1e9)  # a file changed just now is read again each time
        loops.run(measure(root, args.rounds))


if __name__ == "__main__":
    main()
