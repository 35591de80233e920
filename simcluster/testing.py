"""Helpers for tests and benchmarks that want the simulator out of process."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunningSim:
    """A simulator subprocess: where it listens, its kubeconfig, and how to stop it."""

    url: str
    kubeconfig: str
    process: subprocess.Popen[str]
    stop: Callable[[], None]
    token: str = ""  # the admin's bearer token (read back from the kubeconfig)


def start_subprocess(
    fleet: str | os.PathLike[str] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    kubeconfig: str | os.PathLike[str] | None = None,
    token: str | None = None,
    continue_ttl: float | None = None,
    extra_args: list[str] | None = None,
    timeout: float = 120.0,
    python: str = sys.executable,
) -> RunningSim:
    """Start ``python -m simcluster`` and wait until it answers ``/_sim/healthz``."""
    kc = str(kubeconfig or Path(tempfile.mkdtemp(prefix="simcluster-")) / "kubeconfig")
    cmd = [python, "-m", "simcluster", "--host", host, "--port", str(port), "--kubeconfig", kc]
    if fleet is not None:
        cmd += ["--fleet", str(fleet)]
    if token:
        cmd += ["--token", token]
    if continue_ttl is not None:
        cmd += ["--continue-ttl", str(continue_ttl)]
    cmd += extra_args or []
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    deadline = time.monotonic() + timeout
    url = ""
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(f"simcluster exited with {proc.returncode}")
            continue
        if line.startswith("SIMCLUSTER_URL="):
            url = line.strip().split("=", 1)[1]
            break
    if not url:
        proc.kill()
        raise TimeoutError("simcluster did not start in time")
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/_sim/healthz", timeout=2) as r:  # noqa: S310
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.05)

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()

    return RunningSim(url=url, kubeconfig=kc, process=proc, stop=stop, token=_admin_token(kc))


def _admin_token(kubeconfig: str) -> str:
    """The token of the kubeconfig the simulator wrote (authentication is always on)."""
    import yaml

    try:
        users = yaml.safe_load(Path(kubeconfig).read_text()).get("users") or []
    except (OSError, AttributeError):
        return ""
    return next((u.get("user", {}).get("token", "") for u in users), "")
