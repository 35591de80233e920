"""The agent DaemonSet of deploy/ steps aside for a MIG change, as the GPU Operator expects
of third-party GPU clients, on the real control plane: the real DaemonSet controller and
kwok run the agent's pods, the GPU emulation (gpuemu/) plays mig-manager.

Real sources followed: NVIDIA/mig-parted ``pkg/mig/reconfigure/reconfigure.go``
(``shutdownKubernetesGPUClients`` sets ``nvidia.com/gpu.deploy.client`` to
``paused-for-mig-change`` when the node has it, ``waitForPodsWithNodeSelector`` waits for
DaemonSet-owned pods whose nodeSelector has that key to leave the node, ``setState``
restores ``true``); NVIDIA/gpu-operator ``controllers/state_manager.go`` (``gpuStateLabels``:
the operator labels GPU nodes ``nvidia.com/gpu.deploy.client=true``, and so does the
simulated fleet); kubernetes/kubernetes
``pkg/controller/daemon`` (a pod whose node no longer matches the nodeSelector is deleted,
and created again once it matches).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import kubesim
from tests.prereqs import need_kubectl
from tests.simcluster.helpers import Kubectl, wait_until

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "overlays" / "production"
NS = "gpu-quota-portal"
NODE = "a100-00"
CLIENT = "nvidia.com/gpu.deploy.client"
STATE = "nvidia.com/mig.config.state"


@pytest.fixture
def cluster(tmp_path):
    node = {
        "name": NODE,
        "labels": {CLIENT: "true"},  # what the GPU Operator sets (state_manager.go)
        "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2,
                "mig": {"strategy": "mixed", "config": "all-disabled"}},
    }  # fmt: skip
    fleet = {"nodes": [node, {"name": "cpu-00"}],
             "gpuOperator": {"configMountDelay": 0.2, "devicePluginRestart": 0.1}}  # fmt: skip
    # As on a fresh cluster: the GPU Operator there, none of the portal's manifests yet.
    cluster = kubesim.start(fleet, tmp_path, portal=False, mig_step_s=0.01)
    yield cluster
    cluster.stop()


def test_agent_pod_leaves_the_node_for_a_mig_change_and_comes_back(cluster, tmp_path):
    kubectl = Kubectl(need_kubectl(), cluster, tmp_path)
    kubectl("apply", "-f", str(ROOT / "deploy/kubernetes/namespace.yaml"))
    # The Secrets docs/install.md has the admin create before the first apply.
    kubectl("-n", NS, "create", "secret", "generic", "gpu-agent-tokens",
            f"--from-literal={NODE}=gqa_token-of-this-node")  # fmt: skip
    kubectl("apply", "-k", str(OVERLAY), timeout=120)
    v1 = kubesim.admin_core_api(cluster)

    def agent_pods(node: str = NODE):
        pods = v1.list_namespaced_pod(NS, label_selector="component=gpu-agent").items
        return [p for p in pods if p.spec.node_name == node and not p.metadata.deletion_timestamp]

    (first,) = wait_until(agent_pods, timeout=30)
    assert first.metadata.owner_references[0].kind == "DaemonSet"
    assert first.spec.node_selector[CLIENT] == "true"
    assert not agent_pods("cpu-00")  # no GPU, no agent
    wait_until(lambda: v1.read_namespaced_pod(first.metadata.name, NS).status.phase == "Running",
               timeout=30)  # fmt: skip

    v1.patch_node(NODE, {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}})
    # mig-manager pauses the clients; the DaemonSet controller takes the agent off the node.
    wait_until(lambda: v1.read_node(NODE).metadata.labels.get(CLIENT) == "paused-for-mig-change",
               timeout=30)  # fmt: skip
    wait_until(lambda: not any(p.metadata.name == first.metadata.name
                               for p in v1.list_namespaced_pod(NS).items),
               timeout=60)  # fmt: skip
    # The change goes through (it would wait up to 5 minutes for a pod still there) ...
    wait_until(lambda: v1.read_node(NODE).metadata.labels.get(STATE) == "success", timeout=60)
    assert v1.read_node(NODE).metadata.labels[CLIENT] == "true"
    # ... and the agent is back on the node, a new pod.
    (second,) = wait_until(agent_pods, timeout=30)
    assert second.metadata.name != first.metadata.name


def test_sigterm_releases_nvml_before_the_agent_exits(tmp_path):
    """What the kubelet does to the paused agent pod: SIGTERM, then the agent shuts NVML
    down (nvmlShutdown) and exits 0 within the pod's grace period."""
    import os
    import signal
    import subprocess
    import sys
    import time

    scenario = tmp_path / "gpus.json"
    scenario.write_text('{"gpus": 2}')
    token = tmp_path / "token"
    token.write_text("gqa_token\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--fake-nvml", str(scenario), "--portal",
         "http://127.0.0.1:9", "--token-file", str(token), "--node", NODE, "--interval", "1"],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(2)  # NVML initialised, a report collected (the portal is unreachable)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "NVML released (nvmlShutdown)" in err, err
