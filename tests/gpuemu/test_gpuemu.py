"""gpuemu against the real control plane: a fleet loaded through the API, and the GPU Operator,
mig-manager and device plugin emulated as controllers (gpuemu/*.py name their sources).

Everything is asserted by polling the API (``wait_for``) or from recorded watch events; the
emulator's delays come from ``conftest.OPERATOR`` (device plugin restart 1 s).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

import gpuemu
from devstack.kubeapi import KubeAPI, wait_for
from gpuemu.load import HOLD_SCHEDULER, KWOK_ANNOTATION, NO_KUBELET_LABEL
from simcluster.fleet import UNHEALTHY_ANNOTATION
from simcluster.gpuoperator import DEFAULT_CONFIGMAP, stock_config_text
from tests.gpuemu.conftest import OPERATOR, unique

A100 = {"product": "NVIDIA-A100-SXM4-80GB", "count": 8, "mig": {"strategy": "mixed"}}
STATE = "nvidia.com/mig.config.state"
CONFIG = "nvidia.com/mig.config"
DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
PAUSED = "paused-for-mig-change"
CLIENT = "nvidia.com/gpu.deploy.client"


def labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"].get("conditions", []) if c["type"] == kind)


def node_fleet(*nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"nodes": list(nodes), "gpuOperator": OPERATOR, **extra}


def plugin_pods(api: KubeAPI, node: str) -> list[dict[str, Any]]:
    return api.list(
        "pods",
        "gpu-operator",
        labelSelector="app=nvidia-device-plugin-daemonset",
        fieldSelector=f"spec.nodeName={node}",
    )


def running(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first Running pod not being deleted."""
    return next(
        (
            p
            for p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ),
        None,
    )


def running_plugin(api: KubeAPI, node: str) -> dict[str, Any] | None:
    return running(plugin_pods(api, node))


def test_fleet_loaded(api: KubeAPI, emulator: gpuemu.Emulator) -> None:
    ns, a100, l40s, down = unique("team"), unique("a100"), unique("l40s"), unique("down")
    fleet = node_fleet(
        {"name": a100, "gpu": {**A100, "unhealthy": 1}},
        {
            "name": l40s,
            "gpu": {
                "product": "NVIDIA-L40S",
                "count": 4,
                "sharing": {"strategy": "time-slicing", "replicas": 4},
            },
        },
        {"name": down, "ready": False, "gpu": {"product": "Tesla-V100-SXM2-16GB", "count": 8}},
        namespaces=[{"name": ns, "labels": {"team": "t"}}],
        priorityClasses=[{"name": f"{ns}-high", "value": 1000}],
        quotas=[{"name": "gpu-quota", "namespace": ns, "hard": {"requests.nvidia.com/gpu": 100}}],
        pods=[
            {"name": "train", "namespace": ns, "node": a100, "phase": "Running",
             "priorityClassName": f"{ns}-high", "requests": {"nvidia.com/gpu": 2, "cpu": 4}},
            {"name": "done", "namespace": ns, "node": a100, "phase": "Succeeded",
             "requests": {"nvidia.com/gpu": 1}},
            {"name": "waiting", "namespace": ns, "phase": "Pending",
             "requests": {"nvidia.com/gpu": 64}},
            # left to kube-scheduler: 6 do not fit in the 5 the A100 node has left
            {"name": "too-big", "namespace": ns, "phase": "Pending", "schedule": True,
             "nodeSelector": {"kubernetes.io/hostname": a100},
             "requests": {"nvidia.com/gpu": 6}, "message": "the simulator's words"},
        ],
    )  # fmt: skip
    report = gpuemu.load(api, fleet)
    assert report.counts["nodes"] == 3 and report.counts["pods"] == 3
    assert report.counts["pods for the scheduler"] == 1

    # kwok marks the node Ready (its own message, not the fleet's); GPU capacity and the GFD
    # labels went in with the create; the unhealthy GPU is not allocatable.
    node = wait_for(
        lambda: (n := api.get("nodes", a100)) and condition(n, "Ready")["status"] == "True" and n,
        what="kwok marks the A100 node Ready",
    )
    assert condition(node, "Ready")["message"] == "kubelet is posting ready status"
    assert node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    assert NO_KUBELET_LABEL not in labels(node)  # handed to kwok after its Succeeded pod
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "7"
    assert labels(node)["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels(node)["nvidia.com/mig.capable"] == "true"
    assert labels(node)[CONFIG] == "all-disabled"
    assert "node.kubernetes.io/not-ready" not in {t["key"] for t in node["spec"].get("taints", [])}
    # the time-sliced node: 4 GPUs x 4 replicas
    shared = api.get("nodes", l40s)
    assert shared["status"]["capacity"]["nvidia.com/gpu"] == "16"
    assert labels(shared)["nvidia.com/gpu.product"] == "NVIDIA-L40S-SHARED"
    assert labels(shared)["nvidia.com/gpu.replicas"] == "4"
    # the node the fleet marks not ready is nobody's: NotReady, tainted, no kwok
    gone = api.get("nodes", down)
    assert condition(gone, "Ready")["status"] == "False"
    assert KWOK_ANNOTATION not in gone["metadata"].get("annotations", {})
    assert labels(gone)[NO_KUBELET_LABEL] == "none"
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in gone["spec"]["taints"]

    # pods: the pre-bound one Running (kwok), the finished one kept Succeeded, the unscheduled
    # one held Pending with the fleet's condition
    wait_for(lambda: api.get("pods", "train", ns)["status"]["phase"] == "Running", what="train")
    done = api.get("pods", "done", ns)
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    waiting = api.get("pods", "waiting", ns)
    assert waiting["spec"]["schedulerName"] == HOLD_SCHEDULER
    assert condition(waiting, "PodScheduled")["reason"] == "Unschedulable"
    # the pod marked ``schedule`` is the scheduler's: its words, not the fleet's
    too_big = wait_for(
        lambda: (
            (p := api.get("pods", "too-big", ns))
            and any(c["type"] == "PodScheduled" for c in p["status"].get("conditions", []))
            and p
        ),
        what="kube-scheduler's verdict on too-big",
    )
    assert too_big["spec"]["schedulerName"] == "default-scheduler"
    assert "1 Insufficient nvidia.com/gpu" in condition(too_big, "PodScheduled")["message"]
    # the real quota controller counts the Running and Pending pods, not the Succeeded one
    wait_for(
        lambda: (
            api.get("resourcequotas", "gpu-quota", ns)["status"]["used"]["requests.nvidia.com/gpu"]
            == "72"
        ),
        what="quota used",
        # The quota controller computes a new quota's usage from its work queue; under the
        # full suite's load (2 cores, several control planes) that took over 30 s once.
        timeout=90,
    )

    # kube-scheduler binds a new pod to the GPU node; kwok runs it
    api.create(
        "pods",
        {
            "metadata": {"name": "scheduled", "namespace": ns},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": a100},
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )
    pod = wait_for(
        lambda: (p := api.get("pods", "scheduled", ns))["status"].get("phase") == "Running" and p,
        what="the scheduled pod Running",
    )
    assert pod["spec"]["nodeName"] == a100
    # the real DaemonSet controller runs the device plugin on every Ready GPU node; the
    # NotReady node gets none (its taint)
    wait_for(lambda: running_plugin(api, a100), what="device plugin pod on the A100 node")
    wait_for(lambda: running_plugin(api, l40s), what="device plugin pod on the L40S node")
    assert plugin_pods(api, down) == []

    # a GPU fails its health check: the device plugin reports it, allocatable drops by its
    # time-slicing replicas
    api.patch("nodes", l40s, {"metadata": {"annotations": {UNHEALTHY_ANNOTATION: "1"}}})
    wait_for(
        lambda: api.get("nodes", l40s)["status"]["allocatable"]["nvidia.com/gpu"] == "12",
        what="allocatable 16 - 4",
    )
    assert api.get("nodes", l40s)["status"]["capacity"]["nvidia.com/gpu"] == "16"


def test_mig_reconfiguration_end_to_end(api: KubeAPI, emulator: gpuemu.Emulator, record) -> None:
    name, ns = unique("a100"), unique("agents")
    gpuemu.load(api, node_fleet({"name": name, "gpu": A100}, namespaces=[ns]))
    # a third-party GPU client (the portal's agent) takes part in the pause by selecting
    # nvidia.com/gpu.deploy.client (reconfigure.go waitForPodsWithNodeSelector)
    agent = {"app": "portal-agent"}
    api.create(
        "daemonsets",
        {
            "metadata": {"name": "portal-agent", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": agent},
                "template": {
                    "metadata": {"labels": agent},
                    "spec": {
                        "nodeSelector": {CLIENT: "true", "kubernetes.io/hostname": name},
                        "containers": [{"name": "agent", "image": "portal/agent"}],
                    },
                },
            },
        },
    )
    old_plugin = wait_for(lambda: running_plugin(api, name), what="device plugin pod Running")
    old_agent = wait_for(lambda: running(api.list("pods", ns)), what="agent pod Running")
    nodes = record("nodes", field_selector=f"metadata.name={name}")
    pods = record("pods", field_selector=f"spec.nodeName={name}")

    api.patch("nodes", name, {"metadata": {"labels": {CONFIG: "all-1g.10gb"}}})
    node = wait_for(
        lambda: (
            (n := api.get("nodes", name))["status"]["capacity"].get("nvidia.com/mig-1g.10gb")
            == "56"
            and n
        ),
        what="mig-1g.10gb capacity after the device plugin restart",
    )
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "0"
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "56"
    assert labels(node)["nvidia.com/mig-1g.10gb.count"] == "56"
    assert labels(node)[STATE] == "success"
    assert labels(node)[DEVICE_PLUGIN] == "true" and labels(node)[CLIENT] == "true"

    # the protocol as the node's watch saw it: pending, operands paused, success; the new
    # capacity only after success (devicePluginRestart later)
    seen = [
        ev.new
        for ev in nodes.snapshot()
        if ev.new is not None and labels(ev.new).get(CONFIG) == "all-1g.10gb"
    ]
    states = [labels(n).get(STATE) for n in seen]
    assert states[0] == "success"  # the label change itself: the old run's state, still
    pending = states.index("pending")
    first_success = states.index("success", pending)
    assert any(labels(n).get(DEVICE_PLUGIN) == PAUSED for n in seen[pending:first_success])
    assert any(labels(n).get(CLIENT) == PAUSED for n in seen[pending:first_success])
    assert "nvidia.com/mig-1g.10gb" not in seen[first_success]["status"]["capacity"]

    # the real DaemonSet controller deleted the device plugin and agent pods while paused and
    # made new ones once the labels were back
    deleted = {ev.obj["metadata"]["uid"] for ev in pods.snapshot() if ev.type == "DELETED"}
    assert {old_plugin["metadata"]["uid"], old_agent["metadata"]["uid"]} <= deleted
    wait_for(lambda: running_plugin(api, name), what="device plugin pod back")
    wait_for(lambda: running(api.list("pods", ns)), what="agent pod back")


def test_failed_while_a_gpu_pod_runs(api: KubeAPI, emulator: gpuemu.Emulator) -> None:
    name, ns = unique("a100"), unique("busy")
    gpuemu.load(api, node_fleet({"name": name, "gpu": A100}, namespaces=[ns]))
    api.create(
        "pods",
        {
            "metadata": {"name": "train", "namespace": ns},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": name},
                "containers": [
                    {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
                ],
            },
        },
    )
    wait_for(lambda: api.get("pods", "train", ns)["status"].get("phase") == "Running", what="pod")
    wait_for(lambda: running_plugin(api, name), what="device plugin pod Running")

    api.patch("nodes", name, {"metadata": {"labels": {CONFIG: "all-3g.40gb"}}})
    node = wait_for(
        lambda: (n := api.get("nodes", name)) and labels(n).get(STATE) == "failed" and n,
        what="failed",
    )
    assert labels(node)[DEVICE_PLUGIN] == "true"  # setState restores the clients
    emulator.wait_settled()
    node = api.get("nodes", name)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert not [k for k in node["status"]["capacity"] if k.startswith("nvidia.com/mig-")]


def test_default_configmap_edits_are_reverted(api: KubeAPI, emulator: gpuemu.Emulator) -> None:
    stock = stock_config_text()
    api.patch(
        "configmaps",
        DEFAULT_CONFIGMAP,
        {"data": {"config.yaml": "version: v1\nmig-configs: {}\n", "extra": "x"}},
        "gpu-operator",
    )
    wait_for(
        lambda: (
            api.get("configmaps", DEFAULT_CONFIGMAP, "gpu-operator")["data"]
            == {"config.yaml": stock}
        ),
        what="the operator reverts the edit",
    )
    api.delete("configmaps", DEFAULT_CONFIGMAP, "gpu-operator")
    cm = wait_for(
        lambda: api.get("configmaps", DEFAULT_CONFIGMAP, "gpu-operator"), what="re-created"
    )
    assert cm["data"] == {"config.yaml": stock}
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "ClusterPolicy"


def test_fault_annotations(api: KubeAPI, emulator: gpuemu.Emulator) -> None:
    name = unique("a100")
    fault = {gpuemu.FAULT_ANNOTATION: "mig_fail"}
    gpuemu.load(api, node_fleet({"name": name, "gpu": A100, "annotations": fault}))
    wait_for(lambda: running_plugin(api, name), what="device plugin pod Running")

    # mig_fail: the next apply fails, and the fault is used up
    api.patch("nodes", name, {"metadata": {"labels": {CONFIG: "all-1g.10gb"}}})
    node = wait_for(
        lambda: (n := api.get("nodes", name)) and labels(n).get(STATE) == "failed" and n,
        what="failed by mig_fail",
    )
    assert gpuemu.FAULT_ANNOTATION not in node["metadata"].get("annotations", {})

    # mig_stuck: pending forever with the operands paused
    api.patch("nodes", name, {"metadata": {"annotations": {gpuemu.FAULT_ANNOTATION: "mig_stuck"}}})
    api.patch("nodes", name, {"metadata": {"labels": {CONFIG: "all-3g.40gb"}}})
    wait_for(lambda: labels(api.get("nodes", name)).get(DEVICE_PLUGIN) == PAUSED, what="paused")
    emulator.wait_settled()
    stuck = labels(api.get("nodes", name))
    assert stuck[STATE] == "pending" and stuck[DEVICE_PLUGIN] == PAUSED
    wait_for(lambda: not plugin_pods(api, name), what="the paused device plugin pod gone")


def test_operator_labels_a_new_gpu_node(api: KubeAPI, emulator: gpuemu.Emulator) -> None:
    """A node GFD labelled but the operator has not seen yet: deploy labels and the default
    MIG config appear (nodelabeling_controller.go)."""
    name = unique("bare")
    api.create(
        "nodes",
        {
            "metadata": {
                "name": name,
                "labels": {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu.deploy.dcgm": "false",
                },
            }
        },
    )
    node = wait_for(
        lambda: (n := api.get("nodes", name)) and labels(n).get(CONFIG) and n,
        what="operator labels",
    )
    got = labels(node)
    assert got[CONFIG] == "all-disabled"  # MIG-capable by product name (no mig.capable label)
    assert got["nvidia.com/gpu.deploy.mig-manager"] == "true"
    assert got[DEVICE_PLUGIN] == "true" and got["nvidia.com/gpu.deploy.client"] == "true"
    assert got["nvidia.com/gpu.deploy.dcgm"] == "false"  # a set value is honoured
    api.delete("nodes", name)


def test_cli_load_only(api: KubeAPI, control_plane, tmp_path) -> None:
    name = unique("cli")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        yaml.safe_dump(
            {"nodes": [{"name": name, "gpu": {"product": "NVIDIA-H200"}}], "gpuOperator": False}
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "gpuemu", "--kubeconfig", str(control_plane.admin_kubeconfig),
         "--fleet", str(fleet), "--load-only"],
        capture_output=True, text=True, timeout=60, check=False, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "1 nodes" in out.stdout
    node = api.get("nodes", name)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
