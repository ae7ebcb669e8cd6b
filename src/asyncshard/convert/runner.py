"""Running the tasks of a pass: in this process on asyncio, or on a Dask cluster.

A pass is described by a picklable :class:`PassSpec` (the executor of its format, the
node's key prefix and its source and target layout documents) and a list of picklable
:class:`Task` objects; every task writes objects no other task writes, so tasks run in
any order and anywhere. The driver (:mod:`asyncshard.convert.pipeline`), not the runner,
switches the metadata and deletes the old objects once every task succeeded.

* :class:`AsyncioRunner` keeps at most ``max_in_flight`` tasks (shards) running.
* :class:`DaskRunner` sends batches of tasks to a ``dask.distributed`` cluster; each
  batch opens the store from its URL on the worker and runs on asyncio there, with at
  most ``max_in_flight`` tasks per worker thread. Dask is imported only here, lazily.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from asyncshard import loops
from asyncshard.convert.report import TaskResult
from asyncshard.store import Store

__all__ = [
    "AsyncioRunner",
    "DaskRunner",
    "Executor",
    "Job",
    "PassSpec",
    "Runner",
    "StoreAddress",
    "Task",
    "TaskKind",
    "make_runner",
    "run_tasks",
]

DEFAULT_IN_FLIGHT = 8
T = TypeVar("T")
Obj = TypeVar("Obj", bound=Hashable)

TaskKind = Literal["pack", "repack", "split", "unpack", "copy", "index"]


@dataclass(frozen=True)
class Task(Generic[Obj]):
    """One unit of work with exactly one target object (or one source shard: unpack, split).

    Objects are named by what the format plans with (grid coordinates for Zarr, file
    names for precomputed):

    * ``pack``: target shard ``target`` from the unsharded chunks ``sources``;
    * ``repack``: target shard ``target`` from the chunks of the source shards
      ``sources`` that fall in it;
    * ``split``: the target shards inside source shard ``sources[0]``, each fed by it
      alone (the source is read once, whole); ``existing`` lists the target shards
      already written by an interrupted run (skipped);
    * ``unpack``: the chunks of source shard ``sources[0]``; ``existing`` lists the
      target chunks already written by an interrupted run (skipped);
    * ``copy``: object ``sources[0]`` copied verbatim to ``target`` (same objects, other
      keys), or with no ``target`` each of ``sources`` to the same name in the target
      layout (a group of small objects);
    * ``index``: ``target`` exists from an interrupted run: only read what it holds.
    """

    kind: TaskKind
    target: Obj | None
    sources: tuple[Obj, ...]
    existing: tuple[Obj, ...] = ()


class Executor(Protocol):
    """Runs the tasks of one pass against one store."""

    async def execute(self, task: Any) -> TaskResult:
        """Do one task; raise on failure."""


@dataclass(frozen=True)
class PassSpec:
    """Everything a worker needs to run tasks of a pass (picklable): the executor class
    of the format, the node's key prefix, the source and target layout documents, and
    ``recode``: how to re-encode source chunks whose codecs the target cannot name
    (:func:`asyncshard.convert.recode.recoder`; ``None``: bytes are moved as they are)."""

    executor_type: Callable[[Store, PassSpec, Store | None], Executor]
    prefix: str
    source: dict[str, Any]
    target: dict[str, Any]
    recode: dict[str, Any] | None = None

    def executor(self, store: Store, source: Store | None = None) -> Executor:
        """An executor of this pass's tasks writing to ``store`` and reading from
        ``source`` (``None``: the same store)."""
        return self.executor_type(store, self, source)


@dataclass(frozen=True)
class Job:
    """The tasks of one pass writing to ``store`` and reading from ``source`` (``None``:
    the same store); ``on_result`` is called as each task finishes. ``tasks`` may be an
    iterator that makes each task as it is taken (a conversion's are: a runner takes
    them as it goes, holding those in flight); ``ntasks`` says how many it gives."""

    store: Store
    spec: PassSpec
    tasks: Iterable[Any]
    on_result: Callable[[TaskResult], None]
    source: Store | None = None
    ntasks: int | None = None

    def executor(self) -> Executor:
        """The executor of this job's tasks in this process (reading from ``source``):
        what a custom runner calls."""
        return self.spec.executor(self.store, self.source)


class Runner(Protocol):
    """Runs every task of a pass."""

    async def run(self, job: Job) -> None:
        """Return when all tasks succeeded; raise the first failure otherwise."""


async def run_tasks(
    executor: Executor,
    tasks: Iterable[Any],
    on_result: Callable[[TaskResult], None],
    max_in_flight: int,
) -> None:
    """Run ``tasks`` with at most ``max_in_flight`` at once; stop at the first failure.

    After a failure no new task starts, and the tasks running are awaited rather than
    cancelled: a cancelled coroutine would leave its write running in a worker thread,
    landing after this function returned.
    """
    pending = iter(tasks)
    failed = False

    async def worker() -> None:
        nonlocal failed
        for task in pending:  # the workers share one iterator
            if failed:
                return
            try:
                result = await executor.execute(task)
            except BaseException:
                failed = True
                raise
            on_result(result)

    n = min(max_in_flight, len(tasks)) if isinstance(tasks, Sized) else max_in_flight
    workers = [asyncio.create_task(worker()) for _ in range(n)]
    try:
        outcomes = await asyncio.gather(*workers, return_exceptions=True)
    except BaseException:  # cancelled from outside: take the workers with us
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


class AsyncioRunner:
    """Runs tasks in this process, at most ``max_in_flight`` shards at a time."""

    def __init__(self, max_in_flight: int = DEFAULT_IN_FLIGHT) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.max_in_flight = max_in_flight

    def __repr__(self) -> str:
        return f"AsyncioRunner(max_in_flight={self.max_in_flight})"

    async def run(self, job: Job) -> None:
        await run_tasks(job.executor(), job.tasks, job.on_result, self.max_in_flight)


@dataclass(frozen=True)
class StoreAddress:
    """Where a worker opens a store: its URL and ``open_store`` options."""

    url: str
    options: Mapping[str, Any]

    @classmethod
    def of(cls, store: Store) -> StoreAddress:
        """The address of an opened store (``TypeError`` if it has no URL)."""
        if store.url is None:
            raise TypeError(f"Dask workers open the store from its URL; {store!r} has none")
        return cls(store.url, dict(store.open_options))


def run_batch(
    target: StoreAddress,
    source: StoreAddress | None,
    spec: PassSpec,
    tasks: Sequence[Any],
    max_in_flight: int,
) -> list[TaskResult]:
    """A Dask task: open the stores and run ``tasks`` on a fresh event loop."""
    from asyncshard.backends.registry import open_store

    async def go() -> list[TaskResult]:
        results: list[TaskResult] = []
        async with open_store(target.url, **target.options) as store:
            if source is None:
                await run_tasks(spec.executor(store), tasks, results.append, max_in_flight)
                return results
            async with open_store(source.url, **source.options) as reader:
                executor = spec.executor(store, reader)
                await run_tasks(executor, tasks, results.append, max_in_flight)
        return results

    return loops.run(go())


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


class DaskRunner:
    """Runs tasks on a ``dask.distributed`` cluster.

    ``client`` is a ``distributed.Client``; workers open the store with
    ``open_store(url, **storage_options)``, so ``url`` must name storage every worker can
    reach (a shared folder, S3, GCS...). Tasks go in batches of ``batch_size`` (default:
    about four batches per worker thread, at most 64 tasks); each worker thread runs at
    most ``max_in_flight`` tasks of its batch at a time.
    """

    def __init__(
        self,
        client: Any,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        max_in_flight: int = DEFAULT_IN_FLIGHT,
        batch_size: int | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise TypeError("DaskRunner needs the store's URL: workers open it themselves")
        if max_in_flight < 1 or (batch_size is not None and batch_size < 1):
            raise ValueError("max_in_flight and batch_size must be >= 1")
        self.client = client
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.max_in_flight = max_in_flight
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"DaskRunner({self.client!r}, {self.url!r})"

    def _batch_size(self, ntasks: int) -> int:
        if self.batch_size is not None:
            return self.batch_size
        threads: int = max(1, sum(self.client.nthreads().values()))
        return max(1, min(64, math.ceil(ntasks / (4 * threads))))

    def _run_blocking(self, job: Job, source: StoreAddress | None) -> None:
        """Submit batches as they are made, at most four per worker thread at a time
        (the tasks are made as they are taken: a pass of a million chunks is not held)."""
        import distributed

        target = StoreAddress(self.url, self.storage_options)
        tasks = list(job.tasks) if job.ntasks is None else job.tasks
        ntasks = len(tasks) if isinstance(tasks, Sized) else job.ntasks or 0
        batches = _batches(tasks, self._batch_size(ntasks))
        threads: int = max(1, sum(self.client.nthreads().values()))
        # the client's own loop: it need not be dask's default client
        as_completed: Any = distributed.as_completed
        running: Any = as_completed([], loop=self.client.loop)
        pending: set[Any] = set()

        def submit() -> None:
            batch = next(batches, None)
            if batch is not None:
                future = self.client.submit(
                    run_batch, target, source, job.spec, batch, self.max_in_flight, pure=False
                )
                pending.add(future)
                running.add(future)

        try:
            for _ in range(4 * threads):
                submit()
            for future in running:
                pending.discard(future)
                for result in future.result():
                    job.on_result(result)
                submit()
        except BaseException:
            self.client.cancel(list(pending))
            raise

    async def run(self, job: Job) -> None:
        """Run the job's tasks on the cluster; a separate source store is reopened on
        the workers from its URL too."""
        source = None if job.source is None else StoreAddress.of(job.source)
        if job.ntasks != 0:
            await asyncio.to_thread(self._run_blocking, job, source)


def make_runner(
    store: Store,
    *,
    runner: Runner | None,
    client: Any,
    max_in_flight: int | None,
) -> Runner:
    """The runner asked for: explicit, Dask (``client``), or asyncio in this process.

    Dask workers reopen ``store`` from its :attr:`~Store.url` and
    :attr:`~Store.open_options`, so they reach the same place with the same options.
    """
    if runner is not None:
        if client is not None:
            raise ValueError("pass either runner or client, not both")
        return runner
    in_flight = DEFAULT_IN_FLIGHT if max_in_flight is None else max_in_flight
    if client is not None:
        address = StoreAddress.of(store)
        return DaskRunner(client, address.url, address.options, max_in_flight=in_flight)
    return AsyncioRunner(in_flight)
