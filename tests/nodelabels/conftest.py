"""A synced simulated cluster with A100 and H100 nodes, and helpers for label sets."""

from __future__ import annotations

import pytest

from inventory.sync import sync_cluster
from nodelabels import services
from nodelabels.models import LabelOperation
from tests.inventory.test_sync import node_body

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def fleet(sim_api, sim_cluster):
    """gpu-a0, gpu-a1 (A100, a1 time-sliced), gpu-h0 (H100), synced into the inventory."""
    sim_api.create_node(node_body("gpu-a0", product=A100))
    sim_api.create_node(node_body("gpu-a1", product=f"{A100}-SHARED"))
    sim_api.create_node(node_body("gpu-h0", product=H100))
    assert sync_cluster(sim_cluster).status == "succeeded"
    return sim_cluster


def labels(core, name: str) -> dict[str, str]:
    return dict(core.read_node(name).metadata.labels or {})


def run_pending() -> list[str]:
    """Run every due pending operation in this process, as the worker task would."""
    ops = LabelOperation.objects.filter(status="pending").order_by("created_at")
    return [services.run_operation(op.pk) for op in ops]


def make_set(actor, cluster, name="gpu-type", labels=None, **selector):
    if not selector:
        selector = {"gpu_product": A100}
    return services.create_label_set(
        actor,
        cluster=cluster,
        name=name,
        labels=labels or {"example.org/gpu-type": "a100-80gb"},
        **selector,
    )
