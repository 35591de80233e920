"""The simulated cluster as the portal meets it: its own ServiceAccount, the RBAC of deploy/.

Every test that lets portal code talk to a cluster goes through :func:`start`: the
simulator loads the project's own manifests (``deploy/kubernetes/namespace.yaml`` and
``rbac.yaml``, read from those files, not copied), issues a token for the portal's
ServiceAccount through the TokenRequest API, and ``sim.kubeconfig_path`` points at a
kubeconfig with that token. A call the manifests do not allow is refused with the real
403, so it fails the test that makes it. Tests arrange the cluster as its administrator
through ``sim.admin_kubeconfig_path`` (the simulator's admin token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy" / "kubernetes"
PORTAL_MANIFESTS = (DEPLOY / "namespace.yaml", DEPLOY / "rbac.yaml")
PORTAL_SERVICE_ACCOUNT = ("gpu-quota-portal", "gpu-quota-portal")
PORTAL_USER = "system:serviceaccount:gpu-quota-portal:gpu-quota-portal"
# The GPU operator's namespace exists on every cluster the portal runs MIG on; the Role in
# rbac.yaml lives there.
OPERATOR_NAMESPACE = "gpu-operator"


def start(fleet: Any, tmp_path: Path, **kwargs: Any):
    """A running simulator with the portal's identity installed (see the module doc)."""
    from simcluster import SimCluster

    sim = SimCluster.from_fleet(fleet, **kwargs)
    sim.start(host="127.0.0.1", port=0)
    try:
        install_portal(sim, tmp_path)
    except BaseException:
        sim.stop()
        raise
    return sim


def install_portal(sim, tmp_path: Path) -> None:
    """Apply the portal's manifests as the admin and write the portal's kubeconfig."""
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


def manifest_objects(path: Path) -> list[dict[str, Any]]:
    """The objects of a multi-document manifest, as ``kubectl apply -f`` reads them."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def admin_core_api(sim):
    """The official client's CoreV1Api as the cluster admin (for arranging a test)."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(sim.admin_kubeconfig_path))
    return client.CoreV1Api(api_client)
