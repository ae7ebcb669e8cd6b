"""The README's zarr-python, xarray and dask examples, run against the S3 test server."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.servers.fixtures import unique_prefix
from tests.servers.s3 import S3Server
from tests.test_readme import BLOCKS

SERVER_BLOCKS = [b for b in BLOCKS if "ZarrStore(" in b]


def test_the_zarr_examples_run_against_the_s3_test_server(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zarr-python/xarray/dask examples, in order, on a fresh prefix of the S3 test
    server (credentials from the variables obstore reads, as a user would set them)."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_REGION": s3_server.region,
    }.items():
        monkeypatch.setenv(name, value)
    code = "\n".join(SERVER_BLOCKS)
    code = code.replace("s3://bucket/data", f"s3://{s3_server.bucket}/{unique_prefix()}")
    code = code.replace("http://127.0.0.1:9000", s3_server.endpoint)
    assert len(SERVER_BLOCKS) == 2 and s3_server.endpoint in code
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    printed = out.getvalue()
    assert printed.startswith("4096 ")  # 64 x 64 ones, then the requests it cost
    assert printed.count("<xarray.Dataset>") == 2
