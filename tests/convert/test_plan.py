"""Pure planning: key encodings, target documents, passes, tasks (no I/O)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncshard.convert.journal import JOURNAL_NAME
from asyncshard.convert.layout import disjoint, encoding_json, partner, read_layout, retarget
from asyncshard.convert.plan import (
    Request,
    normalize_shard_shape,
    plan_pass,
    plan_passes,
    resolve_target,
)
from asyncshard.formats.zarr3.keys import ChunkKeyEncoding as Encoding
from asyncshard.formats.zarr3.metadata import is_sharded

ENCODINGS = [Encoding(k, s) for k in ("default", "v2") for s in ("/", ".")]


DEFAULT = Encoding()


def flat_doc(shape: list[int], chunks: list[int], enc: Encoding = DEFAULT) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": encoding_json(enc),
        "fill_value": 0,
        "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}],
        "attributes": {"a": 1},
    }


@settings(max_examples=200)
@given(
    st.sampled_from(ENCODINGS),
    st.integers(0, 3),
    st.data(),
)
def test_partner_keys_never_collide(enc: Encoding, ndim: int, data: st.DataObject) -> None:
    """The partner encoding never names an object of the original one, nor the other
    objects of an array's folder."""
    other = partner(enc, ndim)
    assert disjoint(other, enc, ndim) and disjoint(enc, other, ndim)
    coords = st.tuples(*[st.integers(0, 120)] * ndim)
    a, b = data.draw(coords), data.draw(coords)
    assert Encoding(enc.kind, enc.separator, "p/").encode(a) != Encoding(
        other.kind, other.separator, "p/"
    ).encode(b)
    # what one encoding writes never parses as an object of the other, either way
    assert enc.decode(other.encode(a), ndim) is None
    assert other.decode(enc.encode(a), ndim) is None
    for name in ("zarr.json", JOURNAL_NAME):
        assert other.decode(name, ndim) is None


@pytest.mark.parametrize("enc", ENCODINGS)
@pytest.mark.parametrize("ndim", [0, 1, 2, 3])
def test_partner_is_nested(enc: Encoding, ndim: int) -> None:
    """Staging keys nest (``/``): a folder holds one row of the grid, never every chunk
    of the pass. Between the two ``/`` encodings the partner goes back and forth."""
    other = partner(enc, ndim)
    assert other.separator == "/"
    assert other.encode((7,) * ndim).count("/") >= ndim - 1
    if enc.separator == "/":
        assert partner(other, ndim) == enc
    else:
        assert other.kind == enc.kind or ndim < (2 if enc.kind == "v2" else 1)


def test_normalize_shard_shape() -> None:
    assert normalize_shard_shape(4, 3) == (4, 4, 4)
    assert normalize_shard_shape((1, 2), 2) == (1, 2)
    assert normalize_shard_shape(None, 2) is None
    with pytest.raises(ValueError, match="dimensions"):
        normalize_shard_shape((1, 2), 3)
    with pytest.raises(ValueError, match="positive"):
        normalize_shard_shape(0, 2)
    with pytest.raises(ValueError, match="separator"):
        Request(2, separator="-")  # type: ignore[arg-type]


def test_resolve_target_flat_to_sharded_keeps_separator_and_codecs() -> None:
    doc = flat_doc([100, 60], [10, 10])
    target = resolve_target(doc, Request(4))
    assert target is not None and is_sharded(target)
    config = target["codecs"][0]["configuration"]
    assert config["codecs"] == doc["codecs"]  # no re-encoding: same inner codecs
    assert config["chunk_shape"] == [10, 10]
    assert target["chunk_grid"]["configuration"]["chunk_shape"] == [40, 40]
    assert target["chunk_key_encoding"] == doc["chunk_key_encoding"]
    assert target["attributes"] == {"a": 1}
    assert resolve_target(target, Request(4)) is None  # already there
    assert resolve_target(target, Request((4, 4), index_location="end")) is None
    assert resolve_target(target, Request(4, index_location="start")) is not None
    back = resolve_target(target, Request(None))
    assert back == doc  # the exact inverse: codecs, grid and keys
    assert resolve_target(doc, Request(None)) is None  # unsharding a flat array: no-op


def test_resolve_target_resharding_keeps_the_separator_unless_asked() -> None:
    """The current keys by default, which takes two passes; another separator when
    asked, in one pass (keys disjoint from the current ones)."""
    sharded = retarget(flat_doc([100, 60], [10, 10]), (4, 4), Encoding("default", "."))
    target = resolve_target(sharded, Request((2, 3)))
    assert target is not None
    assert read_layout(target).chunks_per_shard == (2, 3)
    assert read_layout(target).encoding == Encoding("default", ".")
    assert len(plan_passes(sharded, target)) == 2
    flipped = resolve_target(sharded, Request((2, 3), separator="/"))
    assert flipped is not None and read_layout(flipped).encoding == Encoding("default", "/")
    assert len(plan_passes(sharded, flipped)) == 1


def test_plan_passes_one_or_two() -> None:
    flat = flat_doc([100, 60], [10, 10])
    sharded = resolve_target(flat, Request(4, separator="."))
    assert sharded is not None
    assert len(plan_passes(flat, sharded)) == 1
    resharded = resolve_target(sharded, Request(2))  # keys kept
    assert resharded is not None
    passes = plan_passes(sharded, resharded)
    assert len(passes) == 2
    (s1, t1), (s2, t2) = passes
    assert s1 == sharded and t2 == resharded and t1 == s2
    middle = read_layout(t1)
    assert middle.chunks_per_shard == (2, 2) and middle.encoding == Encoding("default", "/")
    for src, dst in passes:
        enc_a, enc_b = read_layout(src).encoding, read_layout(dst).encoding
        assert disjoint(enc_a, enc_b, 2)


def _writers(tasks: list[Any], dst_layout: Any, src_layout: Any) -> dict[tuple[int, ...], int]:
    """How many tasks write each target object."""
    count: dict[tuple[int, ...], int] = {}
    for task in tasks:
        if task.kind in ("unpack", "split"):
            lo, hi = src_layout.grid.chunk_range(task.sources[0])
            chunks = itertools.product(*(range(a, b) for a, b in zip(lo, hi, strict=True)))
            targets = list(dict.fromkeys(dst_layout.grid.object_of(c)[0] for c in chunks))
            targets = [t for t in targets if t not in task.existing]
        else:
            targets = [task.target]
        for t in targets:
            count[t] = count.get(t, 0) + 1
    return count


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 40), min_size=0, max_size=3),
    data=st.data(),
)
def test_plan_pass_one_writer_per_object_and_every_chunk_once(
    shape: list[int], data: st.DataObject
) -> None:
    ndim = len(shape)
    chunks = data.draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim))
    cps_a = data.draw(st.tuples(*[st.integers(1, 4)] * ndim))
    cps_b = data.draw(st.tuples(*[st.integers(1, 4)] * ndim))
    flat = flat_doc(shape, chunks)
    grid = read_layout(flat).chunk_grid
    stored = data.draw(
        st.sets(st.tuples(*[st.integers(0, max(g - 1, 0)) for g in grid]), max_size=30)
    )
    stored = {c for c in stored if all(x < g for x, g in zip(c, grid, strict=True))}
    stale = {tuple(g + 1 for g in grid)} if ndim else set()  # out of bounds: ignored
    stored_plus_stale = stored | stale
    docs = [
        flat,
        retarget(flat, cps_a, Encoding("default", ".")),
        retarget(flat, cps_b, Encoding("default", "/")),
        retarget(flat, cps_b, Encoding("v2", "."), index_location="start"),
    ]
    for src_doc, dst_doc in itertools.permutations(docs, 2):
        src, dst = read_layout(src_doc), read_layout(dst_doc)
        objects = {src.grid.object_of(c)[0] for c in stored} | {
            tuple(g + 1 for g in src.object_grid) for _ in stale
        }
        if not src.sharded:
            objects = stored_plus_stale
        tasks, ignored = plan_pass(src, dst, objects)
        assert ignored == len(stale)
        assert all(n == 1 for n in _writers(tasks, dst, src).values())
        # every stored chunk is read by exactly one task
        readers: dict[tuple[int, ...], int] = {}
        for task in tasks:
            for source in task.sources:
                lo, hi = src.grid.chunk_range(source)
                for c in itertools.product(*(range(a, b) for a, b in zip(lo, hi, strict=True))):
                    if c in stored and (
                        task.target is None or dst.grid.object_of(c)[0] == task.target
                    ):
                        readers[c] = readers.get(c, 0) + 1
        assert readers == dict.fromkeys(stored, 1)
        # resumed: the targets written by an interrupted run are read, never written
        done = {o for i, o in enumerate(sorted(_writers(tasks, dst, src))) if i % 3 == 0}
        again, _ = plan_pass(src, dst, objects, done)
        writers = _writers([t for t in again if t.kind != "index"], dst, src)
        assert all(n == 1 for n in writers.values()) and not set(writers) & done
        kept = {t.target for t in again if t.kind == "index"}
        kept |= {o for t in again if t.kind == "unpack" for o in t.existing}
        assert kept == done


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_flat_to_sharded_packs_each_shard_in_order(data: st.DataObject) -> None:
    """Flat chunks are grouped by target shard (checked and grouped all at once): one
    task per shard in shard order, its chunks in chunk order, as a plain loop would."""
    ndim = data.draw(st.integers(0, 3))
    shape = data.draw(st.lists(st.integers(1, 30), min_size=ndim, max_size=ndim))
    chunks = data.draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim))
    cps = data.draw(st.tuples(*[st.integers(1, 4)] * ndim))
    src = read_layout(flat_doc(shape, chunks))
    dst = read_layout(retarget(flat_doc(shape, chunks), cps, Encoding("default", ".")))
    near = [range(g + 2) for g in src.chunk_grid]  # some out of bounds: ignored
    stored = data.draw(st.sets(st.tuples(*map(st.sampled_from, near)), max_size=40))
    tasks, ignored = plan_pass(src, dst, stored)
    inside = sorted(c for c in stored if src.grid.chunk_in_bounds(c))
    expected: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for c in inside:
        expected.setdefault(dst.grid.object_of(c)[0], []).append(c)
    assert [(t.kind, t.target, list(t.sources)) for t in tasks] == [
        ("pack", t, c) for t, c in sorted(expected.items())
    ]
    assert ignored == len(stored) - len(inside)


def test_plan_pass_resume_marks_existing_targets() -> None:
    flat = flat_doc([40, 40], [10, 10])
    sharded = retarget(flat, (2, 2), Encoding("default", "."))
    src, dst = read_layout(flat), read_layout(sharded)
    stored = list(itertools.product(range(4), range(4)))
    tasks, _ = plan_pass(src, dst, stored, [(0, 0)])
    kinds = {t.target: t.kind for t in tasks}
    assert kinds == {(0, 0): "index", (0, 1): "pack", (1, 0): "pack", (1, 1): "pack"}
    back, _ = plan_pass(dst, src, [(0, 0), (1, 1)], [(0, 0), (0, 1), (3, 3)])
    assert [t.existing for t in back] == [((0, 0), (0, 1)), ((3, 3),)]


def test_a_stray_key_beyond_int64_is_ignored() -> None:
    """An object key whose coordinates do not fit int64 (the key syntax allows 20
    digits) is outside the array: ignored, as any other stray object."""
    flat = flat_doc([40, 40], [10, 10])
    src = read_layout(flat)
    dst = read_layout(retarget(flat, (2, 2), Encoding("default", ".")))
    stray = (99_999_999_999_999_999_999, 0)
    tasks, ignored = plan_pass(src, dst, [(0, 0), (1, 3), stray])
    assert ignored == 1
    assert [(t.target, t.sources) for t in tasks] == [((0, 0), ((0, 0),)), ((0, 1), ((1, 3),))]
