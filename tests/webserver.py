"""A real web server for tests that need one over HTTP (gunicorn, as deploy/ runs it)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(argv: list[str], env: dict[str, str], port: int, log_path: Path) -> Iterator[None]:
    """Run ``python -m <argv>`` until it listens on ``port`` (its output in ``log_path``,
    quoted when it dies first); stop it on exit."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(log_path.read_text()[-3000:]) from None
                    time.sleep(0.2)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
