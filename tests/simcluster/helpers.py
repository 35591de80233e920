"""Helpers shared by the simulator's tests: API clients, waiting, bodies, and running kubectl.

``Kubectl`` runs the real ``kubectl`` against a simulator, with a kubeconfig of its own and
``HOME`` in the test's tmp dir (no cache or config of the machine leaks in). Tests that
need kubectl take the ``kubectl`` fixture (``tests/simcluster/conftest.py``), which skips
with the Debian package's name when kubectl is missing or too old (``tests/prereqs.py``);
a module with a simulator of its own overrides the ``sim`` fixture, and ``api``, ``v1`` and
``kubectl`` follow it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster
from simcluster.testing import RunningSim

T = TypeVar("T")

DEMO = Path(__file__).resolve().parents[2] / "simcluster" / "fleets" / "demo.yaml"


def make_api(
    sim: SimCluster | RunningSim, retries: int | None = 0, token: str | None = None
) -> client.ApiClient:
    """An official-client ``ApiClient`` over plain HTTP, as the admin or with ``token``.

    ``retries=0`` so that injected faults reach the test instead of urllib3's retry loop.
    """
    cfg = client.Configuration()
    cfg.host = sim.url
    cfg.retries = retries
    bearer = sim.token if token is None else token
    if bearer:
        cfg.api_key = {"authorization": f"Bearer {bearer}"}
    return client.ApiClient(cfg)


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05) -> T:
    """Poll until ``predicate()`` is truthy and return it; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def gone(read: Callable[..., Any], *args: Any) -> bool:
    """Whether ``read(*args)`` answers 404 now; any other error fails the test at once."""
    try:
        read(*args)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def pod(
    name: str,
    *,
    node: str | None = None,
    resources: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod body with one container ``main`` (image ``x``); ``spec`` adds PodSpec fields."""
    container: dict[str, Any] = {"name": "main", "image": "x"}
    if resources is not None:
        container["resources"] = resources
    body_spec: dict[str, Any] = {"containers": [container], **spec}
    if node:
        body_spec["nodeName"] = node
    return {"metadata": {"name": name, **(meta or {})}, "spec": body_spec}


def gpu_pod(name: str, gpus: int, node: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Pod requesting ``gpus`` whole GPUs (requests equal to limits, as the API requires)."""
    count = {"nvidia.com/gpu": str(gpus)}
    return pod(name, node=node, resources={"requests": count, "limits": dict(count)}, **spec)


def quota(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A ResourceQuota body; ``spec`` adds ``scopes``/``scopeSelector``."""
    return {"metadata": {"name": name}, "spec": {"hard": hard, **spec}}


def causes(status: dict[str, Any]) -> list[tuple[str, str]]:
    """``(field, message)`` of each cause in a ``Status`` body (field "" when absent)."""
    return [(c.get("field", ""), c["message"]) for c in status["details"]["causes"]]


def jwt_claims(token: str) -> dict[str, Any]:
    """The decoded payload of a JWT (the signature is not checked)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


class Kubectl:
    """``kubectl --kubeconfig <admin> ...`` against one simulator.

    ``kubectl("get", "nodes")`` asserts exit code 0 and returns the CompletedProcess;
    ``ok=False`` returns failures too; ``kubeconfig=PATH`` runs as someone else;
    ``stdin=TEXT`` feeds ``-f -``; ``popen(...)`` starts one that runs on (``get -w``).
    """

    def __init__(self, binary: str, sim: SimCluster | RunningSim, tmp_path: Path) -> None:
        self.binary = binary
        self.home = tmp_path / "kubectl-home"
        self.home.mkdir(exist_ok=True)
        if isinstance(sim, RunningSim):  # a subprocess simulator wrote its admin kubeconfig
            self.kubeconfig = Path(sim.kubeconfig)
        else:
            self.kubeconfig = sim.write_kubeconfig(tmp_path / "kubectl-admin.kubeconfig")
        self.env = {"HOME": str(self.home), "PATH": os.environ.get("PATH", "")}

    def _cmd(self, args: tuple[str, ...], kubeconfig: Path | None) -> list[str]:
        return [self.binary, "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]

    def __call__(
        self,
        *args: str,
        ok: bool = True,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self._cmd(args, kubeconfig), input=stdin, capture_output=True, text=True,
            env=self.env, timeout=timeout, check=False,
        )  # fmt: skip
        if ok:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result

    def popen(self, *args: str, kubeconfig: Path | None = None) -> subprocess.Popen[str]:
        """Start kubectl in the background (stdout and stderr piped); the caller ends it."""
        return subprocess.Popen(
            self._cmd(args, kubeconfig), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=self.env,
        )  # fmt: skip
