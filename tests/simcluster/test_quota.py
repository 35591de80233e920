"""ResourceQuota status, admission and server-side apply.

The quota controller is asynchronous (pkg/controller/resourcequota/
resource_quota_controller.go): tests wait for it with ``sim.wait_for_controllers()``;
admission charges ``status.used`` itself at once (admission/plugin/resourcequota).
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import gpu_pod

APPLY = "application/apply-patch+yaml"


def _quota(v1: client.CoreV1Api, ns: str, name: str = "gpu-quota") -> dict:
    return v1.read_namespaced_resource_quota(name, ns).status


def test_status_hard_used(sim: SimCluster, v1: client.CoreV1Api) -> None:
    v1.create_namespace({"metadata": {"name": "qa"}})
    v1.create_namespaced_resource_quota(
        "qa",
        {
            "metadata": {"name": "gpu-quota"},
            "spec": {
                "hard": {
                    "requests.nvidia.com/gpu": "10",
                    "limits.nvidia.com/gpu": "1",
                    "nvidia.com/gpu": "1",
                    "count/pods": "20",
                    "pods": "20",
                }
            },
        },
    )
    assert sim.wait_for_controllers()
    st = _quota(v1, "qa")
    assert st.hard["requests.nvidia.com/gpu"] == "10"
    assert st.used == {"requests.nvidia.com/gpu": "0", "count/pods": "0", "pods": "0"}
    v1.create_namespaced_pod("qa", gpu_pod("run", 2, node="v100-02"))
    v1.create_namespaced_pod("qa", gpu_pod("pend", 3))  # Pending pods count
    # init-container max rule: max(5, 1+1) = 5
    init = {
        "metadata": {"name": "init"},
        "spec": {
            "initContainers": [
                {"name": "i", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "5"}}}
            ],
            "containers": [
                {"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "b", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ],
        },
    }
    v1.create_namespaced_pod("qa", init)
    st = _quota(v1, "qa")
    assert st.used["requests.nvidia.com/gpu"] == "10"
    assert "limits.nvidia.com/gpu" not in st.used and "nvidia.com/gpu" not in st.used
    assert st.used["pods"] == "3" and st.used["count/pods"] == "3"
    v1.patch_namespaced_pod_status("run", "qa", {"status": {"phase": "Succeeded"}})
    assert sim.wait_for_controllers()  # replenishment: the pod stopped counting
    st = _quota(v1, "qa")
    assert st.used["requests.nvidia.com/gpu"] == "8"
    assert st.used["pods"] == "2" and st.used["count/pods"] == "3"
    v1.delete_namespaced_pod("init", "qa")  # unscheduled: deleted at once
    assert sim.wait_for_controllers()
    assert _quota(v1, "qa").used["requests.nvidia.com/gpu"] == "3"


def test_over_quota_forbidden(v1: client.CoreV1Api) -> None:
    # genomics: hard requests.nvidia.com/gpu=8, used 2 (variant-call)
    v1.create_namespaced_pod("genomics", gpu_pod("a", 1, node="v100-02"))
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("genomics", gpu_pod("big", 6))
    assert ei.value.status == 403
    body = json.loads(ei.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods "big" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.nvidia.com/gpu=6, used: requests.nvidia.com/gpu=3, "
        "limited: requests.nvidia.com/gpu=8"
    )


def test_limits_key_never_blocks(v1: client.CoreV1Api) -> None:
    # nlp-research has limits.nvidia.com/gpu=8 with far more in use: must not block
    v1.create_namespaced_pod("nlp-research", gpu_pod("small", 1))
    assert _quota(v1, "nlp-research").used["requests.nvidia.com/gpu"] == "30"


def test_priority_class_scope(v1: client.CoreV1Api) -> None:
    # gpu-high-priority (16) is full; a high-priority pod is refused by it
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod(
            "nlp-research", gpu_pod("hp", 1, priorityClassName="high-priority")
        )
    assert "exceeded quota: gpu-high-priority" in json.loads(ei.value.body)["message"]
    v1.create_namespaced_pod("nlp-research", gpu_pod("lp", 1, priorityClassName="low-priority"))
    assert _quota(v1, "nlp-research", "gpu-high-priority").used["requests.nvidia.com/gpu"] == "16"


def test_cpu_quota_requires_requests(sim: SimCluster, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_resource_quota(
        "robotics", {"metadata": {"name": "cpu"}, "spec": {"hard": {"requests.cpu": "100"}}}
    )
    assert sim.wait_for_controllers()  # enforced once status.hard is synced
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("robotics", gpu_pod("nocpu", 1))
    msg = json.loads(ei.value.body)["message"]
    assert (
        msg == 'pods "nocpu" is forbidden: failed quota: cpu: must specify requests.cpu for: main'
    )


def test_server_side_apply(sim: SimCluster, v1: client.CoreV1Api) -> None:
    # a hand edit owns requests.cpu; the portal applies only the GPU key
    v1.create_namespaced_resource_quota(
        "robotics",
        {"metadata": {"name": "gpu-quota"}, "spec": {"hard": {"requests.cpu": "64"}}},
        field_manager="kubectl-edit",
    )
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": "robotics", "labels": {"managed": "yes"}},
        "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
    }
    rq = v1.patch_namespaced_resource_quota(
        "gpu-quota", "robotics", body, field_manager="portal", force=True, _content_type=APPLY
    )
    assert rq.spec.hard == {"requests.cpu": "64", "requests.nvidia.com/gpu": "4"}
    assert sim.wait_for_controllers()
    rq = v1.read_namespaced_resource_quota("gpu-quota", "robotics")
    assert rq.status.used["requests.nvidia.com/gpu"] == "3"
    managers = {(m.manager, m.operation) for m in rq.metadata.managed_fields}
    assert ("portal", "Apply") in managers and ("kubectl-edit", "Update") in managers
    # applying twice is harmless and does not bump the resourceVersion
    again = v1.patch_namespaced_resource_quota(
        "gpu-quota", "robotics", body, field_manager="portal", force=True, _content_type=APPLY
    )
    assert again.metadata.resource_version == rq.metadata.resource_version
    # a conflicting apply without force -> 409; with force it takes the field
    clash = {**body, "spec": {"hard": {"requests.cpu": "8", "requests.nvidia.com/gpu": "4"}}}
    with pytest.raises(ApiException) as ei:
        v1.patch_namespaced_resource_quota(
            "gpu-quota", "robotics", clash, field_manager="portal", _content_type=APPLY
        )
    assert ei.value.status == 409
    assert 'conflict with "kubectl-edit"' in json.loads(ei.value.body)["message"]
    rq = v1.patch_namespaced_resource_quota(
        "gpu-quota", "robotics", clash, field_manager="portal", force=True, _content_type=APPLY
    )
    assert rq.spec.hard["requests.cpu"] == "8"
    # dropping a field from the applied config removes it (nobody else owns it now)
    v1.patch_namespaced_resource_quota(
        "gpu-quota", "robotics", body, field_manager="portal", force=True, _content_type=APPLY
    )
    assert v1.read_namespaced_resource_quota("gpu-quota", "robotics").spec.hard == {
        "requests.nvidia.com/gpu": "4"
    }


def test_apply_yaml_body_creates(sim: SimCluster) -> None:
    yaml_body = (
        b"apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: q2\n"
        b"spec:\n  hard:\n    requests.nvidia.com/mig-1g.10gb: '7'\n"
    )
    req = urllib.request.Request(
        sim.url + "/api/v1/namespaces/ml-vision/resourcequotas/q2?fieldManager=portal",
        data=yaml_body,
        method="PATCH",
        headers={"Content-Type": APPLY, "Authorization": f"Bearer {sim.token}"},
    )
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 201
        data = json.loads(resp.read())
    assert data["status"] == {}  # cleared on create; the controller fills it
    assert sim.wait_for_controllers()
    data = sim.get("resourcequotas", "q2", "ml-vision")
    assert data["status"]["used"]["requests.nvidia.com/mig-1g.10gb"] == "4"
    assert data["metadata"]["managedFields"][0]["manager"] == "portal"


def test_quota_update_stale_conflict(v1: client.CoreV1Api) -> None:
    rq = v1.read_namespaced_resource_quota("gpu-quota", "ml-vision")
    rq.spec.hard["requests.nvidia.com/gpu"] = "20"
    v1.replace_namespaced_resource_quota("gpu-quota", "ml-vision", rq)
    with pytest.raises(ApiException) as ei:
        v1.replace_namespaced_resource_quota("gpu-quota", "ml-vision", rq)
    assert ei.value.status == 409
