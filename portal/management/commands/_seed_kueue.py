"""The demo's second cluster, which enforces GPU classes through Kueue (seed_demo).

Vision and NLP get per-class grants there and share the cohort ``research``; their queues
are applied at once (the worker is not up yet); then, as the cluster's admin would,
researchers' pods and a Job are created (devstack/demo_workloads.py) so the pages show
admitted, borrowing and queued work. Idempotent: grants only on a fresh cluster row,
existing workloads are kept.
"""

from __future__ import annotations

from decimal import Decimal

from inventory.models import Cluster

from ._seed_clusters import approve_grants, connect

SLUG = "research"
GPU = "nvidia.com/gpu"
H100, L40S, V100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "Tesla-V100-SXM2-16GB"
# team slug, namespace, [(product, resource, amount, days or None, why)]
GRANTS = [
    ("vision", "ml-vision", [(H100, GPU, 8, None, "Detection backbone training, standing quota"),
                             (L40S, GPU, 4, 14, "Inference benchmarks for the demo day")]),
    ("nlp", "nlp-research", [(H100, GPU, 4, 30, "Fine-tuning the 7B model on the new corpus"),
                             (V100, GPU, 8, None, "Evaluation sweeps")]),
]  # fmt: skip


WEIGHTS = {"vision": Decimal("2")}


def seed(stdout, portal_kubeconfig: str, admin_kubeconfig: str, admin) -> Cluster | None:
    from quotas.apply import run_operation
    from quotas.kueue_apply import set_queue_settings
    from quotas.models import Operation

    cluster, synced = connect(
        stdout, SLUG, "Research cluster (emulated GPUs, Kueue)",
        "The second simulated cluster of `make demo`: Kueue enforces each GPU class.",
        portal_kubeconfig, Cluster.Enforcement.KUEUE,
    )  # fmt: skip
    if not synced:
        return cluster
    namespaces, fresh = approve_grants(cluster, GRANTS, admin)
    if fresh:
        for ns in namespaces.values():
            # Vision weighs twice in the cohort's fair sharing (the demo's Kueue shares
            # fairly, devstack/demo.py); nothing is preempted (the pages show borrowing).
            weight = WEIGHTS.get(ns.team.slug)
            set_queue_settings(ns.team, cluster, admin, cohort="research", fair_weight=weight)
    from devstack.demo_workloads import create
    from quotas.tasks import reconcile_quotas

    reconcile_quotas()  # a restarted simulator lost its queues: the drift check re-applies
    for op in Operation.objects.filter(namespace__cluster=cluster, status="pending"):
        run_operation(op.pk)  # the worker starts later; the pods below need the queues
    create(admin_kubeconfig)
    reconcile_quotas()  # reads the queues' status back for the pages
    return cluster
