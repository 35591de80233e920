"""Shared set-up for the MIG coordinator tests against the simulated cluster.

The simulator plays the GPU Operator (simcluster/gpuoperator.py) and mig-manager
(simcluster/migmanager.py) as NVIDIA/gpu-operator v26.7.0 and NVIDIA/mig-parted behave;
the portal talks to it as its ServiceAccount with deploy/kubernetes/rbac.yaml
(tests/kubesim.py). Runs are driven with ``coordinator.advance`` (one step per call, as
the re-enqueuing Celery task would).
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from inventory.models import Node
from inventory.sync import sync_cluster
from mig import coordinator, services
from mig.models import MigRequest
from tests.quotas.builders import make_namespace, make_team, make_user

PORTAL_CM = "gpu-quota-portal-mig-config"
A100 = {"product": "NVIDIA-A100-SXM4-80GB", "count": 8, "mig": {"strategy": "mixed",
        "config": "all-disabled"}}  # fmt: skip
FOREIGN = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "site-custom": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
}}  # fmt: skip
LAYOUT = {"3g.40gb": 2}
CONFIG = "portal-a100-80gb-3g.40gbx2-d0-1"
# The operator as the demo runs it: mig-manager reads the portal's ConfigMap; the delays
# short (the tests that need a minute use the sim clock). The operand pods take a couple of
# seconds to go on the real control plane (the DaemonSet controller deletes them, kwok
# stops them a second later), well within the pause timeout.
OPERATOR = {"namespace": "gpu-operator", "migStrategy": "mixed", "migConfigName": PORTAL_CM,
            "withReboot": False, "configMountDelay": 0.2, "devicePluginRestart": 0.05,
            "clientPauseTimeout": 60}  # fmt: skip


def fleet(operator: dict | bool | None = None, portal_cm: dict | None = FOREIGN) -> dict:
    """Two MIG-capable A100 nodes; ``operator`` overrides keys of :data:`OPERATOR` (False:
    no GPU Operator); ``portal_cm``: the portal's ConfigMap already there (None: absent)."""
    spec: dict[str, Any] = {
        "nodes": [{"name": "a100-{i:02d}", "count": 2, "cpu": 64, "memory": "512Gi",
                   "gpu": A100}],
        "namespaces": [{"name": "gpu-operator"}, {"name": "ml-vision"}],
        "gpuOperator": False if operator is False else {**OPERATOR, **(operator or {})},
        "configmaps": [],
    }  # fmt: skip
    if portal_cm is not None:
        spec["configmaps"].append({"name": PORTAL_CM, "namespace": "gpu-operator",
                                   "data": {"config.yaml": yaml.safe_dump(portal_cm)}})  # fmt: skip
    return spec


def start(tmp_path, spec: dict, step_s: float = 0.05, simulator: bool = False):
    """The real control plane with the GPU emulation (``simulator``: the Python simulator,
    for the tests that advance its clock)."""
    from tests import kubesim

    if simulator:
        return kubesim.start_simulator(spec, tmp_path, mig_step_s=step_s)
    return kubesim.start(spec, tmp_path, mig_step_s=step_s)


def make_world(sim, settings):
    """Cluster synced into inventory; a team with a namespace; an admin and a member."""
    from inventory.models import Cluster

    settings.MIG_POLL_SECONDS = 0.02
    settings.MIG_CONFIG_MOUNT_SECONDS = 0.3  # a little more than the sim's 0.2
    cluster = Cluster.objects.create(
        slug="sim", name="Simulated", auth_method=Cluster.AuthMethod.KUBECONFIG,
        kubeconfig_path=str(sim.kubeconfig_path),
    )  # fmt: skip
    sync_cluster(cluster)
    admin = make_user("ada", staff=True)
    member = make_user("mo")
    team = make_team("vision", members=[member])
    ns = make_namespace(team, cluster, "ml-vision")
    return type("World", (), {"cluster": cluster, "admin": admin, "member": member,
                              "team": team, "ns": ns, "sim": sim})  # fmt: skip


def admin_core(sim):
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(sim.admin_kubeconfig_path)))


def request(w, layout=LAYOUT, gpus=2) -> MigRequest:
    data = services.MigRequestData(
        team=w.team, namespace=w.ns, product="NVIDIA-A100-SXM4-80GB", layout=layout,
        gpus=gpus, justification="Inference fleet needs half-GPU slices.",
    )  # fmt: skip
    return services.submit(w.member, data)


def node(w, name: str = "a100-00") -> Node:
    return Node.objects.get(cluster=w.cluster, name=name)


def approve(w, req, node_name="a100-00", policy="evict") -> MigRequest:
    return services.approve(req, w.admin, node=node(w, node_name), drain_policy=policy)


def run(req: MigRequest, timeout: float = 15.0, until=None) -> MigRequest:
    """Advance step by step until the run ends (or ``until(req)`` holds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = coordinator.advance(req.pk)
        if result in ("succeeded", "failed"):
            break
        if until is not None:
            req.refresh_from_db()
            if until(req):
                break
        if result == "waiting":
            time.sleep(0.02)
    req.refresh_from_db()
    return req


def steps(req: MigRequest) -> dict[str, str]:
    return dict(req.steps.order_by("position").values_list("name", "status"))


def step(req: MigRequest, name: str):
    return req.steps.get(name=name)


def gpu_pod(core, name: str, node_name: str, labels=None) -> None:
    core.create_namespaced_pod("ml-vision", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "cuda",
                 "resources": {"requests": {"nvidia.com/gpu": "1"},
                               "limits": {"nvidia.com/gpu": "1"}}}]},
    })  # fmt: skip


def configs(core, name: str = PORTAL_CM) -> dict:
    cm = core.read_namespaced_config_map(name, "gpu-operator")
    return yaml.safe_load(cm.data["config.yaml"])["mig-configs"]
