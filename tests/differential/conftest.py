"""The two servers of the referee, the same scene on both, once per test module.

The real one is the session's control plane (``tests/realcluster.py``: kube-apiserver
v1.36.3, etcd, kube-controller-manager, kube-scheduler, kwok, Kueue), returned to its
baseline at the start of every module, with the ``gpu-operator`` namespace and the portal's
manifests (``deploy/kubernetes/namespace.yaml``, ``rbac.yaml``) applied; it is reached
directly, not through the fault proxy. The simulator is a fresh empty one per module with
the same manifests applied. A
module's cases therefore start from the same objects on both sides and use names of their
own. Without the control plane's binaries every case skips, naming ``make k8s``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.differential.framework import Pair, Server, get, ns_path, post


def _django_ready() -> None:
    """The cases read the portal's permission table (Django settings). ``make test`` has
    pytest-django set Django up; a bare run (``pytest -p no:django --confcutdir=
    tests/differential tests/differential``, no database needed) sets it up here."""
    from django.apps import apps

    if not apps.ready:
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        django.setup()


_django_ready()

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = (REPO / "deploy/kubernetes/namespace.yaml", REPO / "deploy/kubernetes/rbac.yaml")
OPERATOR = "gpu-operator"
POLICIES = "/apis/nvidia.com/v1/clusterpolicies"
CUSTOM_RESOURCE_LISTS = (
    "/apis/nvidia.com/v1/clusterpolicies",
    "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
    "/apis/kueue.x-k8s.io/v1beta2/localqueues",
    "/apis/kueue.x-k8s.io/v1beta2/workloads",
)
PREREQUISITE = "the real control plane (make k8s, which needs Go 1.24+)"


def _real_server() -> Server:
    from devstack.kubeapi import wait_for
    from tests import realcluster

    if not realcluster.available():
        from tests.prereqs import SKIPPED

        SKIPPED.add(f"{PREREQUISITE}: tests/differential")
        pytest.skip(f"the referee needs {PREREQUISITE}")
    plane = realcluster.session().plane
    plane.reset()
    api = plane.api
    # The same scene as the simulator's (whatever the session's baseline holds already).
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR}})
    for manifest in MANIFESTS:
        api.apply_file(manifest)
    # A reset rewrites the CRDs' objects, and their storage re-initialises ("storage is
    # (re)initializing", 429) for a moment: wait until each custom resource lists.
    for path in CUSTOM_RESOURCE_LISTS:
        wait_for(lambda path=path: _lists_or_absent(api, path), what=f"GET {path}")
    return Server(
        "real",
        plane.url,
        verify=api.session.verify,
        admin={"cert": api.session.cert},
        tokens=lambda ns, name: api.issue_token(ns, name, 3600),
        kubeconfig=plane.admin_kubeconfig,
    )


def _lists_or_absent(api, path: str) -> bool:
    answer = api.request("GET", path, params={"limit": 1}, ok=(404, 429))
    if not isinstance(answer, dict):  # "404 page not found": no such CRD
        return True
    return answer.get("kind", "").endswith("List") or answer.get("code") == 404


def _sim_server(workdir: Path):
    from simcluster import SimCluster

    sim = SimCluster.from_fleet({})
    sim.start(host="127.0.0.1", port=0)
    try:
        for manifest in MANIFESTS:
            sim.apply_file(manifest)
        server = Server(
            "sim",
            sim.url,
            verify=False,
            admin={"token": sim.token},
            tokens=lambda ns, name: sim.issue_token(ns, name, expiration_s=3600),
            kubeconfig=sim.write_kubeconfig(workdir / "sim-admin.kubeconfig"),
        )
    except BaseException:
        sim.stop()
        raise
    return sim, server


def _same_stock_config(pair: Pair) -> None:
    """The simulator's GPU operator emulation keeps the operator's stock ConfigMap
    ``default-mig-parted-config`` in ``gpu-operator`` (and puts it back when removed); the
    real cluster gets the same object, so the scene is the same on both."""
    path = ns_path(OPERATOR, "configmaps", "default-mig-parted-config")
    stock = pair.sim.call(get(path)).body
    meta = {k: v for k, v in stock["metadata"].items() if k in ("name", "namespace", "labels")}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": stock["data"]}
    pair.real.call(post(ns_path(OPERATOR, "configmaps"), body), ok=(409,))
    # and its ClusterPolicy (the real cluster has the CRD, and no operator to create one)
    for policy in pair.sim.call(get(POLICIES)).body["items"]:
        meta = {"name": policy["metadata"]["name"]}
        body = {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": meta,
            "spec": policy["spec"],
        }
        pair.real.call(post(POLICIES, body), ok=(409,))


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    real = _real_server()
    workdir = Path(tempfile.mkdtemp(prefix="referee-"))
    sim, sim_server = _sim_server(workdir)
    p = Pair(real, sim_server, workdir, extras={"sim": sim})
    try:
        _same_stock_config(p)
        yield p
    finally:
        real.close()
        sim_server.close()
        sim.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _counted() -> None:
    """Each case runs against the real control plane and the simulator (the summary line)."""
    from tests.kubesim import RAN_AGAINST, _current_test

    RAN_AGAINST["real"].add(_current_test())
    RAN_AGAINST["simulator"].add(_current_test())
