"""The idle-grant reclaim pass (telemetry/reclaim.py, issue #25 section 2) at fleet size,
against a same-run baseline.

    make bench-reclaim     # or: python -m devstack run -- python bench/reclaim_bench.py [...]

A database with one measured cluster, N team namespaces (default 5,000) each holding an
8-GPU request grant three days old, a pod of 2 GPUs, and the telemetry's hourly usage rows
of the last day (N x 24 rows: a third of the namespaces busy, the rest idle holders), then:

  (1) what the beat's pass reads to judge every namespace (``reclaim.findings``: one query
      each for grants, usage rows, pods and requested GPUs) against judging each namespace
      with its own queries (baseline: what a per-namespace loop costs);
  (2) the beat's pass that warns every idle namespace (``reclaim.run``: a warning, an audit
      row and its notices each), then the next pass, which finds every warning open.

Prints medians and the ratio. Targets: (1) <= 0.2x of the baseline and under 2 s; (2) the
next pass in seconds, far within the beat's interval (600 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import django_on_fresh_database, log  # noqa: E402

BENCH_DB = "portal_bench_reclaim"


def setup(args):
    django_on_fresh_database(BENCH_DB)
    from django.utils import timezone

    from inventory.models import Cluster, GpuPod, NamespaceUsage, Node
    from quotas.models import Grant, ReclaimPolicy, Team, TeamNamespace
    from telemetry import summary
    from telemetry.models import ClusterSummary, PrometheusSource, UsageHour

    now = timezone.now()
    cluster = Cluster.objects.create(slug="bench", name="Bench", auth_method="kubeconfig")
    PrometheusSource.objects.create(cluster=cluster, url="http://127.0.0.1:9")  # measured
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, name=f"n-{i}", gpu_count=8, fingerprint="b", labels={})
        for i in range(max(1, args.namespaces // 4))
    )
    teams = Team.objects.bulk_create(
        Team(slug=f"team-{i}", name=f"Team {i}") for i in range(max(1, args.namespaces // 10))
    )
    namespaces = TeamNamespace.objects.bulk_create(
        TeamNamespace(team=teams[i % len(teams)], cluster=cluster, name=f"ns-{i}")
        for i in range(args.namespaces)
    )
    start = now - timedelta(days=3)
    Grant.objects.bulk_create(
        (Grant(namespace=ns, resource="nvidia.com/gpu", amount=8, starts_at=start,
               start_applied=True, applied_at=start) for ns in namespaces),
        batch_size=5000,
    )  # fmt: skip
    GpuPod.objects.bulk_create(
        (GpuPod(cluster=cluster, namespace=ns.name, name="train", uid=str(uuid.uuid4()),
                node=nodes[i % len(nodes)], node_name=nodes[i % len(nodes)].name,
                phase="Running", requests={"nvidia.com/gpu": 2})
         for i, ns in enumerate(namespaces)),
        batch_size=5000,
    )  # fmt: skip
    NamespaceUsage.objects.bulk_create(
        (NamespaceUsage(cluster=cluster, namespace=ns.name, resource="nvidia.com/gpu",
                        requested=2, pods=1) for ns in namespaces),
        batch_size=5000,
    )  # fmt: skip
    top = now.replace(minute=0, second=0, microsecond=0)
    hours = [top - timedelta(hours=h) for h in range(1, 25)]
    UsageHour.objects.bulk_create(
        (UsageHour(cluster=cluster, namespace=ns.name, hour=hour, allocated=2.0,
                   busy=1.6 if i % 3 == 0 else 0.02)
         for i, ns in enumerate(namespaces) for hour in hours),
        batch_size=10000,
    )  # fmt: skip
    cover = {str(int(h.timestamp())): [2 * len(namespaces), 2.0 * len(namespaces)] for h in hours}
    ClusterSummary.objects.create(cluster=cluster, computed_at=now, data={
        "definition": summary._definition(cluster.pk), "usage_since": hours[-1].timestamp(),
        "usage_cover": cover, "outages": [], "held": [], "products": {}, "hours": {},
        "idle": [],
    })  # fmt: skip
    ReclaimPolicy.objects.create(cluster=cluster, enabled=True, idle_hours=12)
    log(f"{len(namespaces)} namespaces, {len(nodes)} nodes, {len(namespaces) * 24} usage rows")
    return cluster, namespaces


def per_namespace(namespaces, now):
    """Baseline: the same judgement, each namespace with its own queries."""
    from django.db.models import Sum

    from inventory.models import GpuPod
    from quotas.models import Grant
    from telemetry.models import UsageHour

    out = 0
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=12)
    for ns in namespaces:
        granted = sum(Grant.objects.active_at(now).filter(namespace=ns).values_list(
            "amount", flat=True))  # fmt: skip
        peak = 0
        for row in (
            UsageHour.objects.filter(cluster_id=ns.cluster_id, namespace=ns.name, hour__gte=start)
            .values("hour")
            .annotate(a=Sum("allocated"), b=Sum("busy"))
        ):
            if row["a"] and 100 * row["b"] / row["a"] >= 5:
                peak = max(peak, round(row["a"]))
        pods = GpuPod.objects.filter(cluster_id=ns.cluster_id, namespace=ns.name)
        held = sum(int(p.get("nvidia.com/gpu", 0)) for p in pods.values_list("requests", flat=True))
        out += granted - max(held, peak) > 0
    return out


def median_of(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--namespaces", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    _, namespaces = setup(args)
    from django.utils import timezone

    from quotas.models import GrantReclaim
    from telemetry import reclaim

    now = timezone.now()
    t_find, (found, _) = median_of(lambda: reclaim.findings(now), args.repeat)
    t_base, idle = median_of(lambda: per_namespace(namespaces, now), max(1, args.repeat // 2))
    assert len(found) == idle, (len(found), idle)
    log(f"(1) findings: {len(found)} of {len(namespaces)} namespaces idle")
    log(f"    one pass: {t_find * 1000:.0f} ms; per-namespace queries (baseline): "
        f"{t_base * 1000:.0f} ms; ratio {t_find / t_base:.3f}x")  # fmt: skip
    t = time.perf_counter()
    first = reclaim.run(now)
    t_first = time.perf_counter() - t
    t_next, again = median_of(lambda: reclaim.run(now), args.repeat)
    log(f"(2) first pass: {first['warned']} warned in {t_first:.1f} s "
        f"({GrantReclaim.objects.count()} reclaims); next pass: {t_next:.2f} s, "
        f"{again['warned']} warned")  # fmt: skip


if __name__ == "__main__":
    main()
