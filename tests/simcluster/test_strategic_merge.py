"""Strategic merge patch as the API server applies it, driven by the Go types' patch tags.

Real sources followed (kubernetes/kubernetes, v1.32): ``staging/src/k8s.io/apimachinery/pkg/
util/strategicpatch/patch.go`` (``mergeMap``, ``mergeSlice``, ``normalizeElementOrder``,
``$patch``, ``$deleteFromPrimitiveList``, ``$setElementOrder``, ``$retainKeys``),
``staging/src/k8s.io/apimachinery/pkg/util/mergepatch/errors.go``,
``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go``
(``interpretStrategicMergePatchError``), the patch tags of
``staging/src/k8s.io/api/core/v1/types.go``, and for kubectl ``staging/src/k8s.io/kubectl/
pkg/cmd/apply/patcher.go`` (3-way patch from the OpenAPI v3 patch metadata).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster, schema
from simcluster.patch import strategic_merge_patch
from simcluster.smp import PatchError

from .helpers import Kubectl

POD = "io.k8s.api.core.v1.Pod"
NODE = "io.k8s.api.core.v1.Node"


def smp(target: dict[str, Any], patch: dict[str, Any], kind: str = POD) -> Any:
    return strategic_merge_patch(target, patch, schema.definition(kind))


def _pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": list(containers), **spec}}


def test_containers_merge_by_name() -> None:
    cur = _pod({"name": "a", "image": "x"}, {"name": "b", "image": "y"})
    out = smp(cur, {"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c"}]}})
    assert out["spec"]["containers"] == [
        {"name": "a", "image": "x"},
        {"name": "b", "image": "z"},
        {"name": "c"},
    ]


def test_lists_without_strategy_are_replaced() -> None:
    cur = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    out = smp(cur, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}, NODE)
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]
    cur = _pod({"name": "a"}, tolerations=[{"key": "a"}])
    out = smp(cur, {"spec": {"tolerations": [{"key": "b"}]}})
    assert out["spec"]["tolerations"] == [{"key": "b"}]


def test_primitive_merge_list_is_a_set() -> None:
    cur = {"metadata": {"finalizers": ["a", "b"]}}
    out = smp(cur, {"metadata": {"finalizers": ["c", "a"]}})
    assert out["metadata"]["finalizers"] == ["c", "a", "b"]
    out = smp(cur, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert out["metadata"]["finalizers"] == ["b"]


def test_set_element_order() -> None:
    cur = _pod({"name": "a"}, {"name": "b"}, {"name": "c"})
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "new"}],
        }
    }
    out = smp(cur, patch)
    assert [c["name"] for c in out["spec"]["containers"]] == ["c", "a", "b"]
    assert out["spec"]["containers"][1] == {"name": "a", "image": "new"}


def test_patch_directives() -> None:
    cur = _pod({"name": "a"}, {"name": "b"})
    out = smp(cur, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert out["spec"]["containers"] == [{"name": "b"}]
    out = smp(cur, {"spec": {"containers": [{"name": "z"}, {"$patch": "replace"}]}})
    assert out["spec"]["containers"] == [{"name": "z"}]
    cur = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    out = smp(cur, {"metadata": {"labels": {"$patch": "replace", "c": "3"}}})
    assert out["metadata"]["labels"] == {"c": "3"}
    out = smp(cur, {"metadata": {"labels": {"a": None}}})
    assert out["metadata"]["labels"] == {"b": "2"}


def test_retain_keys() -> None:
    cur = _pod({"name": "a"}, volumes=[{"name": "v", "emptyDir": {}}])
    patch = {
        "spec": {
            "volumes": [
                {"name": "v", "hostPath": {"path": "/x"}, "$retainKeys": ["name", "hostPath"]}
            ]
        }
    }
    out = smp(cur, patch)
    assert out["spec"]["volumes"] == [{"name": "v", "hostPath": {"path": "/x"}}]


@pytest.mark.parametrize(
    ("patch", "code", "message"),
    [
        (
            {"spec": {"containers": [{"name": "a", "$patch": "merge"}]}},
            500,
            "merging lists cannot yet be specified in the patch",
        ),
        (
            {"metadata": {"$deleteFromPrimitiveList": ["a"]}},
            400,
            "invalid patch format of primitive list",
        ),
        (
            {"spec": {"containers": [{"image": "x"}]}},
            500,
            "map: map[image:x] does not contain declared merge key: name",
        ),
        ({"spec": {"$retainKeys": "name"}}, 400, "invalid patch format of retainKeys"),
        ({"spec": {"$patch": "merge"}}, 500, "unknown patch type: merge in map: map[$patch:merge]"),
    ],
)
def test_bad_directives(patch: dict[str, Any], code: int, message: str) -> None:
    with pytest.raises(PatchError) as ei:
        smp(_pod({"name": "a"}), patch)
    assert ei.value.code == code
    assert ei.value.message == message


def test_bad_directive_over_http(v1: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as ei:
        v1.patch_node("cpu-00", {"metadata": {"$deleteFromPrimitiveList": ["x"]}})
    assert ei.value.status == 400
    assert '"message":"invalid patch format of primitive list"' in ei.value.body
    with pytest.raises(ApiException) as ei:
        v1.patch_node("cpu-00", {"metadata": {"$patch": "merge"}})
    assert ei.value.status == 500
    assert '"reason"' not in ei.value.body


def test_official_client_strategic_patch(v1: client.CoreV1Api) -> None:
    # patch_node sends application/strategic-merge-patch+json for a dict body
    v1.patch_node("cpu-00", {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}})
    v1.patch_node("cpu-00", {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}})
    node = v1.read_node("cpu-00")
    assert [t.key for t in node.spec.taints] == ["b"]
    v1.patch_node("cpu-00", {"metadata": {"finalizers": ["x.io/a"]}})
    v1.patch_node("cpu-00", {"metadata": {"finalizers": ["x.io/b"]}})
    assert v1.read_node("cpu-00").metadata.finalizers == ["x.io/b", "x.io/a"]


# --------------------------------------------------------------------- kubectl
def _quiet(kubectl: Kubectl, *args: str) -> str:
    """kubectl's stdout, asserting it warned about nothing (it understood the patch tags)."""
    r = kubectl(*args)
    assert "warning" not in r.stderr.lower(), r.stderr
    return r.stdout


def test_kubectl_patch_node_taints_and_finalizers(sim: SimCluster, kubectl: Kubectl) -> None:
    def patch(body: str) -> str:
        return _quiet(kubectl, "patch", "node", "cpu-00", "--type", "strategic", "-p", body)

    patch(
        '{"spec":{"taints":[{"key":"a","effect":"NoSchedule"}]},"metadata":{"finalizers":["x/one"]}}'
    )
    patch(
        '{"spec":{"taints":[{"key":"b","effect":"NoExecute"}]},"metadata":{"finalizers":["x/two"]}}'
    )
    node = sim.get("nodes", "cpu-00")
    assert node["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]
    assert node["metadata"]["finalizers"] == ["x/two", "x/one"]
    patch('{"metadata":{"$deleteFromPrimitiveList/finalizers":["x/one"]}}')
    assert sim.get("nodes", "cpu-00")["metadata"]["finalizers"] == ["x/two"]


_CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: robotics
data:
{data}
"""
_POD_YAML = """apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: robotics
  labels:
    app: web
{extra}spec:
  containers:
  - name: c
    image: busybox
"""


def test_kubectl_apply_configmap_update(sim: SimCluster, kubectl: Kubectl, tmp_path: Path) -> None:
    f = tmp_path / "cm.yaml"
    f.write_text(_CM.format(data='  a: "1"\n  b: "2"'))
    assert "created" in _quiet(kubectl, "apply", "-f", str(f))
    f.write_text(_CM.format(data='  a: "10"\n  c: "3"'))
    assert "configured" in _quiet(kubectl, "apply", "-f", str(f))
    cm = sim.get("configmaps", "settings", "robotics")
    assert cm["data"] == {"a": "10", "c": "3"}  # b was in the last-applied config: removed
    assert "kubectl.kubernetes.io/last-applied-configuration" in cm["metadata"]["annotations"]


def test_kubectl_apply_pod_label(sim: SimCluster, kubectl: Kubectl, tmp_path: Path) -> None:
    f = tmp_path / "pod.yaml"
    f.write_text(_POD_YAML.format(extra=""))
    _quiet(kubectl, "apply", "-f", str(f))
    _quiet(kubectl, "label", "pod", "web", "-n", "robotics", "owner=ops")
    f.write_text(_POD_YAML.format(extra="").replace("app: web", "app: web2\n    tier: front"))
    assert "configured" in _quiet(kubectl, "apply", "-f", str(f))
    labels = sim.get("pods", "web", "robotics")["metadata"]["labels"]
    assert labels == {"app": "web2", "tier": "front", "owner": "ops"}
