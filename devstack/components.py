"""The processes of a local control plane: how one is started, watched and described.

Split from ``devstack/controlplane.py`` (which composes them into a cluster): a component
dies with the harness (``PR_SET_PDEATHSIG``), logs to its own file, and
:func:`kubeconfig_yaml` writes the credentials each one (and each test) uses.
"""

from __future__ import annotations

import base64
import os
import random
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class ComponentDied(RuntimeError):
    """A control-plane component exited; the message names it and ends with its log's tail."""


def _die_with_parent() -> None:
    """In the child: SIGKILL when the harness' process dies, even by SIGKILL (prctl).

    Not SIGTERM: a kube-apiserver whose etcd died with the same parent was seen to hang in
    its graceful shutdown, an orphan holding 400 MiB; nothing here is worth a clean exit."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# How far below the kernel's ephemeral range :func:`free_port` looks.
PORT_WINDOW = 12000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A loopback port nothing listens on, for a component to bind, taken below the
    kernel's ephemeral range: a port from ``bind(0)`` is an ephemeral one, which the kernel
    may give to an outgoing connection (a component's to etcd or the apiserver, a test's)
    between this call and the component's bind: Kueue once died with "bind: address
    already in use" that way and took a test worker's 120 tests with it. Random within the
    window, checked by binding; ``bind(0)`` where the range leaves no room below it."""
    low, _ = _ephemeral_range()
    first = max(1024, low - PORT_WINDOW)
    rng = random.SystemRandom()
    for _ in range(200 if low - first >= 1000 else 0):
        port = rng.randrange(first, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Component:
    name: str
    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    started_s: float = 0.0  # seconds from the harness' start until it was ready
    restarting: bool = False  # the monitor does not count its exit as a death

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            self.args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env},
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        out.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def kubeconfig_yaml(
    server: str, ca_pem: bytes, user: str, *, cert: Path | None = None, key: Path | None = None,
    token: str = "",
) -> str:  # fmt: skip
    """A kubeconfig with one cluster, user and context (credentials embedded)."""
    credentials: dict[str, str] = {}
    if cert and key:
        credentials["client-certificate-data"] = base64.b64encode(cert.read_bytes()).decode()
        credentials["client-key-data"] = base64.b64encode(key.read_bytes()).decode()
    if token:
        credentials["token"] = token
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    }
    return yaml.safe_dump(doc, sort_keys=False)
