"""One conversion pipeline for every format: journal, passes, switch, cleanup, report.

A :class:`Convertible` is what a conversion changes in place: a Zarr array
(:mod:`asyncshard.convert.zarr`) or a precomputed scale
(:mod:`asyncshard.convert.precomputed`). A format plug-in says what its layouts are
(documents), which keys are objects of a layout, how to plan the tasks of a pass and
how to switch the metadata; everything else is here, the same for every format:

1. write the journal (:mod:`asyncshard.convert.journal`) naming source and target;
2. list the node's objects and plan one task per target object (or source shard), as
   the listing arrives (a format's :class:`PassPlan`; Zarr's spills to disk,
   :mod:`asyncshard.convert.streamplan`), the source keys kept on disk;
3. run the tasks as they are made (:mod:`asyncshard.convert.runner`: asyncio or Dask);
4. switch the metadata (conditional on the version read at the start);
5. delete the old objects in large batches, then the journal (or start the next pass).

A conversion *to another store* (``reader``: the source store; ``store``: where the new
objects, the metadata and the journal go) runs the same steps, except that the source
objects are only read, never deleted.

An interrupted run is settled from the journal by the next one (:func:`_settle_interrupted`).
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from asyncshard.backends.registry import StoreLocation, opened
from asyncshard.convert.journal import Journal, journal_key, normalize, read_journal, remove_journal
from asyncshard.convert.report import (
    ArrayReport,
    ConversionSummary,
    PassDone,
    PassStarted,
    ProgressCallback,
    ProgressEvent,
    TaskDone,
    TaskResult,
)
from asyncshard.convert.runner import Job, PassSpec, Runner, Task, make_runner
from asyncshard.convert.spill import KeyFile
from asyncshard.errors import ConflictError, ConversionError
from asyncshard.store import Store
from asyncshard.walk import iter_keys

__all__ = ["Convertible", "PassPlan", "RunOptions", "convert_nodes"]

Doc = dict[str, Any]
#: Keys per ``erase_values`` call at most: S3 deletes up to 1,000 keys per request.
DELETE_BATCH = 1000
#: ``erase_values`` calls running at once (a store's default concurrency): SeaweedFS
#: deleted 4,096 keys in 0.38 s as 32 requests of 128 keys at once, 0.49 s as 8 of 512.
DELETE_BATCHES_IN_FLIGHT = 32
_MIN_DELETE_BATCH = 64
#: Keys read back for deletion at a time (``delete_keys`` cuts them into batches).
DELETE_ROUND = 8192


class RunOptions(TypedDict, total=False):
    """Keyword options of every conversion function.

    ``max_in_flight``: tasks (shards) in memory at once (default 8; per worker thread
    with Dask); ``client``: a ``dask.distributed.Client`` to run the tasks on (the store
    must then be a URL or have one, see :attr:`~asyncshard.store.Store.url`); ``runner``:
    a custom :class:`~asyncshard.convert.runner.Runner`; ``storage_options``: options of
    ``open_store`` for a URL (also used by Dask workers); ``progress``: receives
    :class:`~asyncshard.convert.report.ProgressEvent` objects. Any other keyword is a
    storage option too (the options contract of docs/cloud.md).
    """

    max_in_flight: int | None
    client: Any
    runner: Runner | None
    storage_options: Mapping[str, Any] | None
    progress: ProgressCallback | None


@dataclass(frozen=True)
class PassOptions:
    """How nodes are converted: the runner and the progress callback."""

    runner: Runner
    progress: ProgressCallback | None = None

    def emit(self, event: ProgressEvent) -> None:
        """Send ``event`` to the progress callback, if any."""
        if self.progress is not None:
            self.progress(event)


class PassPlan(Protocol):
    """The tasks of one pass, planned from the objects a listing finds as it finds them.

    ``ignored``: source objects outside the node; ``found``: target objects found (an
    interrupted run's); ``sources``: source objects planned (once :meth:`tasks` ran).
    """

    @property
    def ignored(self) -> int:
        """Source objects outside the node."""

    @property
    def found(self) -> int:
        """Target objects found."""

    @property
    def sources(self) -> int:
        """Source objects the tasks read (known once :meth:`tasks` has run)."""

    def add_source(self, obj: Any) -> None:
        """A source object found."""

    def add_done(self, obj: Any) -> None:
        """A target object found."""

    def count(self) -> int:
        """How many tasks :meth:`tasks` gives."""

    def tasks(self) -> Iterator[Task[Any]]:
        """The tasks, made as they are taken."""

    def close(self) -> None:
        """Release what the plan holds (files on disk)."""


class Convertible(ABC):
    """A format plug-in: one array or scale, its metadata, and its layouts.

    ``path`` names it in reports, ``prefix`` starts the keys of its objects (its journal
    lives there), ``meta_key`` is its metadata object and ``doc`` its current layout
    document (updated by :meth:`switch`).
    """

    path: str
    doc: Doc

    @property
    @abstractmethod
    def prefix(self) -> str:
        """The key prefix of the node's objects (and of its journal)."""

    @property
    @abstractmethod
    def meta_key(self) -> str:
        """The key of the node's metadata object."""

    @abstractmethod
    def describe(self, doc: Mapping[str, Any] | None = None) -> str:
        """A short description of a layout (``doc``, or the current one)."""

    @abstractmethod
    def target(self) -> Doc | str:
        """The final layout asked for, or why the node is left as it is."""

    @abstractmethod
    def satisfies(self, final: Mapping[str, Any]) -> bool:
        """Whether a journaled final layout is what the current request asks for."""

    def target_instead(self, final: Mapping[str, Any]) -> Doc | str:
        """:meth:`target`, for a node whose interrupted conversion to ``final`` is
        given up for the current request (the node may be at a midpoint)."""
        return self.target()

    def passes(self, final: Mapping[str, Any]) -> list[tuple[Doc, Doc]]:
        """``[(source, target), ...]`` layouts of the passes from the current to ``final``;
        each pass writes keys disjoint from those it reads."""
        return [(dict(self.doc), dict(final))]

    def layout_doc(self, doc: Mapping[str, Any]) -> Doc:
        """What of a document the journal and the tasks carry."""
        return dict(doc)

    def same(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        """Whether two documents describe the same stored objects."""
        equal: bool = normalize(self.layout_doc(a)) == normalize(self.layout_doc(b))
        return equal

    @abstractmethod
    def parser(self, doc: Mapping[str, Any]) -> Callable[[str], Hashable | None]:
        """A function naming the object of layout ``doc`` a key holds (``None``: none)."""

    @abstractmethod
    def planner(self, source: Doc, target: Doc) -> PassPlan:
        """An empty plan of the pass ``source -> target``, filled as the listing goes."""

    @abstractmethod
    def pass_spec(self, source: Doc, target: Doc) -> PassSpec:
        """What workers need to run the tasks of the pass ``source -> target``."""

    def account(self, result: TaskResult) -> None:  # noqa: B027 - optional hook
        """What one task of the current pass did (called as each finishes)."""

    @abstractmethod
    async def switch(self, store: Store, target: Doc, report: ArrayReport) -> None:
        """Make ``target`` the node's layout, once every task of the pass succeeded."""

    async def resync(self, store: Store) -> None:  # noqa: B027 - optional hook
        """Bring copies of the metadata up to date after an interrupted switch."""

    async def skipped(self, store: Store, report: ArrayReport) -> None:  # noqa: B027
        """Called for a node left as it is (``report.reason`` says why)."""


async def write_json(store: Store, key: str, doc: Any, version: str | None) -> str | None:
    """Replace a JSON object, only if it is still at ``version`` (when the store can tell).

    Returns the new version. ``ConversionError`` if someone else changed it meanwhile.
    """
    data = json.dumps(doc, indent=2).encode()
    conditional = store.supports_conditional_writes and version is not None
    try:
        return await store.set(key, data, if_match=version if conditional else None)
    except ConflictError:
        raise ConversionError(
            f"{key} changed while the conversion ran; run it again (nothing was lost)"
        ) from None


async def delete_keys(store: Store, keys: Sequence[str]) -> None:
    """Delete ``keys`` in batches of at most :data:`DELETE_BATCH` keys, up to
    :data:`DELETE_BATCHES_IN_FLIGHT` batches at once.

    A batch is one bulk request where the backend has one (S3 DeleteObjects) or one
    worker thread on local files, so lists are cut into several batches even when they
    are short: unlinking a file that holds data costs the kernel 0.1-0.4 ms on ext4, and
    batches in parallel overlap that. Every batch runs to its end; the first failure is
    raised afterwards (the journal makes a later run delete what is left).
    """
    if not keys:
        return
    size = min(DELETE_BATCH, max(_MIN_DELETE_BATCH, -(-len(keys) // DELETE_BATCHES_IN_FLIGHT)))
    limit = asyncio.Semaphore(DELETE_BATCHES_IN_FLIGHT)

    async def delete(batch: Sequence[str]) -> None:
        async with limit:
            await store.erase_values(batch)

    batches = [keys[i : i + size] for i in range(0, len(keys), size)]
    outcomes = await asyncio.gather(*(delete(b) for b in batches), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


async def _collect(
    store: Store,
    node: Convertible,
    plan: PassPlan,
    docs: tuple[Doc, Doc],
    reader: Store | None,
    listed: KeyFile | None,
) -> str | None:
    """Feed ``plan`` the objects of layouts ``docs`` (source, target) under the node's
    prefix, as they are listed; with a separate ``reader``, source objects are listed
    there and targets in ``store``. Source keys go to ``listed`` (to delete them after
    the switch). Returns the key of a target object found, if any."""
    src, dst = node.parser(docs[0]), node.parser(docs[1])
    apart = reader not in (None, store)
    example: str | None = None
    async for key in iter_keys(reader or store, node.prefix):
        if (obj := src(key)) is not None:
            plan.add_source(obj)
            if listed is not None:
                listed.add(key)
        elif not apart and (obj := dst(key)) is not None:
            plan.add_done(obj)
            example = example or key
    if apart:
        async for key in iter_keys(store, node.prefix):
            if (obj := dst(key)) is not None:
                plan.add_done(obj)
                example = example or key
    return example


async def _delete_listed(store: Store, keys: KeyFile) -> int:
    """Delete the keys kept in ``keys``, :data:`DELETE_ROUND` at a time."""
    for batch in keys.batches(DELETE_ROUND):
        await delete_keys(store, batch)
    return keys.count


async def _delete_layout(store: Store, node: Convertible, doc: Doc) -> int:
    """Delete every object of layout ``doc`` left by an interrupted conversion, and the
    folders that the interrupted deletes emptied but did not remove; return how many
    objects."""
    parse = node.parser(doc)
    keys = KeyFile()
    try:
        async for key in iter_keys(store, node.prefix):
            if parse(key) is not None:
                keys.add(key)
        deleted = await _delete_listed(store, keys)
    finally:
        keys.close()
    await store.prune(node.prefix)
    return deleted


async def _settle_interrupted(
    store: Store, node: Convertible, journal: Journal, report: ArrayReport, copying: bool
) -> tuple[Doc | str, bool]:
    """Deal with an interrupted conversion; return ``(final layout or why not, resume)``.

    After the switch: delete the old objects left (none when ``copying`` to another
    store). Before it: resume the pass if the request is the same, else delete the new
    objects written so far.
    """
    agrees = node.satisfies(journal.final)
    if node.same(node.doc, journal.target):
        await node.resync(store)
        if not copying:
            report.objects_deleted += await _delete_layout(store, node, journal.source)
        report.resumed = True
        report.passes += 1
        if agrees and not node.same(node.doc, journal.final):
            return journal.final, False
        await remove_journal(store, node.prefix)
        return node.target_instead(journal.final), False
    if not node.same(node.doc, journal.source):
        raise ConversionError(
            f"{node.meta_key} matches neither side of the interrupted conversion recorded "
            f"in {journal_key(node.prefix)}; inspect it and remove the journal"
        )
    if agrees and node.same(node.passes(journal.final)[0][1], journal.target):
        report.resumed = True
        return journal.final, True
    await _delete_layout(store, node, journal.target)
    await remove_journal(store, node.prefix)
    return node.target_instead(journal.final), False


async def _run_pass(
    store: Store,
    node: Convertible,
    docs: tuple[Doc, Doc, Doc],
    opts: PassOptions,
    report: ArrayReport,
    *,
    number: int,
    passes: int,
    resume: bool,
    reader: Store | None,
) -> None:
    # layouts only: attributes (a manifest can be big) stay out of the journal and tasks
    source, target, final = (node.layout_doc(d) for d in docs)
    plan = node.planner(source, target)
    listed = KeyFile() if reader is None else None
    try:
        example = await _collect(store, node, plan, (source, target), reader, listed)
        if plan.found and not resume:
            raise ConversionError(
                f"{node.path or '/'}: {plan.found} objects already use the target keys "
                f"(e.g. {example}) and no conversion journal accounts for them; "
                "remove them and run again"
            )
        if not resume:
            journal = Journal(normalize(source), normalize(target), normalize(final))
            await journal.write(store, node.prefix)
        ntasks = plan.count()
        report.objects_ignored += plan.ignored
        description = f"{node.describe(source)} -> {node.describe(target)}"
        opts.emit(PassStarted(node.path, number, passes, ntasks, description))
        chunks = 0

        def on_result(result: TaskResult) -> None:
            nonlocal chunks
            chunks += result.nchunks
            report.add(result)
            node.account(result)
            opts.emit(TaskDone(node.path, result))

        spec = node.pass_spec(source, target)
        await opts.runner.run(Job(store, spec, plan.tasks(), on_result, reader, ntasks))
        await node.switch(store, target, report)
        if listed is not None:
            report.objects_deleted += await _delete_listed(store, listed)
    finally:
        plan.close()
        if listed is not None:
            listed.close()
    report.chunks = chunks
    report.passes += 1
    if number == passes:
        await remove_journal(store, node.prefix)
    opts.emit(PassDone(node.path, number))


async def convert_node(
    store: Store, node: Convertible, opts: PassOptions, reader: Store | None = None
) -> ArrayReport:
    """Convert one node to the layout its request asks for; resume or settle first.

    ``reader``: the store the node's objects are read from when the result goes to
    another store (``store``); ``None`` converts in place.
    """
    if reader is store:
        reader = None
    report = ArrayReport(node.path, "skipped")
    journal = await read_journal(store, node.prefix)
    resume = False
    if journal is not None:
        final, resume = await _settle_interrupted(
            store, node, journal, report, copying=reader is not None
        )
    else:
        final = node.target()
    report.source = node.describe()
    if isinstance(final, str):
        if report.resumed:  # an interrupted run finished here
            report.action, report.target = "converted", node.describe()
        else:
            report.reason = final
            await node.skipped(store, report)
        return report
    report.action, report.target = "converted", node.describe(final)
    passes = node.passes(final)
    for number, (source, target) in enumerate(passes, start=1):
        await _run_pass(
            store,
            node,
            (source, target, final),
            opts,
            report,
            number=number,
            passes=len(passes),
            resume=resume and number == 1,
            reader=reader,
        )
    return report


ConvertibleSource = Callable[[Store], AsyncIterator[Convertible | ArrayReport]]


async def convert_nodes(
    location: StoreLocation,
    nodes: ConvertibleSource,
    options: RunOptions,
    reader: Store | None = None,
) -> ConversionSummary:
    """Convert the nodes ``nodes(store)`` yields (a report for those it skips itself);
    with ``reader``, their objects are read there and the results go to ``location``."""
    started = time.perf_counter()
    summary = ConversionSummary()
    async with opened(location, options.get("storage_options")) as store:
        runner = make_runner(
            store,
            runner=options.get("runner"),
            client=options.get("client"),
            max_in_flight=options.get("max_in_flight"),
        )
        opts = PassOptions(runner, options.get("progress"))
        async for node in nodes(store):
            if isinstance(node, ArrayReport):
                summary.arrays.append(node)
            else:
                summary.arrays.append(await convert_node(store, node, opts, reader))
    summary.seconds = time.perf_counter() - started
    return summary
