"""Quota admission against ``status`` and the asynchronous quota controller.

Follows ``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``
(CheckRequest: ``status.hard``/``status.used``, "status unknown for quota", the charge of
``status.used`` on admit), ``pkg/quota/v1/evaluator/core/pods.go`` (QuotaV1Pod,
podMatchesScopeFunc, CrossNamespacePodAffinity), ``staging/src/k8s.io/apiserver/pkg/quota/
v1/generic/evaluator.go`` (object counts match no scoped quota),
``pkg/controller/resourcequota/resource_quota_controller.go`` (syncResourceQuota,
replenishment, full resync) and ``pkg/registry/core/resourcequota/strategy.go`` (status
cleared on create).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import DEMO, make_api, pod, quota, wait_until

GPU = "requests.nvidia.com/gpu"


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    """This module's simulator (the ``api`` and ``v1`` fixtures use it)."""
    with SimCluster.from_fleet(DEMO, quota_sync_s=0.05, pod_stop_s=0.2) as s:
        yield s


def _gpu_pod(name: str, gpus: int, node: str | None = "v100-02", **spec: Any) -> dict:
    """Limits only: the API server defaults the requests from them."""
    return pod(name, node=node, resources={"limits": {"nvidia.com/gpu": str(gpus)}}, **spec)


def _status(v1: client.CoreV1Api, ns: str, name: str) -> Any:
    return v1.read_namespaced_resource_quota(name, ns).status


def _forbidden(fn: Callable[[], Any]) -> str:
    with pytest.raises(ApiException) as ei:
        fn()
    assert ei.value.status == 403
    body = json.loads(ei.value.body)
    assert body["reason"] == "Forbidden"
    return body["message"]


def test_controller_fills_status_later(sim: SimCluster, v1: client.CoreV1Api) -> None:
    sim.faults.update(quota_controller_paused=True)
    created = v1.create_namespaced_resource_quota("robotics", quota("q", {GPU: "4"}))
    assert not created.status.hard and not created.status.used  # cleared on create
    time.sleep(0.3)
    assert not _status(v1, "robotics", "q").hard  # the controller has not run
    sim.faults.reset()
    st = wait_until(lambda: (s := _status(v1, "robotics", "q")).hard and s)
    assert st.hard == {GPU: "4"} and st.used == {GPU: "3"}  # sim-rl-0 (1) + sim-rl-1 (2)
    q = v1.read_namespaced_resource_quota("q", "robotics")
    entries = {(m.manager, m.operation, m.subresource) for m in q.metadata.managed_fields}
    assert ("kube-controller-manager", "Update", "status") in entries


def test_unsynced_quota_does_not_enforce(sim: SimCluster, v1: client.CoreV1Api) -> None:
    """Between create and the first sync status.hard is empty: the real race."""
    sim.faults.update(quota_controller_paused=True)
    v1.create_namespaced_resource_quota("robotics", quota("tight", {GPU: "1"}))
    v1.create_namespaced_pod("robotics", _gpu_pod("early", 2))  # admitted
    sim.faults.reset()
    st = wait_until(lambda: (s := _status(v1, "robotics", "tight")).used and s)
    assert st.used == {GPU: "5"}
    msg = _forbidden(lambda: v1.create_namespaced_pod("robotics", _gpu_pod("late", 1)))
    assert msg == (
        'pods "late" is forbidden: exceeded quota: tight, requested: requests.nvidia.com/gpu=1, '
        "used: requests.nvidia.com/gpu=5, limited: requests.nvidia.com/gpu=1"
    )


def test_status_unknown_for_quota(sim: SimCluster, v1: client.CoreV1Api) -> None:
    sim.faults.update(quota_controller_paused=True)
    q = v1.create_namespaced_resource_quota("robotics", quota("half", {GPU: "4", "pods": "9"}))
    q.status = client.V1ResourceQuotaStatus(hard={GPU: "4", "pods": "9"}, used={"pods": "1"})
    v1.replace_namespaced_resource_quota_status("half", "robotics", q)
    msg = _forbidden(lambda: v1.create_namespaced_pod("robotics", _gpu_pod("p", 1)))
    assert msg == (
        'pods "p" is forbidden: status unknown for quota: half, resources: '
        "pods,requests.nvidia.com/gpu"
    )


def test_admission_reads_status_hard_not_spec(sim: SimCluster, v1: client.CoreV1Api) -> None:
    # genomics/gpu-quota: hard requests.nvidia.com/gpu=8, used 2
    sim.faults.update(quota_controller_paused=True)
    v1.patch_namespaced_resource_quota("gpu-quota", "genomics", {"spec": {"hard": {GPU: "2"}}})
    v1.create_namespaced_pod("genomics", _gpu_pod("fits-old-limit", 4))  # status.hard still 8
    sim.faults.reset()
    st = wait_until(lambda: (s := _status(v1, "genomics", "gpu-quota")).hard[GPU] == "2" and s)
    assert st.used[GPU] == "6"
    assert "exceeded quota: gpu-quota" in _forbidden(
        lambda: v1.create_namespaced_pod("genomics", _gpu_pod("x", 1))
    )


def test_admit_charges_status_used_at_once(sim: SimCluster, v1: client.CoreV1Api) -> None:
    sim.faults.update(quota_controller_paused=True)  # only admission can change it now
    before = v1.read_namespaced_resource_quota("gpu-quota", "genomics")
    v1.create_namespaced_pod("genomics", _gpu_pod("dry", 3), dry_run="All")
    same = v1.read_namespaced_resource_quota("gpu-quota", "genomics")
    assert same.metadata.resource_version == before.metadata.resource_version
    v1.create_namespaced_pod("genomics", _gpu_pod("real", 3))
    after = v1.read_namespaced_resource_quota("gpu-quota", "genomics")
    assert after.status.used[GPU] == "5"
    assert int(after.metadata.resource_version) > int(before.metadata.resource_version)
    entries = {(m.manager, m.subresource) for m in after.metadata.managed_fields}
    assert ("kube-apiserver", "status") in entries


def test_replenishment_after_pods_stop_counting(sim: SimCluster, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("genomics", _gpu_pod("job", 4))
    assert _status(v1, "genomics", "gpu-quota").used[GPU] == "6"
    sim.set_pod_phase("genomics", "job", "Succeeded")  # QuotaV1Pod turns false
    wait_until(lambda: _status(v1, "genomics", "gpu-quota").used[GPU] == "2")
    v1.create_namespaced_pod("genomics", _gpu_pod("svc", 2))
    v1.delete_namespaced_pod("svc", "genomics")  # graceful: counts until the kubelet ends it
    assert _status(v1, "genomics", "gpu-quota").used[GPU] == "4"
    wait_until(lambda: _status(v1, "genomics", "gpu-quota").used[GPU] == "2")


def test_pods_stuck_terminating_stop_counting_after_grace() -> None:
    fleet = {"nodes": [{"name": "down", "ready": False}], "namespaces": [{"name": "t"}],
             "quotas": [{"name": "q", "namespace": "t", "hard": {"pods": "5"}}]}  # fmt: skip
    with (
        SimCluster.from_fleet(fleet, quota_sync_s=0.05, quota_resync_s=0.5) as s,
        make_api(s) as a,
    ):
        v1 = client.CoreV1Api(a)
        spec = {"nodeName": "down", "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "x"}]}  # fmt: skip
        pod = {"metadata": {"name": "p"}, "spec": spec}
        v1.create_namespaced_pod("t", pod)
        v1.delete_namespaced_pod("p", "t")
        assert _status(v1, "t", "q").used == {"pods": "1"}
        # deletionTimestamp (now + 1 s) + grace (1 s) passes; the resync recounts
        wait_until(lambda: _status(v1, "t", "q").used == {"pods": "0"}, timeout=6)
        assert v1.read_namespaced_pod("p", "t").metadata.deletion_timestamp is not None


def test_cross_namespace_pod_affinity_scope(v1: client.CoreV1Api) -> None:
    sel = {"matchExpressions": [{"scopeName": "CrossNamespacePodAffinity", "operator": "Exists"}]}
    v1.create_namespaced_resource_quota("robotics", quota("xns", {"pods": "1"}, scopeSelector=sel))
    wait_until(lambda: _status(v1, "robotics", "xns").used)
    assert _status(v1, "robotics", "xns").used == {"pods": "0"}
    v1.create_namespaced_pod("robotics", _gpu_pod("plain", 1))  # no affinity: not selected
    term = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "kubernetes.io/hostname"}
    same_ns = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    v1.create_namespaced_pod("robotics", _gpu_pod("local-aff", 1, affinity=same_ns))
    cross = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {**term, "namespaces": ["genomics"]}}]}}  # fmt: skip
    v1.create_namespaced_pod("robotics", _gpu_pod("x1", 1, affinity=cross))
    assert _status(v1, "robotics", "xns").used == {"pods": "1"}
    sel_term = {**term, "namespaceSelector": {}}
    cross2 = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [sel_term]}}
    assert "exceeded quota: xns" in _forbidden(
        lambda: v1.create_namespaced_pod("robotics", _gpu_pod("x2", 1, affinity=cross2))
    )


def test_object_count_quotas(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_resource_quota("robotics", quota("cm", {"count/configmaps": "1"}))
    v1.create_namespaced_resource_quota(
        "robotics",
        quota("scoped", {"count/configmaps": "0"}, scopes=["NotTerminating"]),
    )
    wait_until(lambda: _status(v1, "robotics", "scoped").used)
    assert _status(v1, "robotics", "scoped").used == {"count/configmaps": "0"}
    wait_until(lambda: _status(v1, "robotics", "cm").used)
    v1.create_namespaced_config_map("robotics", {"metadata": {"name": "c1"}})  # scoped: no match
    assert _status(v1, "robotics", "cm").used == {"count/configmaps": "1"}
    msg = _forbidden(
        lambda: v1.create_namespaced_config_map("robotics", {"metadata": {"name": "c2"}})
    )
    assert msg == (
        'configmaps "c2" is forbidden: exceeded quota: cm, requested: count/configmaps=1, '
        "used: count/configmaps=1, limited: count/configmaps=1"
    )
    v1.delete_namespaced_config_map("c1", "robotics")
    wait_until(lambda: _status(v1, "robotics", "cm").used == {"count/configmaps": "0"})
    v1.create_namespaced_config_map("robotics", {"metadata": {"name": "c2"}})
