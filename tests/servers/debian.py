"""Debian packages that tests and benchmarks need: found on the PATH, else apt-installed.

One installer for chromium (the viewer test), docker-compose (the compose file check),
nginx and wrk (benchmarks). It installs only what is missing, as root (or through
``sudo -n``), and refreshes the package lists only when the first attempt fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

#: Where Debian puts daemons that are not on a user's PATH (nginx).
_SBIN = ("/usr/sbin", "/sbin")


def find(names: Sequence[str]) -> str | None:
    """The first of ``names`` found on the PATH (or in sbin)."""
    for name in names:
        path = shutil.which(name) or next(
            (f"{d}/{name}" for d in _SBIN if os.access(f"{d}/{name}", os.X_OK)), None
        )
        if path:
            return path
    return None


def ensure(package: str, names: Sequence[str] | None = None) -> str:
    """The executable of Debian ``package`` (one of ``names``, default the package name),
    apt-installed when missing. ``RuntimeError`` with the installer's output when it
    cannot be had."""
    names = names or (package,)
    found = find(names)
    if found:
        return found
    if not shutil.which("apt-get"):
        raise RuntimeError(f"{package} is missing and there is no apt-get to install it")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            raise RuntimeError(f"{package} is missing and installing it needs root (or sudo)")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*prefix, "apt-get", "install", "-y", "-qq", "--no-install-recommends", package]
    result = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:  # stale or missing package lists: refresh, then again
        subprocess.run([*prefix, "apt-get", "update", "-qq"], capture_output=True, check=False)
        result = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    found = find(names)
    if result.returncode != 0 or not found:
        raise RuntimeError(
            f"installing {package} failed ({' '.join(install)}):\n"
            f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        )
    return found
