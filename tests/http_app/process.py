"""``asyncshard serve ...`` run for real in a subprocess, for the command's tests."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

SERVE = [sys.executable, "-c", "from asyncshard.server.command import main; main()"]


class Running:
    """``asyncshard serve ...`` in a subprocess (on a free port); the lines it printed."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*SERVE, *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        self.stop()
        raise AssertionError(f"{pattern!r} not printed: {self.lines} {self.stderr()}")

    def url(self) -> str:
        """The base URL the server printed once listening."""
        return self.wait_for(r"Serving .* at (http://127\.0\.0\.1:\d+)/").group(1)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read() if self.proc.poll() is not None else ""

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        return self.proc.wait(40)
