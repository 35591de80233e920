"""The watcher at fleet size (issue #23 section 2), a phase of ``make bench``.

Against the benchmark's cluster, after its syncs: (1) the cluster's and PostgreSQL's CPU
over a quiet window with nothing attached (the same-run baseline of background work);
(2) ``watch_cluster`` started as ``manage.py watch_inventory`` runs it, timed until it says
the data is current (it lists first: a full sync); (3) the same quiet window with the
watcher attached: its own CPU, the cluster's and PostgreSQL's, per 30 s; (4) the time from
a pod created or deleted with the admin's client to its row in the portal, one change at a
time. ``bench/sync_bench.py`` prints the figures against one full list.
"""

from __future__ import annotations

import resource
import statistics
import threading
import time

import psutil

from bench.common import log, p95, peak_rss_mb, server_cpu_seconds


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_cpu(pid: int) -> float:
    """CPU seconds so far of a process and everything under it (the cluster's processes)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def quiet(seconds: float, cluster_pid: int, watcher: bool) -> dict:
    """CPU of this process, the cluster and PostgreSQL over ``seconds`` of no changes."""
    mine, cluster, pg = own_cpu(), tree_cpu(cluster_pid), server_cpu_seconds()["postgres"]
    time.sleep(seconds)  # a benchmark's measured window, not a wait for state
    return {
        "seconds": seconds,
        "watcher_cpu_s": own_cpu() - mine if watcher else 0.0,
        "cluster_cpu_s": tree_cpu(cluster_pid) - cluster,
        "postgres_cpu_s": server_cpu_seconds()["postgres"] - pg,
    }


def gpu_pod(name: str, node: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench-watch"},
        "spec": {
            **({"nodeName": node} if node else {}),
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }  # fmt: skip


def poll(predicate, timeout: float = 60.0) -> float:
    """Seconds until ``predicate()`` holds, polling every 5 ms."""
    start = time.perf_counter()
    while not predicate():
        if time.perf_counter() - start > timeout:
            raise SystemExit(f"not visible within {timeout:.0f} s")
        time.sleep(0.005)
    return time.perf_counter() - start


def run(args) -> dict:
    from django.db.models import F
    from kubernetes import client, config

    from inventory.models import Cluster, GpuPod, NodeResource
    from inventory.watch import Progress, watch_cluster

    cluster = Cluster.objects.get(slug="bench")
    log(f"  quiet {args.quiet:.0f} s, no watcher (baseline of background work)")
    idle = quiet(args.quiet, args.cluster_pid, watcher=False)
    stop, progress = threading.Event(), Progress()
    cpu0, began = own_cpu(), time.perf_counter()
    thread = threading.Thread(
        target=watch_cluster, args=(cluster, stop),
        kwargs={"timeout_s": 60, "progress": progress}, daemon=True,
    )  # fmt: skip
    thread.start()
    poll(lambda: Cluster.objects.get(pk=cluster.pk).is_watched, timeout=3600)
    ready = {"seconds": time.perf_counter() - began, "cpu_s": own_cpu() - cpu0}
    log(f"  watcher current after {ready['seconds']:.1f} s; quiet {args.quiet:.0f} s watched")
    before = progress.events()
    watched = quiet(args.quiet, args.cluster_pid, watcher=True)
    watched["events"] = {
        f"{key} {kind}": n - before.get((key, kind), 0)
        for (key, kind), n in progress.events().items()
        if n - before.get((key, kind), 0)
    }

    config.load_kube_config(args.admin_kubeconfig)
    core = client.CoreV1Api()
    core.create_namespace({"metadata": {"name": "bench-watch"}})
    nodes = list(
        NodeResource.objects.filter(node__cluster=cluster, node__gone_at__isnull=True,
                                    resource="nvidia.com/gpu", allocatable__gt=F("requested"))
        .values_list("node__name", flat=True)[: args.changes]
    )  # fmt: skip
    # on nodes with a GPU free; where none is, unbound (a pending GPU pod is in the portal too)
    nodes += [""] * (args.changes - len(nodes))
    log(f"  {len(nodes)} pods created then deleted, one at a time")
    added, deleted = [], []
    for i, node in enumerate(nodes):
        name = f"watch-{i}"
        start = time.perf_counter()
        core.create_namespaced_pod("bench-watch", gpu_pod(name, node))
        rows = GpuPod.objects.filter(cluster=cluster, namespace="bench-watch", name=name)
        poll(rows.exists)
        added.append(time.perf_counter() - start)
        start = time.perf_counter()
        core.delete_namespaced_pod(name, "bench-watch", grace_period_seconds=0)
        poll(lambda rows=rows: not rows.exists())
        deleted.append(time.perf_counter() - start)
    stop.set()
    thread.join(90)

    def pct(values: list[float]) -> dict:
        return {
            "p50_ms": statistics.median(values) * 1000 if values else 0.0,
            "p95_ms": p95(values) * 1000,
            "max_ms": max(values, default=0.0) * 1000,
        }

    peak_mb = peak_rss_mb()
    return {"idle": idle, "ready": ready, "watched": watched, "peak_rss_mb": peak_mb,
            "added": pct(added), "deleted": pct(deleted), "changes": len(nodes)}  # fmt: skip
