"""The per-test reset of the real control plane (devstack/etcdreset.py, ControlPlane.reset)."""

from __future__ import annotations

import time

from devstack.kubeapi import wait_for
from tests import kubesim

A100_NODE = {"name": "a100-0", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8}}


def test_a_reset_leaves_no_daemonset_pods_for_nodes_that_are_gone(tmp_path) -> None:
    """The GPU Operator's DaemonSets stay in the baseline; the node they ran a pod on does
    not. The DaemonSet controller, told of the pod's deletion before the node's, makes the
    pod again for a node that no longer exists (and deletes it itself a moment later): no
    test after a reset may see that pod."""
    cluster = kubesim.start({"nodes": [A100_NODE]}, tmp_path)
    try:
        api = cluster.api
        # the operator labels the GPU node, the DaemonSet controller gives it its operands
        wait_for(lambda: api.list("pods", "gpu-operator"), timeout=30)
        cluster.plane.reset(cluster.baseline.name)
        seen: list[str] = []
        window_ends = time.monotonic() + 1.0  # longer than the reset waits for quiet
        while not seen and time.monotonic() < window_ends:
            seen = [p["metadata"]["name"] for p in api.list("pods", "gpu-operator")]
            time.sleep(0.05)
        assert seen == []
        assert api.list("daemonsets", "gpu-operator")  # the baseline's DaemonSets stay
    finally:
        cluster.stop()
