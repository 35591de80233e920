"""Approvals under contention: 1,000 requests from 50 teams, 4 admin clients, a live worker.

    make bench-quota      # = python -m devstack run -- python bench/quota_bench.py

Runs gunicorn (the REST API), a Celery worker, the watcher (``manage.py watch_inventory``,
which confirms applies from the quotas' events) and the cluster (60 nodes x 8 GPUs = 480
GPUs, about a tenth of what is asked for) as separate processes on a fresh database.
50 team members file 1,000 requests over the API (1-8 GPUs each); 4 admin clients then
approve them concurrently over the API, oldest first. Reports:
  - decisions/s and approvals/s (approved + refused for capacity, over wall time);
  - approve-to-quota-visible latency p50/p95: from the approval's commit to the worker
    having applied the namespace's ResourceQuota and read it back from the cluster
    (the request's `applied` transition), and where it goes; target p95 <= 1 s;
  - overcommit: the largest total of grants at any instant versus allocatable, checked
    in the database and in the cluster's ResourceQuotas; must be zero.
Baseline in the same run: the mean time of `GET /api/v1/quota-requests/{id}/` (a read
through the same stack), so the approval cost can be read relative to it.

    make bench-quota ARGS="--classes 6"

splits the same nodes into 6 GPU products (H200, H100, A100, L40S, L4, V100: one GPU class
each once the sync has derived them); every request names one class at random (from
`GET /api/v1/gpu-classes/`) and overcommit is checked per class too: each class's peak of
grants in the database must stay within its own allocatable.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from queue import Empty, Queue

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    cluster_kind,
    database_url,
    free_port,
    fresh_database,
    log,
    sim_argv,
    stop,
)

BENCH_DB = "portal_bench_quota"
GPU = "nvidia.com/gpu"
# --classes N takes the first N: one node group (and so one derived GPU class) each.
PRODUCTS = (
    "NVIDIA-H200",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-L40S",
    "NVIDIA-L4",
    "Tesla-V100-SXM2-16GB",
)


def node_groups(nodes: int, classes: int) -> list[dict]:
    """``nodes`` nodes of 8 GPUs in ``classes`` products, split as evenly as possible
    (the first groups take the remainder); one class: the single H100 pool."""
    if classes == 1:
        return [{"name": "gpu-{i:03d}", "count": nodes,
                 "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}}]  # fmt: skip
    groups, start = [], 0
    for k, product in enumerate(PRODUCTS[:classes]):
        count = nodes // classes + (k < nodes % classes)
        groups.append({"name": "gpu-{i:03d}", "start": start, "count": count,
                       "gpu": {"product": product, "count": 8}})  # fmt: skip
        start += count
    return groups


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url(BENCH_DB)
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    env["LOG_LEVEL"] = "WARNING"
    env["TOKEN_THROTTLE_RATE"] = "100000/min"
    return env


def start(cmd: list[str], env: dict[str, str], name: str, logdir: Path) -> subprocess.Popen:
    out = open(logdir / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def wait_http(url: str, timeout: float = 60) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not answer")


def class_slugs(session, base: str, token: str) -> list[str]:
    """The bench cluster's GPU classes, as a member lists them over the API."""
    r = session.get(f"{base}/api/v1/gpu-classes/", params={"cluster": "bench", "page_size": 500},
                    headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    if r.status_code != 200:
        raise SystemExit(f"listing GPU classes failed: {r.status_code} {r.text[:300]}")
    body = r.json()
    return sorted(c["slug"] for c in (body["results"] if isinstance(body, dict) else body))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--teams", type=int, default=50)
    parser.add_argument("--admins", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=60)
    parser.add_argument(
        "--classes", type=int, default=1, choices=range(1, len(PRODUCTS) + 1),
        help="GPU products the nodes are split into, one GPU class each; requests name a "
        "random class (default 1: one H100 pool, requests for any class)",
    )  # fmt: skip
    parser.add_argument(
        "--worker-concurrency", type=int, default=2,
        help="Celery worker processes (default 2, as make demo runs)",
    )  # fmt: skip
    args = parser.parse_args()

    log(f"fresh database {BENCH_DB}")
    fresh_database(BENCH_DB)
    env = bench_env()
    os.environ.update(DATABASE_URL=env["DATABASE_URL"], LOG_LEVEL="WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    import requests

    tmp = Path(tempfile.mkdtemp(prefix="quota-bench-"))
    fleet = {
        "nodes": node_groups(args.nodes, args.classes),
        "namespaces": [{"name": "gpu-operator"}]
        + [{"name": f"team-{t:02d}"} for t in range(args.teams)],
    }  # fmt: skip
    (tmp / "fleet.json").write_text(json.dumps(fleet))
    kubeconfig = tmp / "kubeconfig"
    portal_kubeconfig = tmp / "portal.kubeconfig"
    port = free_port()
    procs = [
        start(sim_argv(tmp / "fleet.json", kubeconfig, portal_kubeconfig), env, "sim", tmp),
        start([sys.executable, "-m", "gunicorn", "portal.wsgi", "-w", "3", "-b",
               f"127.0.0.1:{port}"], env, "web", tmp),
        start([sys.executable, "-m", "celery", "-A", "portal", "worker", "-c",
               str(args.worker_concurrency), "-l",
               os.environ.get("BENCH_WORKER_LOG_LEVEL", "WARNING"), "--without-gossip",
               "--without-mingle"], env, "worker", tmp),
        # as deployed: the watcher keeps the cluster current and confirms applies
        start([sys.executable, "manage.py", "watch_inventory", "--rescan", "1"], env, "watcher",
              tmp),
    ]  # fmt: skip
    try:
        return run(args, port, (kubeconfig, portal_kubeconfig), requests)
    finally:
        for proc in procs:
            stop(proc)
        log(f"logs in {tmp}")


def run(args, port: int, kubeconfigs: tuple[Path, Path], requests) -> int:
    """``kubeconfigs``: the cluster admin's (to check the cluster) and the portal's."""
    kubeconfig, portal_kubeconfig = kubeconfigs
    from django.contrib.auth import get_user_model
    from kubernetes import client, config

    from inventory.models import Cluster, GpuClass
    from inventory.sync import sync_cluster
    from portal.models import ApiToken
    from quotas.capacity import allocatable, limit, peak, peak_reserved
    from quotas.models import Grant, Membership, QuotaRequest, Team, TeamNamespace

    deadline = time.monotonic() + 180  # the real control plane starts in 15-30 s
    while not kubeconfig.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the {cluster_kind()} cluster did not start")
        time.sleep(0.2)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/healthz")
    cluster = Cluster.objects.create(slug="bench", name="Bench", auth_method="kubeconfig",
                                     kubeconfig_path=str(portal_kubeconfig))  # fmt: skip
    assert sync_cluster(cluster).status == "succeeded"
    while not Cluster.objects.get(pk=cluster.pk).is_watched:  # the watcher took it over
        if time.monotonic() > deadline + 60:
            raise SystemExit("the watcher did not start watching the cluster")
        time.sleep(0.2)
    User = get_user_model()
    admins = [User.objects.create_user(f"admin{i}", is_staff=True) for i in range(args.admins)]
    members, teams = [], []
    for t in range(args.teams):
        team = Team.objects.create(slug=f"team-{t:02d}", name=f"Team {t}")
        TeamNamespace.objects.create(team=team, cluster=cluster, name=f"team-{t:02d}")
        user = User.objects.create_user(f"member{t}")
        Membership.objects.create(team=team, user=user)
        teams.append(team)
        members.append(ApiToken.issue(user, "bench")[1])
    admin_tokens = [ApiToken.issue(a, "bench")[1] for a in admins]
    session = requests.Session()
    slugs = class_slugs(session, base, members[0]) if args.classes > 1 else []
    if args.classes > 1 and len(slugs) != args.classes:
        raise SystemExit(f"the sync derived {len(slugs)} GPU classes, not {args.classes}")

    log(f"filing {args.requests} requests from {args.teams} teams over the API")
    rng = random.Random(7)
    # Its own generator: amounts and windows stay those of the single-pool run.
    class_rng = random.Random(11)
    ids: list[str] = []
    for i in range(args.requests):
        t = i % args.teams
        days = rng.choice([None, 7, 14, 30])
        body = {
            "team": f"team-{t:02d}",
            "namespace": f"team-{t:02d}",
            "resource": GPU,
            "amount": rng.randint(1, 8),
            "justification": f"bench request number {i}",
        }
        if days:
            body["ends_at"] = (datetime.now(UTC) + timedelta(days=days)).isoformat()
        if slugs:
            body["gpu_class"] = class_rng.choice(slugs)
        r = session.post(base + "/api/v1/quota-requests/", json=body,
                         headers={"Authorization": f"Bearer {members[t]}"})  # fmt: skip
        if r.status_code != 201:
            raise SystemExit(f"filing failed: {r.status_code} {r.text[:300]}")
        ids.append(r.json()["id"])

    # Same-run baseline: a read of one request through the same stack.
    reads = []
    for rid in ids[:100]:
        t0 = time.perf_counter()
        session.get(f"{base}/api/v1/quota-requests/{rid}/",
                    headers={"Authorization": f"Bearer {admin_tokens[0]}"})  # fmt: skip
        reads.append(time.perf_counter() - t0)

    log(f"{args.admins} admin clients approving")
    queue: Queue[str] = Queue()
    for rid in ids:
        queue.put(rid)
    outcomes: dict[str, str] = {}
    call_times: list[float] = []
    lock = threading.Lock()

    def admin_client(token: str) -> None:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        while True:
            try:
                rid = queue.get_nowait()
            except Empty:
                return
            t0 = time.perf_counter()
            r = s.post(f"{base}/api/v1/quota-requests/{rid}/approve/", json={})
            elapsed = time.perf_counter() - t0
            kind = {200: "approved", 400: "refused"}.get(r.status_code, f"http {r.status_code}")
            with lock:
                outcomes[rid] = kind
                call_times.append(elapsed)

    started = time.perf_counter()
    threads = [threading.Thread(target=admin_client, args=(tok,)) for tok in admin_tokens]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - started
    approved = [rid for rid, kind in outcomes.items() if kind == "approved"]
    errors = {kind for kind in outcomes.values() if kind.startswith("http")}

    log(f"waiting for {len(approved)} quotas to be applied")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        left = QuotaRequest.objects.filter(pk__in=approved).exclude(status="applied").count()
        if not left:
            break
        time.sleep(0.5)
    latencies, waits, works = [], [], []
    for req in QuotaRequest.objects.filter(pk__in=approved).prefetch_related(
        "events", "operations__attempt_log"
    ):
        applied = [e.at for e in req.events.all() if e.to_status == "applied"]
        if applied:
            latencies.append((applied[0] - req.decided_at).total_seconds())
            # where it goes: the commit until a worker claims the operation (dispatch and
            # queue), and the claim until applied (the apply and the quota controller)
            starts = [a.started_at for op in req.operations.all() if op.reason == "approval"
                      for a in op.attempt_log.all()]  # fmt: skip
            if starts:
                waits.append((min(starts) - req.decided_at).total_seconds())
                works.append((applied[0] - min(starts)).total_seconds())
    missing = len(approved) - len(latencies)

    # Overcommit, in the database and in the cluster.
    now = datetime.now(UTC)
    db_peak = peak_reserved(cluster, GPU, now, None)
    cap = limit(cluster, GPU)
    config.load_kube_config(config_file=str(kubeconfig))
    core = client.CoreV1Api()
    in_cluster = sum(
        int(q.spec.hard.get(f"requests.{GPU}", 0))
        for q in core.list_resource_quota_for_all_namespaces().items
        if q.metadata.name == "gpu-portal-quota"
    )
    granted_now = sum(Grant.objects.active_at(now).values_list("amount", flat=True))

    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [0] * 99
    per_class = []
    for cls in GpuClass.objects.filter(cluster=cluster, slug__in=slugs).order_by("slug"):
        grants = Grant.objects.filter(namespace__cluster=cluster, resource=GPU, gpu_class=cls)
        windows = grants.overlapping(now, None).values_list("starts_at", "ends_at", "amount")
        alloc = allocatable(cluster, GPU, cls)
        per_class.append((cls.slug, alloc, peak(windows, now, None), grants.count()))
    classes_over = sum(max(p - alloc, 0) for _, alloc, p, _ in per_class)
    in_classes = f" in {len(slugs)} GPU classes" if slugs else ""

    print(f"\nCluster: {cluster_kind()}")
    print(f"{args.requests} requests from {args.teams} teams, {args.admins} admin clients, "
          f"{cap} GPUs allocatable{in_classes}")  # fmt: skip
    print(f"baseline GET /quota-requests/{{id}}/: mean {statistics.mean(reads) * 1000:.1f} ms")
    print(f"approve calls: mean {statistics.mean(call_times) * 1000:.1f} ms "
          f"({statistics.mean(call_times) / statistics.mean(reads):.1f}x the read)")  # fmt: skip
    print(f"decisions: {len(outcomes)} in {wall:.2f} s = {len(outcomes) / wall:.1f}/s; "
          f"approved {len(approved)} ({len(approved) / wall:.1f}/s), "
          f"refused for capacity {sum(1 for k in outcomes.values() if k == 'refused')}"
          + (f", errors {sorted(errors)}" if errors else ""))  # fmt: skip
    print(f"approve-to-quota-visible: p50 {q[49]:.2f} s, p95 {q[94]:.2f} s, "
          f"max {max(latencies, default=0):.2f} s ({missing} not applied)")  # fmt: skip
    for label, values in (("commit -> a worker claims it", waits),
                          ("claimed -> applied (status.hard)", works)):  # fmt: skip
        part = statistics.quantiles(values, n=100) if len(values) >= 2 else [0] * 99
        print(f"  {label:<34} p50 {part[49]:.2f} s, p95 {part[94]:.2f} s")
    print(f"overcommit: peak granted {db_peak} of {cap} (db), active grants {granted_now}, "
          f"sum of applied quotas {in_cluster} (cluster) -> "
          f"{max(db_peak - cap, in_cluster - cap, 0)} over")  # fmt: skip
    if per_class:
        print(f"  {'class':<24} {'allocatable':>11} {'peak granted':>12} {'over':>5} "
              f"{'approved':>8}")  # fmt: skip
    for slug, alloc, class_peak, approved_n in per_class:
        print(f"  {slug:<24} {alloc:>11} {class_peak:>12} {max(class_peak - alloc, 0):>5} "
              f"{approved_n:>8}")  # fmt: skip
    ok = not errors and missing == 0 and q[94] <= 1.0 and db_peak <= cap and in_cluster <= cap
    ok = ok and classes_over == 0
    print("targets: p95 <= 1 s, zero overcommit, no errors:", "OK" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
