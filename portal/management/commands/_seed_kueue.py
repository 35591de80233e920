"""The demo's second cluster, which enforces GPU classes through Kueue (seed_demo).

Vision and NLP get per-class grants there and share the cohort ``research``; their queues
are applied at once (the worker is not up yet); then, as the cluster's admin would,
researchers' pods and a Job are created (devstack/demo_workloads.py) so the pages show
admitted, borrowing and queued work. Idempotent: grants only on a fresh cluster row,
existing workloads are kept.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from inventory.models import Cluster, GpuClass
from inventory.sync import sync_cluster

SLUG = "research"
PRODUCT = "nvidia.com/gpu.product"
H100, L40S, V100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "Tesla-V100-SXM2-16GB"
# team slug, namespace, [(product, GPUs, days or None, why)]
GRANTS = [
    ("vision", "ml-vision", [(H100, 8, None, "Detection backbone training, standing quota"),
                             (L40S, 4, 14, "Inference benchmarks for the demo day")]),
    ("nlp", "nlp-research", [(H100, 4, 30, "Fine-tuning the 7B model on the new corpus"),
                             (V100, 8, None, "Evaluation sweeps")]),
]  # fmt: skip


def seed(stdout, portal_kubeconfig: str, admin_kubeconfig: str, admin) -> Cluster | None:
    from quotas import services
    from quotas.apply import run_operation
    from quotas.kueue_apply import set_queue_settings
    from quotas.models import Grant, Operation, Team, TeamNamespace

    cluster, _ = Cluster.objects.update_or_create(
        slug=SLUG,
        defaults={
            "name": "Research cluster (emulated GPUs, Kueue)",
            "description": "The second simulated cluster of `make demo`: Kueue enforces "
            "each GPU class.",
            "auth_method": Cluster.AuthMethod.KUBECONFIG,
            "kubeconfig_path": portal_kubeconfig,
            "kubeconfig_context": "",
        },
    )
    run = sync_cluster(cluster, trigger="seed")
    if run.error:
        stdout.write(f"first sync of {SLUG} failed ({run.error}); its grants are skipped")
        return cluster
    Cluster.objects.filter(pk=cluster.pk).update(enforcement=Cluster.Enforcement.KUEUE)
    cluster.refresh_from_db()
    namespaces = {}
    for slug, namespace, _ in GRANTS:
        team = Team.objects.get(slug=slug)
        namespaces[slug], _ = TeamNamespace.objects.get_or_create(
            cluster=cluster, name=namespace, defaults={"team": team}
        )
    if not Grant.objects.filter(namespace__cluster=cluster).exists():
        now = timezone.now()
        for slug, _, grants in GRANTS:
            ns = namespaces[slug]
            member = ns.team.memberships.order_by("role").first().user
            for product, amount, days, why in grants:
                cls = GpuClass.objects.get(cluster=cluster, selector={PRODUCT: product})
                data = services.RequestData(
                    team=ns.team, namespace=ns, resource="nvidia.com/gpu", amount=amount,
                    gpu_class=cls, justification=why,
                    ends_at=now + timedelta(days=days) if days else None,
                )  # fmt: skip
                services.approve(services.submit(member, data), admin)
            set_queue_settings(ns.team, cluster, admin, cohort="research")
    from devstack.demo_workloads import create
    from quotas.tasks import reconcile_quotas

    reconcile_quotas()  # a restarted simulator lost its queues: the drift check re-applies
    for op in Operation.objects.filter(namespace__cluster=cluster, status="pending"):
        run_operation(op.pk)  # the worker starts later; the pods below need the queues
    create(admin_kubeconfig)
    reconcile_quotas()  # reads the queues' status back for the pages
    return cluster
