"""A FAKE of the Google Cloud Storage XML API, just big enough for obstore's GCS client.

No GCS emulator installable here works with obstore (gcp-storage-emulator lacks ETag,
HEAD and listing), so the GCS tests run against this fake. It is a fake, not GCS: it
implements only what obstore sends and answers the way GCS documents it:

* ``GET``/``HEAD /{bucket}/{object}`` with a single ``Range`` (``a-b``, ``a-``, ``-n``;
  unsatisfiable → 416), ``If-Match``/``If-None-Match`` on the ETag,
  ``x-goog-if-generation-match`` and ``?generation=``; answers carry ``ETag`` (MD5, as
  GCS does for simple uploads), ``x-goog-generation``, ``Last-Modified``;
* ``PUT`` with ``x-goog-if-generation-match`` (``0`` = only if absent; 412 otherwise);
* ``DELETE`` (404 when missing, as GCS);
* ``GET /{bucket}?list-type=2`` with ``prefix``, ``delimiter``, ``max-keys``,
  ``continuation-token`` and ``start-after``, answering an S3-style ``ListBucketResult``
  (that is what GCS's XML API returns and what obstore parses);
* optional bearer-token check (``token=``): a wrong token gets 401, as GCS does.

Multipart uploads, ACLs, metadata and object versioning are not implemented.
obstore reaches the fake through a service-account JSON with ``gcs_base_url`` and
``disable_oauth: true`` (see :func:`service_account_key`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from urllib.parse import unquote
from xml.sax.saxutils import escape

from aiohttp import web

from tests.servers._threaded import ThreadedApp


@dataclass
class FakeObject:
    data: bytes
    generation: int
    modified: datetime

    @property
    def etag(self) -> str:
        return '"' + hashlib.md5(self.data).hexdigest() + '"'


@dataclass
class FakeGCS:
    """The fake's state; :meth:`start` serves it on 127.0.0.1."""

    buckets: dict[str, dict[str, FakeObject]] = field(default_factory=dict)
    token: str | None = None
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last_generation: int = 0
    _server: ThreadedApp | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "fake not started"
        return self._server.url

    def create_bucket(self, name: str) -> None:
        self.buckets.setdefault(name, {})

    def start(self) -> FakeGCS:
        self._server = ThreadedApp(self._app, "gcs-fake").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def _generation(self) -> int:
        with self._lock:
            self._last_generation = max(self._last_generation + 1, time.time_ns() // 1000)
            return self._last_generation

    # -- app ----------------------------------------------------------------------------

    async def _app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.log.append((request.method, request.path, request.headers.get("Range")))
        if self.token is not None and request.headers.get("Authorization") != (
            f"Bearer {self.token}"
        ):
            return _error(401, "AuthenticationRequired", "Invalid bearer token (fake GCS)")
        raw = request.raw_path.partition("?")[0].lstrip("/")
        bucket_enc, _, key_enc = raw.partition("/")
        bucket = unquote(bucket_enc)
        objects = self.buckets.get(bucket)
        if objects is None:
            return _error(404, "NoSuchBucket", f"bucket {bucket!r} does not exist")
        if not key_enc:
            if request.method == "GET":
                return self._list(bucket, objects, request)
            return _error(405, "MethodNotAllowed", "only listing is supported on buckets")
        key = unquote(key_enc)
        if request.method in ("GET", "HEAD"):
            return self._get(objects, key, request)
        if request.method == "PUT":
            source = request.headers.get("x-goog-copy-source")
            if source is not None:
                return self._copy(objects, key, source, request)
            return self._put(objects, key, await request.read(), request)
        if request.method == "DELETE":
            return self._delete(objects, key, request)
        return _error(501, "NotImplemented", f"{request.method} is not implemented by the fake")

    def _headers(self, obj: FakeObject) -> dict[str, str]:
        md5 = base64.b64encode(hashlib.md5(obj.data).digest()).decode()
        return {
            "ETag": obj.etag,
            "Last-Modified": format_datetime(obj.modified, usegmt=True),
            "x-goog-generation": str(obj.generation),
            "x-goog-metageneration": "1",
            "x-goog-stored-content-length": str(len(obj.data)),
            "x-goog-hash": f"md5={md5}",
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }

    def _precondition(self, obj: FakeObject | None, request: web.Request) -> web.Response | None:
        want = request.headers.get("x-goog-if-generation-match")
        if want is not None:
            current = 0 if obj is None else obj.generation
            if int(want) != current:
                return _error(412, "PreconditionFailed", "generation does not match")
        return None

    def _get(self, objects: dict[str, FakeObject], key: str, request: web.Request) -> web.Response:
        obj = objects.get(key)
        generation = request.query.get("generation")
        if obj is None or (generation is not None and int(generation) != obj.generation):
            return _error(404, "NoSuchKey", "The specified key does not exist.")
        failed = self._precondition(obj, request)
        if failed is not None:
            return failed
        if_match = request.headers.get("If-Match")
        if (
            if_match is not None
            and if_match.strip() != "*"
            and obj.etag not in [t.strip() for t in if_match.split(",")]
        ):
            return _error(412, "PreconditionFailed", "If-Match does not hold")
        if_none = request.headers.get("If-None-Match")
        if if_none is not None and (
            if_none.strip() == "*" or obj.etag in [t.strip() for t in if_none.split(",")]
        ):
            return web.Response(status=304, headers={"ETag": obj.etag})
        headers = self._headers(obj)
        size = len(obj.data)
        status, body = 200, obj.data
        rng = request.headers.get("Range")
        if rng is not None and rng.startswith("bytes=") and "," not in rng:
            head, _, tail = rng[6:].partition("-")
            if head:
                start = int(head)
                end = min(int(tail) + 1, size) if tail else size
            else:
                start, end = max(size - int(tail), 0), size
            if start >= size or end <= start or (not head and int(tail) == 0):
                unsatisfiable = {"Content-Range": f"bytes */{size}"}
                return _error(416, "InvalidRange", "The range cannot be satisfied.", unsatisfiable)
            status, body = 206, obj.data[start:end]
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(body))
            return web.Response(status=status, headers=headers)
        return web.Response(status=status, body=body, headers=headers)

    def _put(
        self, objects: dict[str, FakeObject], key: str, data: bytes, request: web.Request
    ) -> web.Response:
        if request.query.get("uploads") is not None or request.query.get("uploadId"):
            return _error(501, "NotImplemented", "multipart uploads are not implemented")
        failed = self._precondition(objects.get(key), request)
        if failed is not None:
            return failed
        obj = FakeObject(data, self._generation(), datetime.now(UTC).replace(microsecond=0))
        objects[key] = obj
        headers = {"ETag": obj.etag, "x-goog-generation": str(obj.generation)}
        return web.Response(status=200, headers=headers)

    def _copy(
        self, objects: dict[str, FakeObject], key: str, source: str, request: web.Request
    ) -> web.Response:
        """The XML API's copy: a PUT naming ``/bucket/key`` of the source."""
        bucket, _, name = unquote(source).lstrip("/").partition("/")
        found = self.buckets.get(bucket, {}).get(name)
        if found is None:
            return _error(404, "NoSuchKey", "The specified key does not exist.")
        return self._put(objects, key, found.data, request)

    def _delete(
        self, objects: dict[str, FakeObject], key: str, request: web.Request
    ) -> web.Response:
        obj = objects.get(key)
        if obj is None:
            return _error(404, "NoSuchKey", "The specified key does not exist.")
        failed = self._precondition(obj, request)
        if failed is not None:
            return failed
        del objects[key]
        return web.Response(status=204)

    def _list(
        self, bucket: str, objects: dict[str, FakeObject], request: web.Request
    ) -> web.Response:
        q = request.query
        prefix = q.get("prefix", "")
        delimiter = q.get("delimiter") or None
        max_keys = int(q.get("max-keys", "1000"))
        after = q.get("continuation-token") or q.get("start-after") or ""
        entries: dict[str, FakeObject | None] = {}  # name -> object, None for a prefix
        for key in sorted(objects):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix) :]
            if delimiter and delimiter in rest:
                entries[prefix + rest[: rest.index(delimiter) + len(delimiter)]] = None
            else:
                entries[key] = objects[key]
        names = [n for n in sorted(entries) if n > after]
        page, more = names[:max_keys], len(names) > max_keys
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>',
            '<ListBucketResult xmlns="http://doc.s3.amazonaws.com/2006-03-01">',
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>",
            f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>",
            f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>",
        ]
        for name in page:
            obj = entries[name]
            if obj is None:
                parts.append(f"<CommonPrefixes><Prefix>{escape(name)}</Prefix></CommonPrefixes>")
            else:
                stamp = obj.modified.strftime("%Y-%m-%dT%H:%M:%S.000Z")
                parts.append(
                    f"<Contents><Key>{escape(name)}</Key><LastModified>{stamp}</LastModified>"
                    f"<ETag>{escape(obj.etag)}</ETag><Size>{len(obj.data)}</Size>"
                    f"<Generation>{obj.generation}</Generation></Contents>"
                )
        if more:
            parts.append(f"<NextContinuationToken>{escape(page[-1])}</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        return web.Response(text="".join(parts), content_type="application/xml")


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    xml = (
        "<?xml version='1.0' encoding='UTF-8'?>"
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
    )
    return web.Response(status=status, text=xml, content_type="application/xml", headers=headers)


def service_account_key(base_url: str) -> str:
    """A service-account JSON that points obstore at ``base_url`` without OAuth."""
    return json.dumps(
        {
            "gcs_base_url": base_url,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
    )
