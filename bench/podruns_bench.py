"""Pod runs (inventory/podruns.py) at fleet size, against same-run baselines.

    make bench-podruns     # or: python -m devstack run -- python bench/podruns_bench.py [...]

A database with one cluster of 5,000 nodes, 30,000 running GPU pods (started over the
last 30 days) and a month of ended runs (default 100,000), then:

  (1) what the sync pays when pods end: recording the runs of N ended pods and deleting
      their rows (``podruns.delete_ended``) against deleting the rows alone, as the sync
      did before runs were kept (baseline); each repeated, alternating, on fresh rows;
  (2) a month of allocated GPU-hours for the whole cluster (``podruns.allocated_hours``,
      aggregated by PostgreSQL) against reading the same rows into Python and summing
      them there (baseline).

Prints medians and the ratios. Targets: (1) <= 3x of the delete alone (a sync with N
ended pods stays well under a second for N = 3,000); (2) <= 1x of the baseline.
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

BENCH_DB = "portal_bench_podruns"


def setup(args):
    django_on_fresh_database(BENCH_DB)
    from django.utils import timezone

    from inventory.bulk import bulk_insert_fast
    from inventory.models import Cluster, GpuClass, Node, PodRun

    now = timezone.now()
    cluster = Cluster.objects.create(slug="bench", name="Bench", auth_method="kubeconfig")
    h100 = GpuClass.objects.create(cluster=cluster, slug="h100", name="H100",
                                   selector={"nvidia.com/gpu.product": "H100"})  # fmt: skip
    bulk_insert_fast(
        Node,
        [
            {"id": uuid.uuid4(), "cluster_id": cluster.pk, "name": f"n-{i}", "labels": {},
             "fingerprint": "b",
             "gpu_count": 8, "gpu_class_id": h100.pk, "paused_operands": [], "taints": [],
             "gpu_replicas": 1, "last_changed_at": now, "first_seen_at": now}
            for i in range(args.nodes)
        ],
    )  # fmt: skip
    nodes = list(Node.objects.filter(cluster=cluster).values_list("id", "name"))
    log(f"{len(nodes)} nodes; {args.pods} running pods; {args.runs} ended runs")
    _pods(cluster, nodes, args.pods, "run", now)
    month = now - timedelta(days=30)
    step = timedelta(days=30) / max(args.runs, 1)
    PodRun.objects.bulk_create(
        (
            PodRun(cluster=cluster, namespace=f"ns-{i % args.namespaces}", name=f"done-{i}",
                   node_name=nodes[i % len(nodes)][1], gpu_class=h100, gpus=1 + i % 8,
                   started_at=month + i * step, ended_at=month + i * step + timedelta(hours=3))
            for i in range(args.runs)
        ),
        batch_size=5000,
    )  # fmt: skip
    return cluster, nodes, now


def _pods(cluster, nodes, count: int, prefix: str, now) -> list:
    from inventory.bulk import bulk_insert_fast
    from inventory.models import GpuPod

    rows = [
        {"cluster_id": cluster.pk, "namespace": f"ns-{i % 3000}", "name": f"{prefix}-{i}",
         "uid": f"u-{prefix}-{i}", "node_id": nodes[i % len(nodes)][0],
         "node_name": nodes[i % len(nodes)][1], "phase": "Running",
         "requests": {"nvidia.com/gpu": 1 + i % 8}, "gpu_selector": {}, "priority_class": "",
         "started_at": now - timedelta(minutes=i % 43200), "first_seen_at": now}
        for i in range(count)
    ]  # fmt: skip
    bulk_insert_fast(GpuPod, rows)
    return list(
        GpuPod.objects.filter(cluster=cluster, name__startswith=f"{prefix}-").values_list(
            "id", flat=True
        )
    )


def bench_ended(cluster, nodes, now, args) -> tuple[list, list]:
    from django.db import transaction

    from inventory import podruns
    from inventory.models import GpuPod

    plain, recorded = [], []
    for i in range(args.repeat):
        ids = _pods(cluster, nodes, args.ended, f"a{i}", now)
        start = time.perf_counter()
        with transaction.atomic():
            GpuPod.objects.filter(id__in=ids).delete()
        plain.append(time.perf_counter() - start)
        ids = _pods(cluster, nodes, args.ended, f"b{i}", now)
        start = time.perf_counter()
        podruns.delete_ended(ids, now)
        recorded.append(time.perf_counter() - start)
    return plain, recorded


def bench_month(cluster, now, args) -> tuple[list, list, float, float]:
    from inventory import podruns
    from inventory.models import GpuPod, PodRun

    start_at = now - timedelta(days=30)
    naive, db = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        total_naive = 0.0
        for gpus, s, e in PodRun.objects.filter(
            cluster=cluster, ended_at__gt=start_at, started_at__lt=now
        ).values_list("gpus", "started_at", "ended_at"):
            total_naive += gpus * (min(e, now) - max(s, start_at)).total_seconds() / 3600
        for req, s in GpuPod.objects.filter(cluster=cluster, started_at__lt=now).values_list(
            "requests", "started_at"
        ):
            total_naive += req["nvidia.com/gpu"] * (now - max(s, start_at)).total_seconds() / 3600
        naive.append(time.perf_counter() - t)
        t = time.perf_counter()
        total_db = sum(podruns.allocated_hours([cluster.pk], start_at, now).values())
        db.append(time.perf_counter() - t)
    return naive, db, total_naive, total_db


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=3000)
    parser.add_argument("--ended", type=int, default=3000, help="pods that end in one sync")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cluster, nodes, now = setup(args)
    log(f"(1) {args.ended} ended pods, {args.repeat} times")
    plain, recorded = bench_ended(cluster, nodes, now, args)
    log(f"(2) a month of allocated GPU-hours, {args.repeat} times")
    naive, db, total_naive, total_db = bench_month(cluster, now, args)
    med = statistics.median
    r1 = med(recorded) / med(plain)
    r2 = med(db) / med(naive)
    print(
        f"\nFleet: {args.nodes} nodes, {args.pods} running GPU pods, {args.runs} ended runs "
        f"in the month; medians of {args.repeat}"
    )
    print(f"(1) {args.ended} pods end in one sync")
    print(f"    baseline: delete their rows      {med(plain) * 1000:>8.1f} ms")
    print(f"    record runs + delete (podruns)   {med(recorded) * 1000:>8.1f} ms = {r1:.2f}x")
    print("(2) a month of allocated GPU-hours, whole cluster")
    print(f"    baseline: rows into Python, sum  {med(naive) * 1000:>8.1f} ms")
    print(f"    allocated_hours (in PostgreSQL)  {med(db) * 1000:>8.1f} ms = {r2:.2f}x")
    same = abs(total_naive - total_db) <= 1e-6 * max(total_naive, 1)
    print(f"    same total: {total_db:,.1f} GPU-hours {'OK' if same else 'DIFFERS'}")
    ok = r1 <= 3 and r2 <= 1 and same
    print(f"targets: (1) <= 3x {'OK' if r1 <= 3 else 'MISSED'}; "
          f"(2) <= 1x {'OK' if r2 <= 1 else 'MISSED'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
