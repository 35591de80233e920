"""GFD label and pod-request parsing (GPU-FACTS.md sections 1-2)."""

import pytest

from inventory.parsing import (
    node_fingerprint,
    parse_gpu_pod,
    parse_node,
    parse_quantity,
    pod_gpu_requests,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", 4), (4, 4), ("2k", 2000), ("1Ki", 1024), ("500m", 1), ("1500m", 2), ("0", 0), (None, 0)],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


def _node(labels, capacity, allocatable=None, unschedulable=False, ready="True"):
    return {
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "labels": labels,
            "creationTimestamp": "2026-01-02T03:04:05Z",
        },
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable if allocatable is not None else capacity,
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_parse_node_reads_gfd_labels_and_gpu_resources_only():
    facts = parse_node(
        _node(
            {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": "81920",
                "nvidia.com/gpu.family": "ampere",
                "nvidia.com/gpu.compute.major": "8",
                "nvidia.com/gpu.compute.minor": "0",
                "nvidia.com/cuda.driver-version.full": "550.107.02",
                "nvidia.com/mig.capable": "true",
                "nvidia.com/mig.strategy": "mixed",
                "nvidia.com/mig.config": "all-1g.10gb",
                "nvidia.com/mig.config.state": "success",
                "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
                "nvidia.com/gpu.deploy.dcgm": "true",
            },
            {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"},
            {
                "cpu": "95",
                "memory": "1000Gi",
                "nvidia.com/gpu": "0",
                "nvidia.com/mig-1g.10gb": "49",
            },
        )
    )
    assert facts.gpu_product == "NVIDIA-A100-SXM4-80GB"
    assert (facts.gpu_count, facts.gpu_memory_mib, facts.gpu_family) == (8, 81920, "ampere")
    assert facts.compute_capability == "8.0"
    assert facts.driver_version == "550.107.02"
    assert facts.mig_capable and facts.mig_strategy == "mixed"
    assert (facts.mig_config, facts.mig_config_state) == ("all-1g.10gb", "success")
    assert facts.resources == {"nvidia.com/gpu": (0, 0), "nvidia.com/mig-1g.10gb": (56, 49)}
    assert facts.paused_operands == ["device-plugin"]
    assert facts.ready and not facts.unschedulable


def test_time_sliced_node_and_fingerprint_changes_with_content():
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-L40S-SHARED",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    gpu = {"nvidia.com/gpu": "16"}
    a = _node(labels, gpu)
    facts = parse_node(a)
    assert (facts.sharing_strategy, facts.gpu_replicas) == ("time-slicing", 4)
    heartbeat = _node(labels, gpu)
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-30T10:00:00Z"
    assert node_fingerprint(a) == node_fingerprint(_node(labels, gpu))
    assert node_fingerprint(a) == node_fingerprint(heartbeat)  # heartbeats are noise
    changed = [
        _node(labels, gpu, {"nvidia.com/gpu": "12"}),
        _node(labels, gpu, unschedulable=True),
        _node(labels, gpu, ready="False"),
        _node({**labels, "nvidia.com/mig.config": "all-1g.10gb"}, gpu),
    ]
    prints = {node_fingerprint(n) for n in changed}
    assert len(prints) == len(changed) and node_fingerprint(a) not in prints


def test_cpu_node_has_no_gpu_facts():
    facts = parse_node(_node({}, {"cpu": "32"}, ready="False"))
    assert facts.gpu_product == "" and facts.resources == {} and not facts.ready


def test_effective_pod_request_is_max_of_init_and_sum_of_containers_plus_overhead():
    gpu = "nvidia.com/gpu"
    spec = {
        "initContainers": [{"resources": {"requests": {gpu: "3"}}}],
        "containers": [
            {"resources": {"requests": {gpu: "1"}}},
            {"resources": {"limits": {gpu: "1"}}},  # limits stand in for missing requests
            {"resources": {"requests": {"cpu": "2"}}},
        ],
    }
    assert pod_gpu_requests(spec) == {gpu: 3}
    spec["containers"].append({"resources": {"requests": {gpu: "2", "nvidia.com/mig-1g.10gb": 1}}})
    spec["overhead"] = {gpu: "1"}
    assert pod_gpu_requests(spec) == {gpu: 5, "nvidia.com/mig-1g.10gb": 1}


@pytest.mark.parametrize(
    ("phase", "kept"),
    [("Running", True), ("Pending", True), ("Succeeded", False), ("Failed", False)],
)
def test_parse_gpu_pod_keeps_non_terminal_gpu_pods(phase, kept):
    pod = {
        "metadata": {"namespace": "ml", "name": "p"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": 2}}}],
        },
        "status": {"phase": phase},
    }
    facts = parse_gpu_pod(pod)
    assert (facts is not None) is kept
    if kept:
        assert facts.requests == {"nvidia.com/gpu": 2} and facts.node_name == "n1"


def test_cpu_pod_is_not_a_gpu_pod():
    pod = {
        "metadata": {"namespace": "ml", "name": "p"},
        "spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"},
    }
    assert parse_gpu_pod(pod) is None


@pytest.mark.parametrize(
    ("label", "base"),
    [
        ("NVIDIA-L40S-SHARED", "NVIDIA-L40S"),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-INVALID", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA-H200", "NVIDIA-H200"),
    ],
)
def test_base_product_strips_every_gfd_sharing_suffix(label, base):
    from inventory.models import base_product

    assert base_product(label) == base
