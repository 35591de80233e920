"""The demo's third cluster, whose GPUs are DRA devices (seed_demo; real control plane only).

Vision and genomics get per-class grants there (whole H100s; A100 MIG 3g.40gb instances);
the portal applies its DeviceClasses and quotas at once (the worker is not up yet); then,
as the cluster's admin would, researchers' pods with claim templates are created
(devstack/demo_dra.py): two within their grants, one asking beyond it, which the quota
refuses. Idempotent: grants only on a fresh cluster row, existing pods are kept.
"""

from __future__ import annotations

from inventory.models import Cluster, GpuClass
from inventory.sync import sync_cluster

from ._seed_clusters import PRODUCT, approve_grants, connect

SLUG = "dra"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-3g.40gb"
# team slug, namespace, [(product, resource, amount, days or None, why)]
GRANTS = [
    ("vision", "ml-vision", [(H100, GPU, 6, None, "ViT pretraining on the DRA pool")]),
    ("genomics", "genomics", [(A100, MIG, 4, 30, "AlphaFold batch on MIG slices")]),
]
# namespace, pod, (product, resource), devices: the last asks beyond vision's 6
WORKLOADS = [
    ("ml-vision", "vit-pretrain-0", (H100, GPU), 4),
    ("genomics", "alphafold-batch-0", (A100, MIG), 2),
    ("ml-vision", "vit-sweep-0", (H100, GPU), 4),
]


def seed(stdout, portal_kubeconfig: str, admin_kubeconfig: str, admin) -> Cluster | None:
    from devstack.demo_dra import create
    from quotas import dra
    from quotas.apply import run_operation
    from quotas.models import Operation

    cluster, synced = connect(
        stdout, SLUG, "DRA cluster (emulated GPUs, Dynamic Resource Allocation)",
        "The third cluster of `make demo`: GPUs are DRA devices and each GPU class is a "
        "DeviceClass the team quotas count.",
        portal_kubeconfig, Cluster.Enforcement.DRA,
    )  # fmt: skip
    if not synced:
        return cluster
    approve_grants(cluster, GRANTS, admin)
    from quotas.tasks import reconcile_quotas

    reconcile_quotas()  # a restarted cluster lost its DeviceClasses: the drift check re-applies
    for op in Operation.objects.filter(namespace__cluster=cluster, status="pending"):
        run_operation(op.pk)  # the worker starts later; the claims below need the quotas
    classes = {}
    for _, _, (product, resource), _ in WORKLOADS:
        cls = GpuClass.objects.get(cluster=cluster, selector={PRODUCT: product})
        classes[(product, resource)] = dra.device_class_name(cls, resource)
    create(admin_kubeconfig, [(ns, name, classes[key], n) for ns, name, key, n in WORKLOADS])
    sync_cluster(cluster, trigger="seed")
    return cluster
