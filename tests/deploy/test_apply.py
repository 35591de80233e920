"""``kubectl apply -k deploy/overlays/production`` against the strict simulated cluster, as
a platform engineer runs it on a fresh cluster: the real kubectl (client-side apply with
``fieldValidation=Strict``, kubernetes/kubectl pkg/cmd/apply), the API server's validation
and admission in the simulator (docs/simcluster.md), in the order kustomize emits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.prereqs import need_kubectl
from tests.simcluster.helpers import Kubectl

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "overlays" / "production"
NS = "gpu-quota-portal"


def _get(kubectl, kind: str, name: str) -> dict:
    return json.loads(kubectl("-n", NS, "get", kind, name, "-o", "json").stdout)


@pytest.fixture
def fresh_cluster(tmp_path):
    """The real control plane with only what the prerequisites give: the GPU Operator's
    namespace (and its ClusterPolicy CRD), none of the portal's manifests yet."""
    from tests import kubesim

    cluster = kubesim.start({"gpuOperator": False}, tmp_path, portal=False)
    names = {ns["metadata"]["name"] for ns in cluster.list("namespaces")}
    assert NS not in names and "gpu-operator" in names
    yield cluster
    cluster.stop()


def test_apply_k_on_a_fresh_cluster_creates_everything_and_reapplies_unchanged(
    fresh_cluster, tmp_path
):
    kubectl = Kubectl(need_kubectl(), fresh_cluster, tmp_path)
    first = kubectl("apply", "-k", str(OVERLAY), timeout=120)
    lines = first.stdout.splitlines()
    assert lines and all(line.endswith(" created") for line in lines), first.stdout
    assert lines[0] == f"namespace/{NS} created"  # before everything that lives in it
    created = {line.rsplit(" ", 1)[0] for line in lines}
    for name in ("deployment.apps/portal-web", "deployment.apps/portal-worker",
                 "deployment.apps/portal-beat", "deployment.apps/portal-watch",
                 "daemonset.apps/gpu-agent", "service/portal-web",
                 "ingress.networking.k8s.io/portal-web",
                 "poddisruptionbudget.policy/portal-web",
                 "role.rbac.authorization.k8s.io/gpu-quota-portal-mig-config"):  # fmt: skip
        assert name in created, (name, first.stdout)
    assert any(n.startswith("job.batch/portal-migrate-") for n in created)
    # Applying the same manifests again changes nothing (no field the server defaults or
    # rewrites differs from what kubectl sent).
    # One exception: a PodDisruptionBudget's spec.selector has patchStrategy "replace"
    # (k8s.io/api policy/v1 types.go), so kubectl's computed patch is never empty and it
    # says "configured"; the patch holds the same selector, so nothing changes.
    pdb_before = _get(kubectl, "poddisruptionbudget", "portal-web")
    again = kubectl("apply", "-k", str(OVERLAY), timeout=120)
    for line in again.stdout.splitlines():
        if line.startswith("poddisruptionbudget.policy/"):
            assert line.endswith((" unchanged", " configured")), line
        else:
            assert line.endswith(" unchanged"), again.stdout
    pdb_after = _get(kubectl, "poddisruptionbudget", "portal-web")
    assert pdb_after["spec"] == pdb_before["spec"]
    assert pdb_after["metadata"]["generation"] == pdb_before["metadata"]["generation"]
    # `kubectl diff -k` (a server-side dry-run of the same patches) sees no difference.
    diff = kubectl("diff", "-k", str(OVERLAY), ok=False, timeout=120)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    # What was stored is what was rendered.
    web = _get(kubectl, "deployment", "portal-web")
    container = web["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    agent = _get(kubectl, "daemonset", "gpu-agent")
    selector = agent["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["nvidia.com/gpu.deploy.client"] == "true"
