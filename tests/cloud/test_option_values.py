"""Option values are checked before they reach obstore: a malformed one is a
``StoreConfigError`` naming the option, when the store is opened; never a panic of
obstore's Rust core when a request is built (an endpoint without a scheme, a line break in
a credential), nor a Python error of another kind."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncshard.backends import open_store
from asyncshard.backends.cloud import CloudStore
from asyncshard.cli import cli
from asyncshard.errors import AsyncShardError, StoreConfigError
from tests.servers.fixtures import unique_prefix
from tests.servers.gcs_fake import FakeGCS, service_account_key
from tests.servers.s3 import S3Server

#: Environment variables obstore reads: none may steer the fuzzed stores elsewhere.
AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in AWS_VARIABLES:
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"endpoint": "127.0.0.1:9000"}, "endpoint='127.0.0.1:9000'"),
        ({"endpoint": "http://127.0.0.1:99999"}, "endpoint="),
        ({"endpoint": "http://127.0.0.1:9000/a b"}, "endpoint="),
        ({"endpoint": ""}, "endpoint=''"),
        ({"aws_endpoint": "localhost:9000"}, "aws_endpoint="),
        ({"region": "us-east-1\n"}, "region="),
        ({"region": "a b"}, "region='a b'"),
        ({"access_key_id": "key\x00"}, "access_key_id="),
        ({"skip_signature": "maybe"}, "skip_signature='maybe'"),
        ({"virtual_hosted_style_request": "sometimes"}, "virtual_hosted_style_request="),
        ({"client_options": {"proxy_url": "127.0.0.1:3128"}}, "proxy_url="),
        ({"client_options": {"user_agent": "a\r\nX-Injected: 1"}}, "user_agent="),
        ({"client_options": {"allow_http": "perhaps"}}, "allow_http="),
        ({"timeout": float("inf")}, "timeout=inf"),
        ({"timeout": -1}, "timeout=-1"),
        ({"connect_timeout": float("nan")}, "connect_timeout=nan"),
        ({"conditional_writes": "false"}, "conditional_writes='false'"),
        ({"max_gap": "1MB"}, "max_gap='1MB'"),
        ({"checksum_algorithm": "md4"}, "checksum_algorithm='md4'"),  # obstore refuses it
        ({"client_options": {"pool_max_idle_per_host": "many"}}, "pool_max_idle_per_host="),
    ],
)
def test_a_malformed_value_names_its_option(
    options: dict[str, Any], named: str, no_aws_environment: None
) -> None:
    base = {"access_key_id": "a", "secret_access_key": "b", "region": "us-east-1"}
    base.setdefault("endpoint", "http://127.0.0.1:9000")
    with pytest.raises(StoreConfigError) as err:
        open_store("s3://bucket/p", **{**base, **options})
    assert named in str(err.value)


def test_gcs_and_azure_addresses_are_checked_too() -> None:
    with pytest.raises(StoreConfigError, match=re.escape("base_url='127.0.0.1:4443'")):
        open_store("gs://bucket/p", base_url="127.0.0.1:4443", bearer_token="t")
    with pytest.raises(StoreConfigError, match="bearer_token=<hidden>"):
        open_store("gs://bucket/p", base_url="http://127.0.0.1:4443", bearer_token="t\n")
    with pytest.raises(StoreConfigError, match="endpoint="):
        open_store("az://container/p", account_name="acct", endpoint="acct.example:10000")


@pytest.mark.parametrize("url", ['http://Ui"H/data', "http://d\u00a3}/x", "https://a b/x"])
def test_a_malformed_http_host_is_refused_when_opened(url: str) -> None:
    """obstore takes these and panics when it builds a request's URL."""
    with pytest.raises(StoreConfigError, match=r"host|ASCII"):
        open_store(url)


def test_a_secret_is_not_repeated_in_the_error() -> None:
    with pytest.raises(StoreConfigError) as err:
        open_store(
            "s3://bucket/p",
            endpoint="http://127.0.0.1:9000",
            access_key_id="a",
            secret_access_key="top\nsecret",
            session_token="tok\x01en",
        )
    assert "<hidden>" in str(err.value) and "secret'" not in str(err.value)
    assert "top" not in str(err.value) and "tok" not in str(err.value)


@pytest.mark.parametrize("flag", ["--endpoint", "-o"])
def test_the_cli_says_what_is_wrong_with_an_endpoint_in_one_line(flag: str) -> None:
    args = ["--endpoint", "127.0.0.1:9000"] if flag == "--endpoint" else ["-o", "endpoint=h:1"]
    result = CliRunner().invoke(cli, ["ls", "s3://bucket/p", *args])
    assert result.exit_code == 2, result.output  # a usage error either way
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "endpoint" in errors[0] and "http://" in errors[0]
    assert "Traceback" not in result.output and "panic" not in result.output


# -- every string option, fuzzed against a real server ------------------------------------

#: S3 options that take strings: addresses, names, credentials, booleans, choices.
S3_STRING_OPTIONS = (
    "endpoint",
    "region",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "skip_signature",
    "virtual_hosted_style_request",
    "unsigned_payload",
    "checksum_algorithm",
    "conditional_put",
    "request_payer",
    "server_side_encryption",
    "sse_kms_key_id",
    "disable_tagging",
)
#: Client options that take strings: durations, sizes, booleans, headers, a proxy.
CLIENT_STRING_OPTIONS = (
    "timeout",
    "connect_timeout",
    "pool_idle_timeout",
    "pool_max_idle_per_host",
    "http2_keep_alive_interval",
    "allow_http",
    "user_agent",
    "default_content_type",
    "proxy_url",
)
#: Values: any text, and text after the starts of addresses, numbers and booleans.
VALUES = st.one_of(
    st.text(max_size=40),
    st.builds(
        str.__add__,
        st.sampled_from(["http://", "http://127.0.0.1:", "https://[", "1", "true", "5s"]),
        st.text(max_size=20),
    ),
)
FUZZ = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _opens_or_refuses(url: str, options: dict[str, Any]) -> None:
    """Open the store and read from it: a refusal must be a ``StoreConfigError`` when it
    opens, and a read fails (if at all) with an asyncshard error, never a panic."""
    try:
        store = open_store(url, **options)
    except StoreConfigError:
        return

    async def read() -> None:
        async with store:
            with contextlib.suppress(AsyncShardError):
                await store.get("k")

    asyncio.run(read())


@pytest.mark.parametrize("name", S3_STRING_OPTIONS + CLIENT_STRING_OPTIONS)
def test_no_string_option_value_panics(
    name: str, s3_server: S3Server, no_aws_environment: None
) -> None:
    base = s3_server.options(max_retries=0, connect_timeout="2s", timeout="10s")
    url = f"s3://{s3_server.bucket}/{unique_prefix()}"

    @FUZZ
    @given(value=VALUES)
    def fuzz(value: str) -> None:
        if name in S3_STRING_OPTIONS:
            _opens_or_refuses(url, {**base, name: value})
        else:
            client = {"connect_timeout": "2s", "timeout": "10s", name: value}
            _opens_or_refuses(url, {**base, "client_options": client})

    fuzz()


@pytest.mark.parametrize("name", ["base_url", "bearer_token"])
def test_no_gcs_string_option_value_panics(name: str, gcs_fake: FakeGCS) -> None:
    base: dict[str, Any] = {"service_account_key": service_account_key(gcs_fake.url)}
    base.update(max_retries=0, connect_timeout="2s", timeout="10s")

    @FUZZ
    @given(value=VALUES)
    def fuzz(value: str) -> None:
        _opens_or_refuses(f"gs://bucket/{unique_prefix()}", {**base, name: value})

    fuzz()


# -- AWS_EC2_METADATA_DISABLED --------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["true", "TRUE", "True"])
async def test_disabled_instance_metadata_is_never_asked(
    spelling: str, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, no_aws_environment: None
) -> None:
    """With no credentials and ``AWS_EC2_METADATA_DISABLED=true``, as the AWS SDKs read
    it, the store says so when opened instead of asking 169.254.169.254 at each request;
    credentials given or anonymous requests still work."""
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", spelling)
    url = f"s3://{s3_server.bucket}/{unique_prefix()}"
    with pytest.raises(StoreConfigError, match="AWS_EC2_METADATA_DISABLED") as err:
        open_store(url, endpoint=s3_server.endpoint, region=s3_server.region)
    assert "169.254" not in str(err.value) and "access_key_id" in str(err.value)
    async with open_store(url, **s3_server.options()) as store:
        await store.set("k", b"v")
        assert await store.get("k") == b"v"
    anonymous = open_store(url, endpoint=s3_server.endpoint, skip_signature=True)
    assert isinstance(anonymous, CloudStore) and "anonymous" in anonymous.credential_source
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
    assert open_store(url, endpoint=s3_server.endpoint, region=s3_server.region) is not None
