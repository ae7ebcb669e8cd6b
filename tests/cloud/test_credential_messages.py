"""Credential failures say what was wrong and where the credentials came from, in one
line, with a typed error and a non-zero exit: a wrong secret given as an option next to
an access key id from the environment, no credentials at all (the instance metadata
service reached at a closed local port, never the real one), and a GCS service-account
key file that names an ``http://`` emulator.

Nothing here reaches a real credential chain: every AWS variable is removed, the
metadata endpoint is a closed port on 127.0.0.1, endpoints are the test servers'."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncshard.backends import open_store
from asyncshard.backends.cloud import CloudStore
from asyncshard.cli import cli
from asyncshard.errors import StoreAuthenticationError, StoreConfigError
from tests.cloud.test_option_values import AWS_VARIABLES as OPENING_VARIABLES
from tests.servers.fixtures import TEST_BUCKET, unique_prefix
from tests.servers.gcs_fake import FakeGCS, service_account_key
from tests.servers.s3 import S3Server

#: Every variable through which AWS credentials, endpoints or a profile could come.
AWS_VARIABLES = (
    *OPENING_VARIABLES,
    "AWS_PROFILE",
    "AWS_METADATA_ENDPOINT",
    "AWS_EC2_METADATA_DISABLED",
)


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def metadata_nowhere(monkeypatch: pytest.MonkeyPatch, closed_port: int) -> Iterator[str]:
    """No AWS variable set but the instance metadata endpoint, moved to a closed local
    port (obstore reads ``AWS_METADATA_ENDPOINT``): the real one is never asked."""
    for var in AWS_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    endpoint = f"http://127.0.0.1:{closed_port}"
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", endpoint)
    yield endpoint


def one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def test_a_wrong_secret_option_is_named_next_to_the_key_from_the_environment(
    s3_server: S3Server, metadata_nowhere: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o secret_access_key=wrong`` with ``AWS_ACCESS_KEY_ID`` in the environment: the
    message names both sources, not the AWS_* variables alone."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)  # right, but overridden
    result = CliRunner().invoke(
        cli,
        [
            "ls",
            f"s3://{s3_server.bucket}/{unique_prefix()}",
            "--endpoint",
            s3_server.endpoint,
            "-o",
            f"region={s3_server.region}",
            "-o",
            "secret_access_key=wrong",
        ],
    )
    assert result.exit_code == 1
    line = one_line(result.output)
    assert line.startswith("Error: StoreAuthenticationError: ")
    assert "credentials refused" in line
    assert (
        "credentials from the AWS_ACCESS_KEY_ID environment variable with the "
        "secret_access_key option" in line
    )


@pytest.mark.parametrize(
    ("options", "variables", "source"),
    [
        (
            {"access_key_id": "k", "secret_access_key": "s"},
            {},
            "the access_key_id/secret_access_key options",
        ),
        (
            {},
            {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
            "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables",
        ),
        (
            {"access_key_id": "k", "secret_access_key": "s"},
            {"AWS_SESSION_TOKEN": "t"},
            "the access_key_id option with the secret_access_key option with the "
            "AWS_SESSION_TOKEN environment variable",
        ),
        (
            {"secret_access_key": "s"},
            {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "x"},
            "the AWS_ACCESS_KEY_ID environment variable with the secret_access_key option",
        ),
    ],
)
def test_the_credential_source_is_named_part_by_part(
    options: dict[str, str],
    variables: dict[str, str],
    source: str,
    metadata_nowhere: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    store = open_store("s3://b/p", endpoint="http://127.0.0.1:1", region="us-east-1", **options)
    assert isinstance(store, CloudStore) and store.credential_source == source


def test_no_credentials_at_all_says_what_to_set(s3_server: S3Server, metadata_nowhere: str) -> None:
    """No credentials and the metadata service enabled: the first request fails with a
    line that says to set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or use --anon (it
    is not retried: no retry can bring credentials)."""
    url = f"s3://{s3_server.bucket}/{unique_prefix()}"
    flags = ["--endpoint", s3_server.endpoint, "-o", f"region={s3_server.region}"]
    result = CliRunner().invoke(cli, ["ls", url, *flags])
    assert result.exit_code == 1
    line = one_line(result.output)
    assert line.startswith(f"Error: StoreAuthenticationError: {url}: no credentials: ")
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in line and "--anon" in line
    assert "169.254" not in line and metadata_nowhere not in line


async def test_no_credentials_through_the_library(
    s3_server: S3Server, metadata_nowhere: str
) -> None:
    url = f"s3://{s3_server.bucket}/{unique_prefix()}"
    async with open_store(url, endpoint=s3_server.endpoint, region=s3_server.region) as store:
        with pytest.raises(StoreAuthenticationError, match=r"no credentials: .*\(--anon\)"):
            await store.get("k")
        assert store.stats.requests["get"] == 1  # not retried


@pytest.fixture
def key_file(gcs_fake: FakeGCS, tmp_path: Path) -> Path:
    """A service-account key file whose JSON names the fake's ``http://`` address."""
    path = tmp_path / "key.json"
    path.write_text(service_account_key(gcs_fake.url))
    return path


def test_a_gcs_key_file_naming_an_http_base_url_is_used_without_endpoint(
    key_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o service_account=key.json`` whose ``gcs_base_url`` is ``http://``, no
    ``--endpoint``: the store goes to that address (as with the key given as JSON), so
    plain HTTP is allowed as for an ``--endpoint http://...``."""
    monkeypatch.delenv("GOOGLE_SERVICE_ACCOUNT_KEY", raising=False)
    url = f"gs://{TEST_BUCKET}/{unique_prefix()}"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k").write_bytes(b"v")
    runner = CliRunner()
    flags = ["-o", f"service_account={key_file}"]
    result = runner.invoke(cli, ["cp", "-r", str(tmp_path / "src"), url, *flags])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["cat", url, "k", *flags])
    assert (result.exit_code, result.output) == (0, "v")
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT", str(key_file))  # the same by its variable
    result = runner.invoke(cli, ["cat", url, "k"])
    assert (result.exit_code, result.output) == (0, "v")


def test_plain_http_refused_by_allow_http_says_so(key_file: Path) -> None:
    """The same key with ``allow_http=false``: a usage error naming allow_http, not
    obstore's bare "builder error"."""
    url = f"gs://{TEST_BUCKET}/{unique_prefix()}"
    flags = ["-o", f"service_account={key_file}", "-o", "allow_http=false"]
    result = CliRunner().invoke(cli, ["ls", url, *flags])
    assert result.exit_code == 2
    line = one_line(result.output)
    assert line.startswith("Error: StoreConfigError: ") and "allow_http" in line
    assert "builder error" not in line
    store = open_store(url, service_account=str(key_file), allow_http=False)
    with pytest.raises(StoreConfigError, match="allow_http is off"):
        asyncio.run(store.get("k"))
