"""The cluster as the portal meets it: its own ServiceAccount, the RBAC of deploy/.

Every test that lets portal code talk to a cluster goes through :func:`start`, which gives
the **real control plane** (``tests/realcluster.py``: kube-apiserver v1.36, etcd,
kube-controller-manager, kube-scheduler, kwok, Kueue, shared by the session and reset for
each test, the fleet loaded and emulated by ``gpuemu``). The project's own manifests
(``deploy/kubernetes/namespace.yaml`` and ``rbac.yaml``, read from those files) are
installed, a token for the portal's ServiceAccount comes from the TokenRequest API, and
``cluster.kubeconfig_path`` points at a kubeconfig with that token. A call the manifests do
not allow is refused by the real RBAC authorizer, so it fails the test that makes it. Tests
arrange the cluster as its administrator through ``cluster.admin_kubeconfig_path``.

Without the control plane's binaries (no Go to build them: ``make k8s``) those tests skip,
naming the prerequisite. :func:`start_simulator` gives the Python simulator instead; only
tests that need what a real server cannot give (a fake clock, faults inside the simulator's
controllers) use it, and say why in their docstring.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "kubernetes"
PORTAL_MANIFESTS = (DEPLOY / "namespace.yaml", DEPLOY / "rbac.yaml")
PORTAL_SERVICE_ACCOUNT = ("gpu-quota-portal", "gpu-quota-portal")
PORTAL_USER = "system:serviceaccount:gpu-quota-portal:gpu-quota-portal"
# The GPU operator's namespace exists on every cluster the portal runs MIG on; the Role in
# rbac.yaml lives there.
OPERATOR_NAMESPACE = "gpu-operator"
# Test node ids per cluster kind, for the summary line at the end of the run (conftest.py).
RAN_AGAINST: dict[str, set[str]] = {"real": set(), "simulator": set()}
# tests/simcluster/ tests the simulator itself (conftest.py fills this as they run).
SIMULATOR_SUITE: set[str] = set()
PREREQUISITE = "Go 1.24+ to build the real control plane (make k8s)"


def _current_test() -> str:
    import os

    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]


def start(fleet: Any, tmp_path: Path, **options: Any):
    """The real control plane, reset, with ``fleet`` loaded and the portal's identity."""
    from tests import realcluster
    from tests.prereqs import SKIPPED

    if not realcluster.available():
        SKIPPED.add(PREREQUISITE)
        pytest.skip(f"the real control plane is not built: {PREREQUISITE}")
    return realcluster.RealCluster(fleet, tmp_path, **options)


def start_simulator(fleet: Any, tmp_path: Path, **kwargs: Any):
    """The Python simulator with the portal's identity (for a fake clock or in-simulator faults)."""
    from simcluster import SimCluster

    RAN_AGAINST["simulator"].add(_current_test())
    sim = SimCluster.from_fleet(fleet, **kwargs)
    sim.start(host="127.0.0.1", port=0)
    try:
        install_portal(sim, tmp_path)
    except BaseException:
        sim.stop()
        raise
    return sim


def install_portal(sim, tmp_path: Path) -> None:
    """Apply the portal's manifests to the simulator as the admin; write the portal's kubeconfig."""
    sim.admin_kubeconfig_path = sim.write_kubeconfig(tmp_path / "admin.kubeconfig")
    names = {ns["metadata"]["name"] for ns in sim.list("namespaces")}
    if OPERATOR_NAMESPACE not in names:
        sim.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": OPERATOR_NAMESPACE}})  # fmt: skip
    for manifest in PORTAL_MANIFESTS:
        sim.apply_file(manifest)
    sim.portal_token = sim.issue_token(*PORTAL_SERVICE_ACCOUNT, expiration_s=24 * 3600)
    sim.kubeconfig_path = sim.write_kubeconfig(
        tmp_path / "kubeconfig", token=sim.portal_token, user="gpu-quota-portal"
    )


# A pod that admission accepts anywhere (sent with dryRun: nothing is stored).
PROBE_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "admission-probe"},
              "spec": {"containers": [{"name": "c", "image": "probe"}]}}  # fmt: skip


def create_namespace(core, name: str) -> None:
    """Create a namespace with the official client and wait until pods can be created in it.

    Kueue's pod webhook reads the pod's namespace from its informer cache and refuses the
    pod with 404 'Namespace "x" not found' until the cache has it (kueue v0.17
    ``pkg/controller/jobs/pod/pod_webhook.go``, ``PodWebhook.Default``): a pod created the
    moment after its namespace can be refused on a busy machine. A server dry-run of a pod
    goes through the same webhook and stores nothing.
    """
    from devstack.kubeapi import wait_for

    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(lambda: core.create_namespaced_pod(name, PROBE_POD, dry_run="All"),
             what=f"pods admitted in the new namespace {name}")  # fmt: skip


def manifest_objects(path: Path) -> list[dict[str, Any]]:
    """The objects of a multi-document manifest, as ``kubectl apply -f`` reads them."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def admin_core_api(cluster):
    """The official client's CoreV1Api as the cluster admin (for arranging a test)."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(cluster.admin_kubeconfig_path))
    return client.CoreV1Api(api_client)


def summary() -> str:
    """``control plane: kube-apiserver v1.36.3 (real), 512 tests; simulator: 40 tests``."""
    from tests import realcluster

    counts = Counter({kind: len(ids) for kind, ids in RAN_AGAINST.items()})
    counts["simulator"] += len(SIMULATOR_SUITE)
    if realcluster.available():
        from devstack import k8sbuild

        version = k8sbuild.versions()["kubernetes"]
        real = f"kube-apiserver {version} (real), {counts['real']} tests"
    else:
        real = f"not built ({PREREQUISITE}), its tests skipped"
    return f"control plane: {real}; simulator: {counts['simulator']} tests"
