"""Pod status as a v1.32 kubelet writes it, and the pod rows of ``kubectl get pods``.

Follows ``pkg/kubelet/kubelet_pods.go`` (``generateAPIPodStatus``,
``convertToAPIContainerStatuses``: running/terminated states, image, imageID, containerID,
statuses sorted by name, ``volumeMounts``), ``pkg/kubelet/status/generate.go`` (the
PodReadyToStartContainers, Initialized, Ready, ContainersReady and PodScheduled conditions;
``PodCompleted`` / ``PodFailed`` for terminal pods), ``pkg/kubelet/status/status_manager.go``
(startTime and lastTransitionTime kept), ``pkg/registry/core/pod/strategy.go``
(``PrepareForCreate``: a created pod is Pending) and ``pkg/printers/internalversion/
printers.go`` (``printPod``: READY, STATUS incl. ``Completed`` and ``Terminating``,
RESTARTS with ``(... ago)``, IP).
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from simcluster import SimCluster
from simcluster.fleet import expand, generate

from .helpers import DEMO, Kubectl, pod, wait_until

KUBELET_CONDITIONS = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
]
FLEET = {
    "nodes": [
        {"name": "gpu-{i}", "count": 2, "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}},
        {"name": "down-0", "ready": False},
    ],
    "namespaces": [{"name": "team"}],
    "pods": [{"name": "old", "namespace": "team", "node": "gpu-0", "phase": "Running"}],
}


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster.from_fleet(FLEET, pod_stop_s=0.2, bookmark_interval_s=0.2) as s:
        yield s


def _table(api: client.ApiClient, path: str) -> dict[str, Any]:
    resp = api.call_api(
        path,
        "GET",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    return json.loads(resp.data)


def _conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def _node(sim: SimCluster, name: str) -> tuple[str, str]:
    node = sim.get("nodes", name)
    ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    return ip, node["spec"]["podCIDRs"][0]


def test_fleet_running_pod_has_the_kubelet_status() -> None:
    with SimCluster.from_fleet(DEMO) as sim:
        p = sim.get("pods", "resnet-train-0", "ml-vision")
        st = p["status"]
        assert [c["type"] for c in st["conditions"]] == KUBELET_CONDITIONS
        assert all(c["status"] == "True" and c["lastProbeTime"] is None for c in st["conditions"])
        assert list(st) == [
            "phase", "conditions", "hostIP", "hostIPs", "podIP", "podIPs", "startTime",
            "containerStatuses", "qosClass",
        ]  # fmt: skip
        host_ip, cidr = _node(sim, "a100-00")
        assert st["hostIP"] == host_ip and st["hostIPs"] == [{"ip": host_ip}]
        assert ipaddress.ip_address(st["podIP"]) in ipaddress.ip_network(cidr)
        assert st["podIPs"] == [{"ip": st["podIP"]}]
        (cs,) = st["containerStatuses"]
        assert cs["state"] == {"running": {"startedAt": st["startTime"]}}
        assert (cs["name"], cs["ready"], cs["started"], cs["restartCount"]) == (
            "main",
            True,
            True,
            0,
        )
        assert cs["lastState"] == {}
        assert cs["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
        assert cs["imageID"].startswith("nvcr.io/nvidia/pytorch@sha256:")
        assert cs["containerID"].startswith("containerd://") and len(cs["containerID"]) == 77
        # every pod on a node has its own address of the node's pod CIDR
        ips = [x["status"].get("podIP") for x in sim.list("pods") if x["spec"].get("nodeName")]
        assert len(ips) == len(set(ips))


def test_fleet_succeeded_and_unscheduled_pods() -> None:
    with SimCluster.from_fleet(DEMO) as sim:
        done = sim.get("pods", "vision-eval-done", "ml-vision")["status"]
        conds = _conds(done)
        assert [c["type"] for c in done["conditions"]] == KUBELET_CONDITIONS
        assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "PodCompleted")
        assert conds["ContainersReady"]["reason"] == "PodCompleted"
        assert conds["PodReadyToStartContainers"]["status"] == "False"
        assert (conds["Initialized"]["status"], conds["Initialized"]["reason"]) == (
            "True",
            "PodCompleted",
        )
        term = done["containerStatuses"][0]["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (0, "Completed")
        assert term["containerID"] == done["containerStatuses"][0]["containerID"]
        assert done["containerStatuses"][0]["ready"] is False
        pending = sim.get("pods", "tokenizer-train", "nlp-research")["status"]
        assert pending["phase"] == "Pending" and "hostIP" not in pending
        (sched,) = pending["conditions"]  # what the scheduler wrote; no kubelet ran it
        assert (sched["type"], sched["status"], sched["reason"]) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        )


def test_generated_fleet_statuses_are_complete() -> None:
    fleet = expand(generate(nodes=30, pods=400, gpu_pods=150, namespaces=5, seed=2))
    cidrs = {n["metadata"]["name"]: n["spec"]["podCIDR"] for n in fleet.nodes}
    assert len(set(cidrs.values())) == len(cidrs)
    per_node: dict[str, set[str]] = {}
    for p in fleet.pods:
        st, node = p["status"], p["spec"].get("nodeName")
        if st["phase"] == "Running":
            assert [c["type"] for c in st["conditions"]] == KUBELET_CONDITIONS
            assert st["containerStatuses"][0]["state"]["running"]
            assert ipaddress.ip_address(st["podIP"]) in ipaddress.ip_network(cidrs[node])
            assert st["podIP"] not in per_node.setdefault(node, set())
            per_node[node].add(st["podIP"])
        elif st["phase"] == "Succeeded":
            assert st["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_created_pod_is_pending_then_started_by_its_kubelet(
    sim: SimCluster, v1: client.CoreV1Api
) -> None:
    rv = v1.list_namespaced_pod("team").metadata.resource_version
    seen: list[tuple[str, str]] = []

    def watcher() -> None:
        for e in watch.Watch().stream(
            v1.list_namespaced_pod, "team", resource_version=rv, timeout_seconds=2
        ):
            seen.append((e["type"], e["object"].status.phase))
            if len(seen) == 2:
                return

    t = threading.Thread(target=watcher)
    t.start()
    time.sleep(0.2)
    body = pod("web", node="gpu-1")
    body["spec"]["containers"].append({"name": "a-sidecar-less", "image": "busybox"})
    body["spec"]["initContainers"] = [
        {"name": "setup", "image": "python:3.11-slim"},
        {"name": "proxy", "image": "envoy", "restartPolicy": "Always"},
    ]
    created = v1.create_namespaced_pod("team", body)
    t.join(timeout=5)
    assert created.status.phase == "Pending" and created.status.conditions is None
    assert seen == [("ADDED", "Pending"), ("MODIFIED", "Running")]
    st = v1.read_namespaced_pod("web", "team", _preload_content=False)
    st = json.loads(st.data)["status"]
    host_ip, cidr = _node(sim, "gpu-1")
    assert st["hostIP"] == host_ip
    assert st["podIP"] == str(ipaddress.ip_network(cidr).network_address + 2)  # first one
    assert [c["name"] for c in st["containerStatuses"]] == ["a-sidecar-less", "main"]  # sorted
    assert [c["image"] for c in st["containerStatuses"]] == [
        "docker.io/library/busybox:latest",
        "docker.io/library/x:latest",
    ]
    setup, proxy = st["initContainerStatuses"]  # spec order
    assert setup["state"]["terminated"]["reason"] == "Completed"
    assert (setup["ready"], setup["started"]) == (True, False)
    assert setup["image"] == "docker.io/library/python:3.11-slim"
    assert proxy["state"]["running"] and (proxy["ready"], proxy["started"]) == (True, True)
    mounts = st["containerStatuses"][1]["volumeMounts"]
    assert mounts[0]["recursiveReadOnly"] == "Disabled" and mounts[0]["readOnly"] is True
    kubelet = next(m for m in json.loads(
        v1.read_namespaced_pod("web", "team", _preload_content=False).data
    )["metadata"]["managedFields"] if m["manager"] == "kubelet")  # fmt: skip
    assert (kubelet["operation"], kubelet["subresource"]) == ("Update", "status")


def test_pod_ips_come_from_the_node_cidr_in_order(sim: SimCluster, v1: client.CoreV1Api) -> None:
    _, cidr = _node(sim, "gpu-0")
    used = sim.get("pods", "old", "team")["status"]["podIP"]  # the fleet's pod: .2
    assert used == str(ipaddress.ip_network(cidr).network_address + 2)
    for name in ("a", "b"):
        v1.create_namespaced_pod("team", pod(name, node="gpu-0"))
    ips = [sim.get("pods", n, "team")["status"]["podIP"] for n in ("a", "b")]
    base = ipaddress.ip_network(cidr).network_address
    assert ips == [str(base + 3), str(base + 4)]
    # a node created through the API has no pod CIDR (no node IPAM controller); its
    # kubelet still hands out addresses of one /24 of the cluster's pod network
    ready = [{"type": "Ready", "status": "True"}]
    address = [{"type": "InternalIP", "address": "10.9.9.9"}]
    v1.create_node({"metadata": {"name": "extra"}, "status": {}})
    v1.patch_node_status("extra", {"status": {"conditions": ready, "addresses": address}})
    v1.create_namespaced_pod("team", pod("c", node="extra"))
    st = sim.get("pods", "c", "team")["status"]
    assert st["hostIP"] == "10.9.9.9"
    assert ipaddress.ip_address(st["podIP"]) in ipaddress.ip_network("100.64.0.0/10")


def test_pods_without_a_running_kubelet_stay_pending(sim: SimCluster, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", pod("free"))  # no scheduler: nobody binds it
    assert sim.get("pods", "free", "team")["status"] == {
        "phase": "Pending",
        "qosClass": "BestEffort",
    }
    v1.create_namespaced_pod("team", pod("nowhere", node="no-such-node"))
    assert sim.get("pods", "nowhere", "team")["status"]["phase"] == "Pending"
    v1.create_namespaced_pod("team", pod("waits", node="down-0"))
    assert sim.get("pods", "waits", "team")["status"] == {
        "phase": "Pending",
        "qosClass": "BestEffort",
    }
    node = sim.get("nodes", "down-0")
    for c in node["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="True", reason="KubeletReady")
    v1.replace_node_status("down-0", node)
    st = wait_until(lambda: sim.get("pods", "waits", "team")["status"]["phase"] == "Running")
    assert st
    assert sim.get("pods", "waits", "team")["status"]["hostIP"]


def test_deleted_pod_gets_the_terminal_status(sim: SimCluster, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", pod("bye", node="gpu-0", terminationGracePeriodSeconds=5))
    started = sim.get("pods", "bye", "team")["status"]
    finals: list[dict[str, Any]] = []

    def watcher() -> None:
        for e in watch.Watch().stream(v1.list_namespaced_pod, "team", timeout_seconds=5):
            o = e["object"]
            if o.metadata.name == "bye" and o.status.phase == "Failed":
                finals.append(e["raw_object"]["status"])
            if o.metadata.name == "bye" and e["type"] == "DELETED":
                return

    t = threading.Thread(target=watcher)
    t.start()
    time.sleep(0.2)
    v1.delete_namespaced_pod("bye", "team")
    t.join(timeout=10)
    final = finals[0]
    conds = _conds(final)
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "PodFailed")
    assert conds["ContainersReady"]["reason"] == "PodFailed"
    assert (
        conds["PodScheduled"]["lastTransitionTime"]
        == _conds(started)["PodScheduled"]["lastTransitionTime"]
    )
    term = final["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (143, "Error")  # SIGTERM
    assert term["containerID"] == started["containerStatuses"][0]["containerID"]
    assert term["startedAt"] == started["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert final["podIP"] == started["podIP"] and final["startTime"] == started["startTime"]


def test_table_rows_from_the_statuses(sim: SimCluster, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod("team", pod("slow", node="gpu-1", terminationGracePeriodSeconds=30))
    sim.set_pod_phase("team", "old", "Succeeded")
    v1.create_namespaced_pod("team", pod("flaky", node="gpu-1"))
    patch = {"status": {"containerStatuses": [{
        "name": "main", "image": "docker.io/library/x:latest", "imageID": "", "ready": True,
        "restartCount": 3, "state": {"running": {"startedAt": "2020-01-01T00:00:00Z"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                     "finishedAt": "2020-01-01T00:00:00Z"}}}]}}  # fmt: skip
    v1.patch_namespaced_pod_status("flaky", "team", patch)
    sim.faults.update(pods_ignore_sigterm=True)
    v1.delete_namespaced_pod("slow", "team")
    rows = {r["cells"][0]: r["cells"] for r in _table(api, "/api/v1/namespaces/team/pods")["rows"]}
    assert rows["slow"][1:4] == ["1/1", "Terminating", "0"]
    assert rows["old"][1:3] == ["0/1", "Completed"]
    assert rows["flaky"][1:3] == ["1/1", "Running"]
    assert rows["flaky"][3].startswith("3 (") and rows["flaky"][3].endswith(" ago)")
    assert rows["slow"][5] == sim.get("pods", "slow", "team")["status"]["podIP"]


def test_kubectl_get_pods_wide(sim: SimCluster, kubectl: Kubectl) -> None:
    out = kubectl("get", "pods", "-n", "team", "-o", "wide").stdout.splitlines()
    header, row = out[0].split(), out[1].split()
    assert header[:6] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP"]
    ip = sim.get("pods", "old", "team")["status"]["podIP"]
    assert row[0:4] == ["old", "1/1", "Running", "0"] and row[5] == ip and row[6] == "gpu-0"
    sim.faults.update(pods_ignore_sigterm=True)  # it stays terminating for its grace period
    kubectl("delete", "pod", "old", "-n", "team", "--wait=false")
    lines = kubectl("get", "pod", "old", "-n", "team").stdout.splitlines()
    assert lines[1].split()[1:3] == ["1/1", "Terminating"]


@pytest.mark.parametrize("image,expected", [
    ("busybox", ("docker.io/library/busybox:latest", "docker.io/library/busybox@sha256:")),
    ("library/nginx:1.27", ("docker.io/library/nginx:1.27", "docker.io/library/nginx@sha256:")),
    ("ghcr.io/org/app:v1", ("ghcr.io/org/app:v1", "ghcr.io/org/app@sha256:")),
    ("localhost:5000/app", ("localhost:5000/app:latest", "localhost:5000/app@sha256:")),
])  # fmt: skip
def test_runtime_image_names(image: str, expected: tuple[str, str]) -> None:
    from simcluster.pods import image_ref

    name, image_id = image_ref(image)
    assert name == expected[0] and image_id.startswith(expected[1])
    assert len(image_id.rsplit(":", 1)[1]) == 64
