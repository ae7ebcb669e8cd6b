"""CloudStore: one obstore-backed Store for ``s3://``, ``gs://``, ``http(s)://``, ``az://``.

``open_store("s3://bucket/prefix", **options)`` lands here (every scheme of
``asyncshard.backends.schemes.CLOUD_SCHEMES``: also ``s3a``, ``gcs``, ``azure``,
``abfs[s]``, ``adl``). Credentials and endpoints follow obstore's conventions (``AWS_*``,
``GOOGLE_*``, ``AZURE_*`` environment variables) and can be passed as options; see
docs/cloud.md for the full list.

Modules: :mod:`.store` (the I/O), :mod:`.config` (URL, options, credential sources),
:mod:`.errors` (obstore exceptions to asyncshard errors), :mod:`.calls` (one obstore
call, retried: throttling paced by the request window, transient failures),
:mod:`.listing`, :mod:`.mutations` (deletes and server-side copies), :mod:`.versions`,
:mod:`.writes` (PUTs, and conditional writes with a lost answer), :mod:`.inflight`
(closing without aborting the interpreter).

Behaviour worth knowing:

* **Versions** are the object's ETag; when the backend also reports an object version
  (GCS generation, S3 version id) it is appended as ``<etag>#<version>``. Conditional
  reads send ``If-Match: <etag>``; conditional writes send ``If-None-Match: *`` /
  ``If-Match`` (S3, Azure) or ``x-goog-if-generation-match`` (GCS).
* **Ranges** clamp like Python slicing on every backend. A zero-length range, and a
  range the server answers with 416 (it starts at or past the end; on some servers a
  suffix longer than the object), are settled by a ``HEAD`` (plus one bounded ``GET``
  if the clamped range is not empty). A server that answers a range request with a
  full ``200`` (it ignores ``Range``) is read whole once more and sliced. A read that
  returns the object's version (``get_object``, conditioned reads) checks its body's
  length against ``Content-Range``; a read of bytes alone (``get``, ``get_many``) goes
  through obstore's one-call ``get_range_async``, whose body is checked against
  ``Content-Length`` by the HTTP client.
* **Counters**: ``stats.requests`` counts the requests the store sent, extra ``HEAD``\\ s
  and ``GET``\\ s and restarts included; retries of the same request (after a throttling
  answer or a transient failure) are not; the endpoint's window counts refusals.
  ``erase_values`` counts one ``delete`` per DeleteObjects request on S3
  (up to 1,000 keys each) and one per key elsewhere.
* **Errors**: a bad URL or bad options → ``StoreConfigError`` (a ``ValueError``) when
  the store is opened, before any request; missing → ``None``; precondition failed →
  ``ConflictError``; 401/403 → ``StorePermissionError`` naming the bucket and the
  credential source (``StoreAuthenticationError`` when the credentials themselves are
  refused; on ``http(s)://`` a 403 reads as missing, like Neuroglancer);
  connection failures, timeouts, truncated bodies and 5xx after retries →
  ``StoreConnectionError``; throttling past ``throttle_timeout`` → ``ThrottledError``.
* **Request window**: every store of one endpoint (backend, endpoint, bucket) shares
  one adaptive window of requests and bytes in flight (:mod:`asyncshard.window`).
* **Retries** are the store's, obstore's are off (:mod:`.calls`): throttling answers
  (503, 429, ``SlowDown``, ...) are retried as the window allows until
  ``throttle_timeout``; 5xx, connection errors and timeouts of idempotent requests up
  to ``max_retries`` times with exponential backoff and jitter. A read whose body
  breaks off is started again, up to ``max_retries`` times, each restart counted as a
  ``get``. A conditional write whose outcome is unknown is
  resolved by looking at the object (:mod:`.writes`).
* **Closing** waits for the requests still in flight, so that no obstore thread is left
  completing one while the interpreter shuts down (:mod:`.inflight`).
* **Plain HTTP** is allowed when the URL or the configured endpoint is ``http://`` (the
  user wrote it) or ``allow_http=True`` is passed.
* ``http(s)://`` stores are read-only and cannot list unless ``listing=True`` (WebDAV
  ``PROPFIND``, as obstore implements it).
"""

from asyncshard.backends.cloud.config import CLOUD_MAX_GAP, CLOUD_MAX_REQUEST, MULTIPART_THRESHOLD
from asyncshard.backends.cloud.store import CloudStore

__all__ = ["CLOUD_MAX_GAP", "CLOUD_MAX_REQUEST", "MULTIPART_THRESHOLD", "CloudStore"]
