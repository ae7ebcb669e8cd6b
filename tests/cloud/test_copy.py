"""Server-side copies: on S3 and GCS a copy moves no byte through the client."""

from __future__ import annotations

import pytest

from asyncshard.backends.cloud import mutations as cloud_mutations
from asyncshard.backends.cloud.mutations import SERVER_SIDE_COPY
from asyncshard.errors import ReadOnlyError
from tests.cloud.conftest import Backend

BLOB = bytes(i * 13 % 251 for i in range(1 << 20))


async def test_copy_sends_no_bytes_through_the_client(backend: Backend) -> None:
    store = backend.store
    if not store.supports_writes:
        with pytest.raises(ReadOnlyError):
            await store.copy("a", "b")
        return
    assert getattr(store, "kind", None) in SERVER_SIDE_COPY
    await backend.seed({"src/blob": BLOB, "dst/old": b"old"})
    backend.reset_log()
    store.stats.reset()
    pairs = [("src/blob", "dst/old"), ("src/blob", "dst/new"), ("src/none", "dst/x")]
    assert await store.copy_many(pairs) == [len(BLOB), len(BLOB), None]
    # a HEAD of each source; a copy (PUT naming its source, empty body) of each found
    assert sorted(m for m, _, _ in backend.server_log()) == ["HEAD"] * 3 + ["PUT"] * 2
    assert store.stats.bytes_fetched == 0 and store.stats.bytes_written == 0
    assert dict(store.stats.requests) == {"copy": 2, "head": 3}  # the requests sent
    assert await store.get("dst/old") == BLOB == await store.get("dst/new")
    assert await store.get("dst/x") is None


async def test_an_object_too_large_to_copy_server_side_is_read_and_written(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.store
    if not store.supports_writes:
        pytest.skip("read-only: the test above checks the refusal")
    monkeypatch.setattr(cloud_mutations, "MAX_SERVER_SIDE_COPY", len(BLOB) - 1)
    await backend.seed({"src/blob": BLOB})
    backend.reset_log()
    assert await store.copy("src/blob", "dst/blob") == len(BLOB)
    assert [m for m, _, _ in backend.server_log()] == ["HEAD", "GET", "PUT"]
    assert await store.get("dst/blob") == BLOB
