"""Workload manifests through the real kubectl: ``apply -k`` twice, ``diff``, server-side apply.

kubectl computes client-side apply patches from the OpenAPI v3 documents the simulator
serves (``staging/src/k8s.io/kubectl/pkg/cmd/apply/patcher.go``), and ``kubectl diff`` asks
for a server-side dry run (``staging/src/k8s.io/kubectl/pkg/cmd/diff/diff.go``): both are
empty only when the server's defaulting (``pkg/apis/apps/v1/defaults.go``,
``pkg/apis/batch/v1/defaults.go``, ``pkg/apis/core/v1/defaults.go``) and field ownership
are stable. Error text as ``staging/src/k8s.io/kubectl/pkg/cmd/util/helpers.go`` prints a
422 from ``pkg/apis/apps/validation/validation.go``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from simcluster import SimCluster

from .helpers import DEMO, Kubectl, wait_until

NS = "portal"
MANIFESTS = {
    "kustomization.yaml": """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: portal
labels:
  - pairs: {app.kubernetes.io/part-of: portal}
    includeSelectors: false
resources: [namespace.yaml, web.yaml, agent.yaml, migrate.yaml]
configMapGenerator:
  - name: portal-config
    literals: [DEBUG=0]
""",
    "namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: portal}\n",
    "web.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {component: web}}
  template:
    metadata: {labels: {component: web}}
    spec:
      containers:
        - name: web
          image: portal:0.1.0
          ports: [{name: http, containerPort: 8000}]
          envFrom: [{configMapRef: {name: portal-config}}]
          resources:
            requests: {cpu: 250m, memory: 512Mi}
            limits: {memory: 1Gi}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {component: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  ingressClassName: nginx
  tls: [{hosts: [gpu.example.com], secretName: web-tls}]
  rules:
    - host: gpu.example.com
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
""",
    "agent.yaml": """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {component: agent}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 10%}}
  template:
    metadata: {labels: {component: agent}}
    spec:
      nodeSelector: {nvidia.com/gpu.present: "true"}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      terminationGracePeriodSeconds: 20
      containers:
        - name: agent
          image: portal:0.1.0
          resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {memory: 128Mi}}
""",
    "migrate.yaml": """\
apiVersion: batch/v1
kind: Job
metadata: {name: migrate-0.1.0}
spec:
  backoffLimit: 3
  template:
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: portal:0.1.0, command: [python, manage.py, migrate]}]
""",
}
KINDS = (
    "namespace/portal",
    "configmap/portal-config-",
    "service/web",
    "deployment.apps/web",
    "daemonset.apps/agent",
    "job.batch/migrate-0.1.0",
    "ingress.networking.k8s.io/web",
)


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster.from_fleet(DEMO, pod_stop_s=0.05, lease_renew_s=0) as s:
        yield s


@pytest.fixture
def base(tmp_path: Path) -> Path:
    d = tmp_path / "base"
    d.mkdir()
    for name, text in MANIFESTS.items():
        (d / name).write_text(text)
    return d


def _lines(out: str) -> list[str]:
    return sorted(line for line in out.splitlines() if line)


def test_apply_twice_is_a_no_op_and_diff_is_empty(
    sim: SimCluster, kubectl: Kubectl, base: Path
) -> None:
    first = _lines(kubectl("apply", "-k", str(base)).stdout)
    assert len(first) == len(KINDS) and all(line.endswith(" created") for line in first)
    assert all(any(line.startswith(k) for line in first) for k in KINDS)
    rvs = {
        r: sim.get(r, n, NS)["metadata"]["resourceVersion"]
        for r, n in (("deployments", "web"), ("daemonsets", "agent"), ("jobs", "migrate-0.1.0"))
    }
    again = _lines(kubectl("apply", "-k", str(base)).stdout)
    assert all(line.endswith(" unchanged") for line in again), again
    diff = kubectl("diff", "-k", str(base), ok=False)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stderr
    # the agent DaemonSet got pods on the GPU nodes (GFD's gpu.present label)
    gpu_nodes = {
        n["metadata"]["name"]
        for n in sim.list("nodes")
        if n["metadata"].get("labels", {}).get("nvidia.com/gpu.present") == "true"
    }
    wait_until(lambda: {p["spec"]["nodeName"] for p in sim.list("pods", NS)} == gpu_nodes)
    for r, n in (("deployments", "web"), ("jobs", "migrate-0.1.0")):
        assert sim.get(r, n, NS)["metadata"]["resourceVersion"] == rvs[r]


def test_server_side_apply_twice_writes_nothing(
    sim: SimCluster, kubectl: Kubectl, base: Path
) -> None:
    out = _lines(kubectl("apply", "--server-side", "-k", str(base)).stdout)
    assert all(line.endswith(" serverside-applied") for line in out)
    sim.wait_for_controllers()
    before = {
        r: sim.get(r, n, NS)["metadata"]["resourceVersion"]
        for r, n in (("deployments", "web"), ("jobs", "migrate-0.1.0"), ("ingresses", "web"))
    }
    kubectl("apply", "--server-side", "-k", str(base))
    after = {r: sim.get(r, n, NS)["metadata"]["resourceVersion"] for r, n in (
        ("deployments", "web"), ("jobs", "migrate-0.1.0"), ("ingresses", "web"))}  # fmt: skip
    assert after == before
    diff = kubectl("diff", "--server-side", "-k", str(base), ok=False)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stderr


def test_invalid_workloads_are_refused_with_the_servers_message(
    kubectl: Kubectl, base: Path
) -> None:
    kubectl("apply", "-k", str(base))
    bad = MANIFESTS["agent.yaml"].replace(
        "selector: {matchLabels: {component: agent}}", "selector: {matchLabels: {component: x}}"
    )
    res = kubectl(
        "apply", "-n", NS, "-f", "-", stdin=bad.replace("name: agent", "name: bad"), ok=False
    )
    assert res.returncode == 1
    assert (
        'The DaemonSet "bad" is invalid: spec.template.metadata.labels: Invalid value: '
        '{"component":"agent"}: `selector` does not match template `labels`'
    ) in res.stderr
    # strict decoding against the DaemonSet schema (kubectl sends fieldValidation=Strict)
    typo = MANIFESTS["agent.yaml"].replace("image: portal:0.1.0", "imagez: portal:0.1.0")
    typo = typo.replace("name: agent", "name: typo")  # a create (on a patch: "patch: ...")
    res = kubectl("apply", "-n", NS, "-f", "-", stdin=typo, ok=False)
    assert res.returncode == 1
    assert (
        'DaemonSet in version "v1" cannot be handled as a DaemonSet: strict decoding error: '
        'unknown field "spec.template.spec.containers[0].imagez"'
    ) in res.stderr
    # a Job's template is immutable once created (ValidateJobSpecUpdate)
    changed = MANIFESTS["migrate.yaml"].replace("image: portal:0.1.0", "image: portal:0.2.0")
    res = kubectl("apply", "-n", NS, "-f", "-", stdin=changed, ok=False)
    assert res.returncode == 1
    assert 'The Job "migrate-0.1.0" is invalid: spec.template: Invalid value: ' in res.stderr
    assert "field is immutable" in res.stderr


def test_get_all_lists_the_workloads(kubectl: Kubectl, base: Path) -> None:
    kubectl("apply", "-k", str(base))
    out = kubectl("get", "all", "-n", NS, "-o", "name").stdout.split()
    for name in (
        "service/web",
        "deployment.apps/web",
        "daemonset.apps/agent",
        "job.batch/migrate-0.1.0",
    ):
        assert name in out
    assert not any(n.startswith("ingress") for n in out)  # ingresses are not in `all`
    table = kubectl("get", "ds,deploy,job,ing", "-n", NS).stdout.splitlines()
    assert table[0].split() == [
        "NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE", "SELECTOR", "AGE"
    ]  # fmt: skip
    assert "deployment.apps/web   0/2     0            0" in "\n".join(table)  # no controller
    assert any(line.split()[:3] == ["job.batch/migrate-0.1.0", "Running", "0/1"] for line in table)
    ing = ["ingress.networking.k8s.io/web", "nginx", "gpu.example.com", "80,", "443"]
    assert any(line.split()[:5] == ing for line in table)
