"""Shared bits of the monitoring tests: the shipped PrometheusRule and its groups."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.utils import timezone

from inventory.models import Cluster
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user
from tests.telemetry.telebuilders import fill_5m, make_telemetry

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "monitoring" / "prometheus-rules.yaml"
DASHBOARDS = ROOT / "deploy" / "monitoring" / "grafana"
GPU = "nvidia.com/gpu"


def prometheus_rule() -> dict:
    return yaml.safe_load(RULES.read_text())


def alerts() -> dict[str, dict]:
    """{alert name: rule} of every group."""
    return {
        r["alert"]: r
        for group in prometheus_rule()["spec"]["groups"]
        for r in group["rules"]
        if "alert" in r
    }


def records() -> dict[str, dict]:
    """{recorded series name: rule} of every group."""
    return {
        r["record"]: r
        for group in prometheus_rule()["spec"]["groups"]
        for r in group["rules"]
        if "record" in r
    }


@pytest.fixture
def rules_file(tmp_path) -> Path:
    """spec.groups of the PrometheusRule as a plain Prometheus rules file."""
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": prometheus_rule()["spec"]["groups"]}))
    return path


def seed_portal():
    """A fleet every alert has something to say about: cluster ``prod`` stale (last sync
    2 hours ago) and ``fresh`` not; ml-vision uses 4 of 5 GPUs with a 2-GPU grant ending in
    3 days, ml-nlp 1 of 4; 2 idle GPUs in ml-vision, 1 in ml-nlp; a100-00's last MIG run
    failed. Returns (the expiring grant, ml-vision)."""
    now = timezone.now()
    make_cluster("fresh", sync_status=Cluster.SyncStatus.OK, last_success_at=now)
    prod = make_cluster(
        "prod", sync_status=Cluster.SyncStatus.OK, last_success_at=now - timedelta(hours=2)
    )
    vision = make_namespace(make_team("vision"), prod, "ml-vision")
    nlp = make_namespace(make_team("nlp"), prod, "ml-nlp")
    # vision uses 4 of 5 GPUs and a 3-day grant ends; nlp uses 1 of 4.
    for ns, used, hard in ((vision, 4, 5), (nlp, 1, 4)):
        ns.quota_status = {
            "hard": {f"requests.{GPU}": str(hard)},
            "used": {f"requests.{GPU}": str(used)},
        }
        ns.save()
    expiring = make_grant(vision, 2, days=3)
    make_grant(vision, 3, days=60)  # ends, but not soon
    make_grant(nlp, 4, days=3)  # ends soon, low use
    # Idle: ml-vision holds 2 GPUs idle for 3 hours (threshold 2), ml-nlp 1.
    node = make_node(prod, "gpu-a", gpus=3, resources={GPU: (3, 3, 3)})
    old = now - timedelta(days=1)
    gpus = make_telemetry(node, 3)
    holders = ["ml-vision/train-0", "ml-vision/train-0", "ml-nlp/eval-0"]
    for g, pod in zip(gpus, holders, strict=True):
        g.processes = [{"pid": 1, "used_memory_mib": 100, "pod": pod}]
        g.save()
        fill_5m(g, now - timedelta(hours=3), now, 1)
    make_pod(node, "train-0", "ml-vision", 2, k8s_created_at=old)
    make_pod(node, "eval-0", "ml-nlp", 1, k8s_created_at=old)
    # MIG: a100-00's last run failed; a100-01 failed, then succeeded (2 failed in all).
    from mig.models import MigRequest

    user = make_user("al")
    mig = {GPU: (6, 6, 0), "nvidia.com/mig-3g.40gb": (4, 4, 1)}
    a, b = make_node(prod, "a100-00", resources=mig), make_node(prod, "a100-01", resources=mig)
    for target, status, minutes in ((a, "failed", 30), (b, "failed", 60), (b, "succeeded", 5)):
        MigRequest.objects.create(
            team=vision.team, namespace=vision, cluster=prod, product="A100-80GB",
            layout={"3g.40gb": 2}, gpus=1, justification="x" * 20, requested_by=user,
            status=status, node=target, drain_policy="evict", config_name="portal-x",
            updated_at=now - timedelta(minutes=minutes),
        )  # fmt: skip
    from inventory.classes import refresh

    refresh(prod)  # the per-product GPU classes (portal_gpu_class_*)
    return expiring, vision
