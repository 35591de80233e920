"""Kueue's pod and Job integrations and admission in the simulated cluster.

Real sources followed (kubernetes-sigs/kueue): ``pkg/controller/jobs/pod/pod_webhook.go``
(``Default``: label ``kueue.x-k8s.io/managed``, finalizer, gate ``kueue.x-k8s.io/admission``),
``pkg/controller/jobs/pod/pod_controller.go`` (ungating with the flavor's node labels;
``Finished`` from the pod phase), ``pkg/controller/jobs/job/job_webhook.go`` (a queued Job
is created suspended), ``pkg/controller/jobframework/reconciler.go`` and
``workload_names.go`` (one Workload per owner, ``pod-<name>-<hash>``),
``pkg/scheduler/scheduler.go`` and ``pkg/scheduler/flavorassigner/flavorassigner.go``
(flavors in the ClusterQueue's order, ``insufficient unused quota for … more needed``),
``pkg/cache/scheduler/resource_node.go`` (borrowing what the cohort's other queues leave
unused), ``pkg/cache/scheduler/clusterqueue.go`` (``Active`` / ``FlavorNotFound``),
``pkg/workload/workload.go`` (``QuotaReserved`` "Quota reserved in ClusterQueue …").
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
from kubernetes import client

from simcluster import SimCluster

from .helpers import wait_until

G, V = "kueue.x-k8s.io", "v1beta2"
NODES = [
    {"name": "h100-00", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}},
    {"name": "v100-00", "gpu": {"product": "Tesla-V100-SXM2-16GB", "count": 8}},
]
PRODUCT = "nvidia.com/gpu.product"


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    fleet = {"nodes": NODES, "namespaces": [{"name": "team-a"}, {"name": "team-b"}]}
    with SimCluster.from_fleet(fleet, pod_stop_s=0.05) as s:
        yield s


@pytest.fixture
def crd(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def flavor(crd: client.CustomObjectsApi, name: str, product: str) -> None:
    body = {"apiVersion": f"{G}/{V}", "kind": "ResourceFlavor", "metadata": {"name": name}}
    body["spec"] = {"nodeLabels": {PRODUCT: product}}
    crd.create_cluster_custom_object(G, V, "resourceflavors", body)


def queue(
    crd: client.CustomObjectsApi, name: str, quotas: list[tuple[str, Any]], **extra: Any
) -> None:
    flavors = [
        {"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": q, **extra}]}
        for f, q in quotas
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {},  # every namespace (a missing selector matches none)
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}],
    }
    if extra or name.startswith("co-"):
        spec["cohortName"] = "research"
    body = {"apiVersion": f"{G}/{V}", "kind": "ClusterQueue", "metadata": {"name": name}}
    crd.create_cluster_custom_object(G, V, "clusterqueues", {**body, "spec": spec})
    lq = {"apiVersion": f"{G}/{V}", "kind": "LocalQueue", "metadata": {"name": "gpus"}}
    ns = "team-a" if name.endswith("a") else "team-b"
    crd.create_namespaced_custom_object(
        G, V, ns, "localqueues", {**lq, "spec": {"clusterQueue": name}}
    )


def gpu_pod(v1: client.CoreV1Api, ns: str, name: str, gpus: int) -> None:
    res = {"nvidia.com/gpu": str(gpus)}
    body = {
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "gpus"}},
        "spec": {
            "containers": [
                {"name": "main", "image": "x", "resources": {"requests": res, "limits": res}}
            ]
        },
    }
    made = v1.create_namespaced_pod(ns, body)
    # the mutating webhook, at create
    assert [g.name for g in made.spec.scheduling_gates] == ["kueue.x-k8s.io/admission"]
    assert made.metadata.labels["kueue.x-k8s.io/managed"] == "true"


def workload_of(sim: SimCluster, ns: str, pod: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        for w in sim.list("workloads", ns):
            if w["metadata"]["ownerReferences"][0]["name"] == pod and w.get("status"):
                return w
        return None

    return wait_until(find)


def conditions(wl: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in wl["status"]["conditions"]}


def running(v1: client.CoreV1Api, ns: str, name: str) -> client.V1Pod:
    return wait_until(
        lambda: (p := v1.read_namespaced_pod(name, ns)).status.phase == "Running" and p
    )


def test_pod_admitted_on_the_right_flavor_then_the_next_queues(
    sim: SimCluster, crd: client.CustomObjectsApi, v1: client.CoreV1Api
) -> None:
    flavor(crd, "v100", "Tesla-V100-SXM2-16GB")
    flavor(crd, "h100", "NVIDIA-H100-80GB-HBM3")
    queue(crd, "cq-a", [("h100", 4)])
    gpu_pod(v1, "team-a", "train-0", 4)
    pod = running(v1, "team-a", "train-0")
    assert pod.spec.node_selector == {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    assert pod.spec.node_name == "h100-00" and not pod.spec.scheduling_gates
    wl = workload_of(sim, "team-a", "train-0")
    assert wl["metadata"]["name"].startswith("pod-train-0-")
    assert conditions(wl)["QuotaReserved"] == ("True", "QuotaReserved")
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {
        "nvidia.com/gpu": "h100"
    }
    gpu_pod(v1, "team-a", "train-1", 1)
    wl = wait_until(
        lambda: (
            (w := workload_of(sim, "team-a", "train-1")) and "QuotaReserved" in conditions(w) and w
        )
    )
    assert conditions(wl)["QuotaReserved"] == ("False", "WaitingForQuota")
    msg = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")["message"]
    assert msg == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor h100, 1 more needed"
    )
    assert v1.read_namespaced_pod("train-1", "team-a").spec.scheduling_gates
    status = wait_until(
        lambda: (
            (s := crd.get_cluster_custom_object(G, V, "clusterqueues", "cq-a")["status"]).get(
                "pendingWorkloads"
            )
            == 1
            and s
        )
    )
    assert status["admittedWorkloads"] == 1 and status["reservingWorkloads"] == 1
    assert status["flavorsReservation"] == [
        {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "4", "borrowed": "0"}]}
    ]
    lq = crd.get_namespaced_custom_object(G, V, "team-a", "localqueues", "gpus")["status"]
    assert lq["pendingWorkloads"] == 1 and lq["admittedWorkloads"] == 1
    # the first pod finishes: its Workload is Finished, the quota goes to the queued one
    sim.set_pod_phase("team-a", "train-0", "Succeeded")
    running(v1, "team-a", "train-1")
    assert conditions(workload_of(sim, "team-a", "train-0"))["Finished"] == ("True", "Succeeded")
    wait_until(lambda: not v1.read_namespaced_pod("train-0", "team-a").metadata.finalizers)


def test_flavors_tried_in_order_and_borrowing_within_a_cohort(
    sim: SimCluster, crd: client.CustomObjectsApi, v1: client.CoreV1Api
) -> None:
    flavor(crd, "h100", "NVIDIA-H100-80GB-HBM3")
    flavor(crd, "v100", "Tesla-V100-SXM2-16GB")
    queue(crd, "co-a", [("h100", 2), ("v100", 0)], borrowingLimit=2)
    queue(crd, "co-b", [("h100", 2), ("v100", 0)], borrowingLimit=0)
    gpu_pod(v1, "team-a", "big", 4)  # 2 own + 2 borrowed from co-b's unused quota
    pod = running(v1, "team-a", "big")
    assert pod.spec.node_selector == {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    cq = wait_until(
        lambda: (
            (s := crd.get_cluster_custom_object(G, V, "clusterqueues", "co-a")["status"]).get(
                "admittedWorkloads"
            )
            == 1
            and s
        )
    )
    assert cq["flavorsUsage"][0]["resources"][0] == {
        "name": "nvidia.com/gpu", "total": "4", "borrowed": "2",
    }  # fmt: skip
    gpu_pod(v1, "team-b", "small", 1)  # co-b lent everything: nothing left
    wl = wait_until(
        lambda: (
            (w := workload_of(sim, "team-b", "small")) and "QuotaReserved" in conditions(w) and w
        )
    )
    assert conditions(wl)["QuotaReserved"][0] == "False"


def test_lowering_nominal_quota_keeps_running_pods_and_queues_new_ones(
    sim: SimCluster, crd: client.CustomObjectsApi, v1: client.CoreV1Api
) -> None:
    flavor(crd, "h100", "NVIDIA-H100-80GB-HBM3")
    queue(crd, "cq-a", [("h100", 4)])
    gpu_pod(v1, "team-a", "run", 3)
    running(v1, "team-a", "run")
    one = [{"name": "nvidia.com/gpu", "nominalQuota": 1}]
    groups = [
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h100", "resources": one}]}
    ]
    patch = {"spec": {"resourceGroups": groups}}
    crd.patch_cluster_custom_object(G, V, "clusterqueues", "cq-a", patch)
    gpu_pod(v1, "team-a", "next", 1)
    wl = wait_until(
        lambda: (w := workload_of(sim, "team-a", "next")) and "QuotaReserved" in conditions(w) and w
    )
    assert conditions(wl)["QuotaReserved"] == ("False", "WaitingForQuota")
    assert v1.read_namespaced_pod("run", "team-a").status.phase == "Running"  # no preemption


def test_missing_flavor_makes_the_queue_inactive(
    sim: SimCluster, crd: client.CustomObjectsApi, v1: client.CoreV1Api
) -> None:
    queue(crd, "cq-a", [("h100", 4)])
    status = wait_until(
        lambda: crd.get_cluster_custom_object(G, V, "clusterqueues", "cq-a").get("status")
    )
    active = status["conditions"][0]
    assert (active["type"], active["status"], active["reason"]) == (
        "Active", "False", "FlavorNotFound",
    )  # fmt: skip
    assert active["message"] == (
        "Can't admit new workloads: references missing ResourceFlavor(s): h100."
    )
    gpu_pod(v1, "team-a", "waits", 1)
    wl = wait_until(
        lambda: (
            (w := workload_of(sim, "team-a", "waits")) and "QuotaReserved" in conditions(w) and w
        )
    )
    assert conditions(wl)["QuotaReserved"] == ("False", "Suspended")
    flavor(crd, "h100", "NVIDIA-H100-80GB-HBM3")
    running(v1, "team-a", "waits")


def test_job_created_suspended_and_unsuspended_on_admission(
    sim: SimCluster, crd: client.CustomObjectsApi, api: client.ApiClient
) -> None:
    flavor(crd, "v100", "Tesla-V100-SXM2-16GB")
    queue(crd, "cq-a", [("v100", 8)])
    res = {"nvidia.com/gpu": "2"}
    job = {
        "metadata": {"name": "etl", "labels": {"kueue.x-k8s.io/queue-name": "gpus"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "m", "image": "x", "resources": {"requests": res, "limits": res}}]}}},
    }  # fmt: skip
    batch = client.BatchV1Api(api)
    made = batch.create_namespaced_job("team-a", job)
    assert made.spec.suspend is True  # job_webhook.go
    got = wait_until(
        lambda: (j := batch.read_namespaced_job("etl", "team-a")).spec.suspend is False and j
    )
    assert got.spec.template.spec.node_selector == {PRODUCT: "Tesla-V100-SXM2-16GB"}
    wl = next(w for w in sim.list("workloads", "team-a"))
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert wl["metadata"]["name"].startswith("job-etl-")


def test_deleted_pod_releases_its_quota_and_kubectl_shows_workloads(
    sim: SimCluster, crd: client.CustomObjectsApi, v1: client.CoreV1Api, kubectl: Any
) -> None:
    flavor(crd, "h100", "NVIDIA-H100-80GB-HBM3")
    queue(crd, "cq-a", [("h100", 2)])
    gpu_pod(v1, "team-a", "first", 2)
    running(v1, "team-a", "first")
    gpu_pod(v1, "team-a", "second", 2)
    workload_of(sim, "team-a", "second")
    out = kubectl("get", "workloads", "-n", "team-a").stdout.splitlines()
    assert out[0].split() == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"]
    starts = [out[0].index(h) for h in ("QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE")]

    def cells(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in pairwise(starts)]

    rows = {line.split()[0].rsplit("-", 1)[0]: cells(line) for line in out[1:]}
    assert rows["pod-first"] == ["gpus", "cq-a", "True", ""]  # nil cells print empty
    assert rows["pod-second"] == ["gpus", "", "", ""]
    assert kubectl("get", "cq").stdout.splitlines()[1].split()[1:] == ["1"]  # NAME COHORT PENDING
    # the kubelet stops the deleted pod, Kueue drops its finalizer, the GC its Workload
    v1.delete_namespaced_pod("first", "team-a")
    running(v1, "team-a", "second")
    wait_until(
        lambda: all(p.metadata.name != "first" for p in v1.list_namespaced_pod("team-a").items)
    )


def test_queue_order_is_priority_then_creation(
    crd: client.CustomObjectsApi, v1: client.CoreV1Api, sim: SimCluster
) -> None:
    sim.create("priorityclasses", {"metadata": {"name": "high"}, "value": 1000})
    flavor(crd, "h100", "NVIDIA-H100-80GB-HBM3")
    queue(crd, "cq-a", [("h100", 1)])
    gpu_pod(v1, "team-a", "holder", 1)
    running(v1, "team-a", "holder")
    gpu_pod(v1, "team-a", "early-low", 1)
    workload_of(sim, "team-a", "early-low")
    res = {"nvidia.com/gpu": "1"}
    v1.create_namespaced_pod("team-a", {
        "metadata": {"name": "late-high", "labels": {"kueue.x-k8s.io/queue-name": "gpus"}},
        "spec": {"priorityClassName": "high", "containers": [
            {"name": "m", "image": "x", "resources": {"requests": res, "limits": res}}]},
    })  # fmt: skip
    assert workload_of(sim, "team-a", "late-high")["spec"]["priority"] == 1000
    sim.set_pod_phase("team-a", "holder", "Succeeded")
    running(v1, "team-a", "late-high")  # pkg/cache/queue: priority first, then creation time
    assert v1.read_namespaced_pod("early-low", "team-a").spec.scheduling_gates


def test_fleet_key_false_turns_kueue_off() -> None:
    with SimCluster.from_fleet({"nodes": NODES, "kueue": False}) as s:
        pod = {
            "metadata": {"name": "p", "labels": {"kueue.x-k8s.io/queue-name": "gpus"}},
            "spec": {"containers": [{"name": "m", "image": "x"}]},
        }
        made = s.create("pods", pod, "default")
        assert not made["spec"].get("schedulingGates")


def test_cluster_queue_without_namespace_selector_admits_nothing(
    sim: SimCluster, crd: client.CustomObjectsApi, v1: client.CoreV1Api
) -> None:
    flavor(crd, "h100", "NVIDIA-H100-80GB-HBM3")
    queue(crd, "cq-a", [("h100", 4)])
    crd.patch_cluster_custom_object(
        G, V, "clusterqueues", "cq-a", {"spec": {"namespaceSelector": None}}
    )
    gpu_pod(v1, "team-a", "nowhere", 1)
    wl = wait_until(
        lambda: (
            (w := workload_of(sim, "team-a", "nowhere")) and "QuotaReserved" in conditions(w) and w
        )
    )
    cond = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "Misconfigured", "workload namespace doesn't match ClusterQueue selector",
    )  # fmt: skip
    selector = {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}
    crd.patch_cluster_custom_object(
        G, V, "clusterqueues", "cq-a", {"spec": {"namespaceSelector": selector}}
    )
    running(v1, "team-a", "nowhere")
