"""The demo's third cluster, whose GPUs are DRA devices (seed_demo; real control plane only).

Vision and genomics get per-class grants there (whole H100s; A100 MIG 3g.40gb instances);
the portal applies its DeviceClasses and quotas at once (the worker is not up yet); then,
as the cluster's admin would, researchers' pods with claim templates are created
(devstack/demo_dra.py): two within their grants, one asking beyond it, which the quota
refuses. Idempotent: grants only on a fresh cluster row, existing pods are kept.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from inventory.models import Cluster, GpuClass
from inventory.sync import sync_cluster

SLUG = "dra"
PRODUCT = "nvidia.com/gpu.product"
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
    from quotas import dra, services
    from quotas.apply import run_operation
    from quotas.models import Grant, Operation, Team, TeamNamespace

    cluster, _ = Cluster.objects.update_or_create(
        slug=SLUG,
        defaults={
            "name": "DRA cluster (emulated GPUs, Dynamic Resource Allocation)",
            "description": "The third cluster of `make demo`: GPUs are DRA devices and each "
            "GPU class is a DeviceClass the team quotas count.",
            "auth_method": Cluster.AuthMethod.KUBECONFIG,
            "kubeconfig_path": portal_kubeconfig,
            "kubeconfig_context": "",
            "enforcement": Cluster.Enforcement.DRA,
        },
    )
    run = sync_cluster(cluster, trigger="seed")
    if run.error:
        stdout.write(f"first sync of {SLUG} failed ({run.error}); its grants are skipped")
        return cluster
    namespaces = {}
    for slug, namespace, _ in GRANTS:
        namespaces[slug], _ = TeamNamespace.objects.get_or_create(
            cluster=cluster, name=namespace, defaults={"team": Team.objects.get(slug=slug)}
        )
    if not Grant.objects.filter(namespace__cluster=cluster).exists():
        now = timezone.now()
        for slug, _, grants in GRANTS:
            ns = namespaces[slug]
            member = ns.team.memberships.order_by("role").first().user
            for product, resource, amount, days, why in grants:
                cls = GpuClass.objects.get(cluster=cluster, selector={PRODUCT: product})
                data = services.RequestData(
                    team=ns.team, namespace=ns, resource=resource, amount=amount,
                    gpu_class=cls, justification=why,
                    ends_at=now + timedelta(days=days) if days else None,
                )  # fmt: skip
                services.approve(services.submit(member, data), admin)
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
