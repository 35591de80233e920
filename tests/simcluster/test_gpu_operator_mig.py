"""mig-manager in the simulator, as NVIDIA/mig-parted's really behaves.

Real sources followed: NVIDIA/mig-parted ``cmd/nvidia-mig-manager/main.go``
(``SyncableMigConfig.Get``: the label is read again only when it changed;
``ContinuouslySyncMigConfigChanges``; ``setupMigConfig``: configs generated from the
hardware without ``CONFIG_FILE``, ``pkg/mig/builder/builder.go``) and
``pkg/mig/reconfigure/reconfigure.go`` (``Run``: ``validateMigConfig`` fails without
``pending``, ``shutdownKubernetesGPUClients`` with ``maybeSetPaused``,
``waitForPodsToBeDeleted`` / ``waitForPodsWithNodeSelector`` returning without a state on
timeout, ``applyMigModeChange`` + ``WithReboot`` -> ``rebooting``, ``setState`` restoring the
clients); NVIDIA/gpu-operator v26.7.0 ``controllers/object_controls.go``
(``TransformMIGManager``: a custom config is the ConfigMap's ``config.yaml`` mounted as a
volume, which the kubelet refreshes on its sync, about a minute later). Long delays use the
sim clock (``sim.clock.advance``), not sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from simcluster import SimCluster

from .helpers import make_api, pod, wait_until

NODE = "a100-00"
STATE = "nvidia.com/mig.config.state"
CONFIG = "nvidia.com/mig.config"
PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
DCGM = "nvidia.com/gpu.deploy.dcgm"
CLIENT = "nvidia.com/gpu.deploy.client"
PAUSED = "paused-for-mig-change"
OP_NS = "gpu-operator"
CUSTOM = "portal-mig"


def _fleet(op: dict[str, Any] | None = None, configs: dict[str, Any] | None = None, **labels: str):
    node = {
        "name": NODE,
        "labels": labels,
        "gpu": {
            "product": "NVIDIA-A100-SXM4-80GB",
            "count": 2,
            "mig": {"strategy": "mixed", "config": "all-disabled"},
        },
    }
    spec: dict[str, Any] = {"nodes": [node], "gpuOperator": op or {}}
    if configs is not None:
        spec["configmaps"] = [{"name": CUSTOM, "namespace": OP_NS, "data": _file(configs)}]
    return spec


def _file(configs: dict[str, Any]) -> dict[str, str]:
    return {"config.yaml": yaml.safe_dump({"version": "v1", "mig-configs": configs})}


DISABLED = [{"devices": "all", "mig-enabled": False}]
ONE_G = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
THREE_G = [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]


@pytest.fixture
def make() -> Iterator[Any]:
    sims: list[SimCluster] = []

    def start(fleet: dict[str, Any], **kw: Any) -> tuple[SimCluster, client.CoreV1Api]:
        sim = SimCluster.from_fleet(fleet, mig_step_s=0.01, **kw)
        sim.start()
        sims.append(sim)
        v1 = client.CoreV1Api(make_api(sim))
        # one write after the fleet load (whose history is compacted): watchable from here
        v1.patch_node(NODE, {"metadata": {"labels": {"test.simcluster.io/started": "1"}}})
        return sim, v1

    yield start
    for s in sims:
        s.stop()


def _label(v1: client.CoreV1Api, value: str) -> str:
    """Set nvidia.com/mig.config; returns the resourceVersion before the change."""
    rv = v1.read_node(NODE).metadata.resource_version
    v1.patch_node(NODE, {"metadata": {"labels": {CONFIG: value}}})
    return rv


def _settled(sim: SimCluster) -> None:
    wait_until(sim.mig.idle)


def _history(v1: client.CoreV1Api, rv: str, *keys: str) -> list[tuple[str | None, ...]]:
    """The node's values of ``keys`` at every change since ``rv`` (a watch replays them)."""
    out: list[tuple[str | None, ...]] = []
    w = watch.Watch()
    for ev in w.stream(
        v1.list_node,
        field_selector=f"metadata.name={NODE}",
        resource_version=rv,
        timeout_seconds=1,
    ):
        labels = ev["object"].metadata.labels or {}
        snap = tuple(labels.get(k) for k in keys)
        if not out or out[-1] != snap:
            out.append(snap)
    return out


def _states(v1: client.CoreV1Api, rv: str) -> list[str | None]:
    out: list[str | None] = []
    for (s,) in _history(v1, rv, STATE):
        if not out or out[-1] != s:
            out.append(s)
    return out


def test_config_missing_from_the_mounted_file_fails_without_pending(make: Any) -> None:
    """validateMigConfig fails before ``pending``; the volume shows the ConfigMap as it was
    ``configMountDelay`` ago; the same label is not read again after the delay."""
    sim, v1 = make(_fleet({"migConfigName": CUSTOM}, {"all-disabled": DISABLED}))
    assert sim.gpu_operator.config_mount_delay_s == 60  # the kubelet's, by default
    v1.patch_namespaced_config_map(
        CUSTOM, OP_NS, {"data": _file({"all-disabled": DISABLED, "custom-a": ONE_G, "b": THREE_G})}
    )
    rv = _label(v1, "custom-a")  # right after the write: judged against the old file
    _settled(sim)
    assert _states(v1, rv) == ["success", "failed"]
    sim.clock.advance(61)
    v1.patch_node(NODE, {"metadata": {"labels": {"unrelated": "x"}}})  # no label change
    time.sleep(0.2)
    _settled(sim)
    assert v1.read_node(NODE).metadata.labels[STATE] == "failed"  # never retried
    rv = _label(v1, "b")  # a label set after the delay: the new file
    _settled(sim)
    assert _states(v1, rv) == ["failed", "pending", "success"]


def test_a_change_and_change_back_before_the_read_is_not_seen(make: Any) -> None:
    """SyncableMigConfig keeps only the current value: A -> B -> A while busy is no change."""
    sim, v1 = make(_fleet({"clientPauseTimeout": 300}))
    blocker = pod(
        "device-plugin", node=NODE, meta={"labels": {"app": "nvidia-device-plugin-daemonset"}}
    )
    v1.create_namespaced_pod(OP_NS, blocker)
    _label(v1, "all-1g.10gb")
    wait_until(lambda: v1.read_node(NODE).metadata.labels.get(PLUGIN) == PAUSED)
    _label(v1, "all-3g.40gb")
    _label(v1, "all-1g.10gb")  # back to what the agent read, before it reads again
    v1.delete_namespaced_pod("device-plugin", OP_NS, grace_period_seconds=0)
    _settled(sim)
    labels = v1.read_node(NODE).metadata.labels
    assert labels[STATE] == "success"
    sim.clock.advance(sim.gpu_operator.device_plugin_restart_s)
    wait_until(lambda: "nvidia.com/mig-1g.10gb" in (v1.read_node(NODE).status.capacity or {}))
    assert "nvidia.com/mig-3g.40gb" not in v1.read_node(NODE).status.capacity


def test_generated_configs_without_a_custom_config(make: Any) -> None:
    """setupMigConfig without CONFIG_FILE: only generated names; a portal name is unknown."""
    sim, v1 = make(_fleet())
    rv = _label(v1, "portal-layout-1")
    _settled(sim)
    assert _states(v1, rv) == ["success", "failed"]
    rv = _label(v1, "all-1g.10gb.me")  # builder.go: "+" in a profile name becomes "."
    _settled(sim)
    assert _states(v1, rv) == ["failed", "pending", "success"]


def test_state_order_and_client_labels(make: Any) -> None:
    """pending, clients paused ("false" stays "false"), clients restored, success."""
    sim, v1 = make(_fleet(**{DCGM: "false"}))
    rv = _label(v1, "all-1g.10gb")
    _settled(sim)
    hist = _history(v1, rv, STATE, PLUGIN, DCGM)
    assert hist[-1] == ("success", "true", "false")
    assert ("pending", PAUSED, "false") in hist
    seq = [h for h in hist if h != hist[0]]
    assert seq[0] == ("pending", "true", "false")  # pending before the clients pause
    assert ("pending", "true", "false") in seq[-3:]  # clients restored before success
    assert all(h[2] == "false" for h in hist)


def test_daemonset_gpu_clients_block_until_gone(make: Any) -> None:
    """waitForPodsWithNodeSelector: DaemonSet pods whose nodeSelector has the client key."""
    sim, v1 = make(_fleet(**{CLIENT: "true"}))
    apps = client.AppsV1Api(make_api(sim))
    v1.create_namespace({"metadata": {"name": "monitoring"}})
    wait_until(lambda: v1.list_namespaced_service_account("monitoring").items)
    selector = {CLIENT: "true"}
    ds = apps.create_namespaced_daemon_set(
        "monitoring",
        {
            "metadata": {"name": "gpu-agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "gpu-agent"}},
                "template": {
                    "metadata": {"labels": {"app": "gpu-agent"}},
                    "spec": {
                        "nodeSelector": selector,
                        "containers": [{"name": "main", "image": "x"}],
                    },
                },
            },
        },
    )
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "gpu-agent",
        "uid": ds.metadata.uid,
        "controller": True,
    }
    agent_pods = lambda: [  # noqa: E731
        p
        for p in v1.list_namespaced_pod("monitoring", field_selector=f"spec.nodeName={NODE}").items
        if p.metadata.deletion_timestamp is None
    ]
    if not agent_pods():  # the DaemonSet controller has not made one: as it would
        meta = {"labels": {"app": "gpu-agent"}, "ownerReferences": [owner]}
        v1.create_namespaced_pod(
            "monitoring", pod("gpu-agent-x", node=NODE, meta=meta, nodeSelector=selector)
        )
    _label(v1, "all-1g.10gb")
    wait_until(lambda: v1.read_node(NODE).metadata.labels.get(CLIENT) == PAUSED)
    left = agent_pods()
    if left:  # still there: mig-manager waits
        time.sleep(0.3)
        assert v1.read_node(NODE).metadata.labels[STATE] == "pending"
        for p in left:
            v1.delete_namespaced_pod(p.metadata.name, "monitoring", grace_period_seconds=0)
    _settled(sim)
    labels = v1.read_node(NODE).metadata.labels
    assert (labels[STATE], labels[CLIENT]) == ("success", "true")


def test_client_pause_timeout_leaves_pending_and_paused(make: Any) -> None:
    """waitForPodsToBeDeleted times out (5 min each): an error without a state, no retry."""
    sim, v1 = make(_fleet())
    assert sim.gpu_operator.client_pause_timeout_s == 300
    blocker = pod(
        "nvidia-device-plugin-x",
        node=NODE,
        meta={"labels": {"app": "nvidia-device-plugin-daemonset"}},
    )
    v1.create_namespaced_pod(OP_NS, blocker)
    _label(v1, "all-1g.10gb")
    wait_until(lambda: v1.read_node(NODE).metadata.labels.get(PLUGIN) == PAUSED)
    time.sleep(0.2)
    assert not sim.mig.idle()  # waiting on the pod
    sim.clock.advance(301)
    _settled(sim)
    v1.delete_namespaced_pod("nvidia-device-plugin-x", OP_NS, grace_period_seconds=0)
    time.sleep(0.2)
    labels = v1.read_node(NODE).metadata.labels
    assert (labels[STATE], labels[PLUGIN]) == ("pending", PAUSED)
    rv = _label(v1, "all-3g.40gb")  # only a label change runs it again
    _settled(sim)
    assert _states(v1, rv) == ["pending", "success"]
    assert v1.read_node(NODE).metadata.labels[PLUGIN] == "true"


@pytest.mark.parametrize("with_reboot", [False, True])
def test_rebooting_only_with_reboot(make: Any, with_reboot: bool) -> None:
    """applyMigModeChange fails (fault mig_reboot): ``rebooting`` only with WITH_REBOOT."""
    sim, v1 = make(_fleet({"withReboot": with_reboot}))
    sim.faults.update(mig_reboot=True)
    rv = _label(v1, "all-1g.10gb")  # MIG mode off -> on: a mode change
    _settled(sim)
    states = _states(v1, rv)
    if with_reboot:
        assert states[:3] == ["success", "pending", "rebooting"] and states[-1] == "success"
    else:
        assert states == ["success", "pending", "failed"]
        assert v1.read_node(NODE).metadata.labels[PLUGIN] == "true"  # setState restores


def test_mig_fail_restores_clients(make: Any) -> None:
    sim, v1 = make(_fleet())
    sim.faults.update(mig_fail=True)
    rv = _label(v1, "all-1g.10gb")
    _settled(sim)
    assert _states(v1, rv) == ["success", "pending", "failed"]
    assert v1.read_node(NODE).metadata.labels[PLUGIN] == "true"


def test_allocatable_and_gfd_labels_lag_the_state(make: Any) -> None:
    """The device plugin and GFD restart after ``success``: resources change later."""
    sim, v1 = make(_fleet({"devicePluginRestart": 5}))
    _label(v1, "all-1g.10gb")
    _settled(sim)
    node = v1.read_node(NODE)
    assert node.metadata.labels[STATE] == "success"
    assert "nvidia.com/mig-1g.10gb" not in node.status.allocatable
    time.sleep(0.2)
    assert "nvidia.com/mig-1g.10gb" not in v1.read_node(NODE).status.allocatable
    sim.clock.advance(5)
    wait_until(lambda: "nvidia.com/mig-1g.10gb" in v1.read_node(NODE).status.allocatable)
    node = v1.read_node(NODE)
    assert node.status.allocatable["nvidia.com/mig-1g.10gb"] == "14"
    assert node.metadata.labels["nvidia.com/mig-1g.10gb.count"] == "14"


def test_pods_wait_for_a_missing_custom_configmap(make: Any) -> None:
    """The named ConfigMap does not exist: mig-manager's pod cannot mount it and does not
    run; once it exists the pod starts and reads the current label once."""
    sim, v1 = make(_fleet({"migConfigName": CUSTOM}))
    rv = _label(v1, "custom-a")
    time.sleep(0.2)
    assert _states(v1, rv) == ["success"]  # nobody read it
    v1.create_namespaced_config_map(
        OP_NS, {"metadata": {"name": CUSTOM}, "data": _file({"custom-a": ONE_G})}
    )
    assert sim.wait_for_controllers()  # the operator's informer sees the ConfigMap
    _settled(sim)
    assert _states(v1, rv)[-2:] == ["pending", "success"]


def test_naming_a_custom_config_restarts_mig_manager(make: Any) -> None:
    """A ClusterPolicy change rolls the mig-manager pods: the new ones mount the named
    ConfigMap (fresh at start) and read the current label once."""
    sim, v1 = make(_fleet())
    v1.create_namespaced_config_map(
        OP_NS, {"metadata": {"name": CUSTOM}, "data": _file({"custom-a": ONE_G})}
    )
    rv = _label(v1, "custom-a")
    _settled(sim)
    assert _states(v1, rv) == ["success", "failed"]  # generated configs only
    crd = client.CustomObjectsApi(make_api(sim))
    body = {"spec": {"migManager": {"config": {"name": CUSTOM}}}}
    crd.patch_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy", body)
    assert sim.wait_for_controllers()
    _settled(sim)
    assert _states(v1, rv)[-3:] == ["failed", "pending", "success"]


def test_operator_labels_mig_capable_nodes_all_disabled(make: Any) -> None:
    """gpu-operator nodelabeling_controller.go: a MIG-capable node without the label gets
    ``all-disabled`` (ClusterPolicy ``migManager.config.default``, the CRD default)."""
    _, v1 = make(_fleet())
    v1.patch_node(NODE, {"metadata": {"labels": {CONFIG: None}}})
    wait_until(lambda: v1.read_node(NODE).metadata.labels.get(CONFIG) == "all-disabled")
