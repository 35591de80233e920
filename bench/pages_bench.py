"""Every page and API list an admin or a member opens, at fleet size (issue #23 section 1).

    make bench-pages      # = python -m devstack run -- python bench/pages_bench.py [--json FILE]

For each fleet size (default: 500 nodes, then 5,000 nodes x 8 GPUs with ~145,000 pods,
so query counts can be compared across a tenfold fleet), in a fresh database: the
simulated cluster generates the fleet (bench/sync_bench.py's generator: 3,000 namespaces,
a fifth of the pods asking for GPUs), a full sync reads it in, then 400 teams are made on
the first 400 namespaces, each with a member, a granted request (approved through the
services, as the approval view does: grants, operations, audit rows) and a pending one.
Each page is then read through Django's test client in this process (no network), as the
admin and as a member, 5 times "warm" (the cache as the previous request left it) and 5
times "cold" (the cache cleared before each), and its SQL queries are counted.

Prints a table and, with ``--json FILE``, a list of objects with ``page``, ``source``,
``cache``, ``role``, ``p50_ms``, ``p95_ms``, ``queries`` and ``nodes``. Targets: p95 <= 1 s
for every page and list, <= 300 ms for the fleet, nodes, team and approvals queue pages,
and query counts equal at both sizes.

The telemetry pages (fleet, idle, team, showback of this month and the last, My teams'
usage, the idle API) are timed on both telemetry sources, with 30 days of history, by
bench/telemetry_bench.py (``make bench-telemetry`` alone), which this command runs last
(``--no-telemetry`` skips it): its rows join the JSON with ``source`` ``agent`` or
``prometheus``; the rows above have ``none``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import database_url, fresh_database, log, stop, time_gets  # noqa: E402
from bench.sync_bench import start_sim  # noqa: E402
from devstack import data_dir  # noqa: E402

GPU = "nvidia.com/gpu"
FAST = {"fleet", "nodes", "team", "approvals queue"}  # the 300 ms pages
REPEAT = 5


def pages(node_id: str, team: str, request_id: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, URL, roles that open it)."""
    both, admin = ("admin", "member"), ("admin",)
    return [
        ("fleet", "/", both),
        ("nodes", "/nodes/", both),
        ("node", f"/nodes/{node_id}/", both),
        ("clusters", "/clusters/", both),
        ("cluster", "/clusters/bench/", both),
        ("gpu classes", "/gpu-classes/", both),
        ("team", "/teams/", both),
        ("team waiting", f"/teams/{team}/waiting/", both),
        ("requests", "/requests/", both),
        ("request", f"/requests/{request_id}/", both),
        ("approvals queue", "/admin-queue/", admin),
        ("capacity", "/capacity/", admin),
        ("audit", "/audit/", admin),
        ("api nodes", "/api/v1/nodes/", both),
        ("api clusters", "/api/v1/clusters/", both),
        ("api gpu classes", "/api/v1/gpu-classes/", both),
        ("api teams", "/api/v1/teams/", both),
        ("api quota requests", "/api/v1/quota-requests/", both),
        ("api inventory summary", "/api/v1/inventory/summary/", both),
    ]


def seed(args) -> dict:
    """The teams, members, grants and requests on the synced fleet."""
    from django.contrib.auth import get_user_model

    from inventory.models import Cluster, NamespaceUsage, Node
    from quotas import services
    from quotas.models import Membership, Team, TeamNamespace
    from quotas.services import RequestData

    cluster = Cluster.objects.get(slug="bench")
    User = get_user_model()
    admin = User.objects.create_user("bench-admin", is_staff=True)
    names = sorted(set(NamespaceUsage.objects.filter(cluster=cluster)
                       .values_list("namespace", flat=True)))[: args.teams]  # fmt: skip
    member = None
    granted = pending = None
    for name in names:
        team = Team.objects.create(slug=name, name=name)
        ns = TeamNamespace.objects.create(team=team, cluster=cluster, name=name)
        user = User.objects.create_user(f"member-{name}")
        Membership.objects.create(team=team, user=user)
        member = member or user
        data = RequestData(team=team, namespace=ns, resource=GPU, amount=1,
                           justification="pages benchmark grant")  # fmt: skip
        req = services.submit(user, data)
        try:
            services.approve(req, admin)
            granted = granted or req
        except (services.CapacityError, services.TransitionError):
            pass  # no room: it stays pending, which the queue shows
        pending = services.submit(user, data)
    node = Node.objects.filter(cluster=cluster).exclude(gpu_product="").order_by("name").first()
    return {
        "admin": admin,
        "member": member,
        "node": str(node.pk),
        "team": names[0],
        "request": str((granted or pending).pk),
        "teams": len(names),
    }


def measure(client, url: str, cold: bool) -> dict:
    from django.core.cache import cache

    client.get(url)  # warm-up: imports, templates, the first connection
    return time_gets(client, url, REPEAT, before=cache.clear if cold else None)


def phase(args) -> list[dict]:
    """In its own process, on its own database: sync, seed, measure."""
    os.environ["DATABASE_URL"] = database_url(args.db)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.test import Client

    from inventory.models import Cluster
    from inventory.sync import sync_cluster

    cluster = Cluster.objects.create(slug="bench", name="Bench", auth_method="kubeconfig",
                                     kubeconfig_path=args.kubeconfig)  # fmt: skip
    run = sync_cluster(cluster, trigger="bench")
    if run.error:
        raise SystemExit(f"sync failed: {run.error}")
    log(f"  synced {run.nodes_seen} nodes, {run.pods_seen} pods; seeding {args.teams} teams")
    s = seed(args)
    rows = []
    for name, url, roles in pages(s["node"], s["team"], s["request"]):
        for role in roles:
            client = Client()
            client.force_login(s[role])
            for cache in ("warm", "cold"):
                figures = measure(client, url, cold=cache == "cold")
                rows.append({"page": name, "url": url, "source": "none", "cache": cache,
                             "role": role, "nodes": run.nodes_seen, **figures})  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,5000", help="fleet sizes in nodes")
    parser.add_argument("--teams", type=int, default=400)
    parser.add_argument("--json", help="write the figures to this file as JSON")
    parser.add_argument("--no-telemetry", action="store_true",
                        help="skip the telemetry pages (bench/telemetry_bench.py)")  # fmt: skip
    parser.add_argument("--phase", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(phase(args)))
        return 0

    rows: list[dict] = []
    for nodes in (int(n) for n in args.sizes.split(",")):
        db = f"portal_bench_pages_{nodes}"
        log(f"{nodes} nodes: fresh database {db}")
        fresh_database(db)
        tmp = data_dir() / f"bench-pages-{nodes}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        fleet = argparse.Namespace(nodes=nodes, gpus_per_node=8, pods=nodes * 30,
                                   gpu_pods=nodes * 6, namespaces=3000)  # fmt: skip
        sim, kubeconfig, _admin = start_sim(fleet, tmp)
        try:
            cmd = [sys.executable, __file__, "--phase", "--db", db, "--kubeconfig", kubeconfig,
                   "--teams", str(args.teams)]  # fmt: skip
            out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
            if out.returncode != 0:
                raise SystemExit(f"the {nodes}-node phase failed ({out.returncode})")
            rows += json.loads(out.stdout.strip().splitlines()[-1])
        finally:
            stop_sim(sim)
    failed = report(rows, args.json)
    if args.no_telemetry:
        return failed
    return telemetry(rows, args.json) or failed


def telemetry(rows: list[dict], json_path: str | None) -> int:
    """bench/telemetry_bench.py at 5,000 nodes, its rows added to ``json_path``."""
    log("telemetry pages: bench/telemetry_bench.py")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        code = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "telemetry_bench.py"), "--json", out.name],
            check=False,
        ).returncode
        extra = json.loads(Path(out.name).read_text() or "[]")
    if json_path:
        Path(json_path).write_text(json.dumps(rows + extra, indent=1))
        print(f"figures of both benches written to {json_path}")
    return code


def stop_sim(sim: subprocess.Popen) -> None:
    sim.terminate()
    try:
        sim.wait(30)
    except subprocess.TimeoutExpired:
        stop(sim)


def report(rows: list[dict], json_path: str | None) -> int:
    sizes = sorted({r["nodes"] for r in rows})
    big = sizes[-1]
    print(f"\nPages at {', '.join(str(s) for s in sizes)} nodes (ms; {REPEAT} reads each)")
    print(f"{'page':<24}{'role':<8}{'cache':<6}{'p50':>9}{'p95':>9}{'queries':>9}"
          f"{'queries at ' + str(sizes[0]):>18}{'target':>8}")  # fmt: skip
    small = {(r["page"], r["role"], r["cache"]): r["queries"] for r in rows
             if r["nodes"] == sizes[0]}  # fmt: skip
    missed = []
    for r in (r for r in rows if r["nodes"] == big):
        limit = 300 if r["page"] in FAST else 1000
        flat = small.get((r["page"], r["role"], r["cache"])) == r["queries"]
        ok = r["p95_ms"] <= limit and flat
        if not ok:
            missed.append(f"{r['page']} ({r['role']}, {r['cache']})")
        print(f"{r['page']:<24}{r['role']:<8}{r['cache']:<6}{r['p50_ms']:>9.1f}"
              f"{r['p95_ms']:>9.1f}{r['queries']:>9}"
              f"{small.get((r['page'], r['role'], r['cache']), '-')!s:>18}"
              f"{'OK' if ok else 'MISSED':>8}")  # fmt: skip
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1))
        print(f"figures written to {json_path}")
    print(
        f"targets (p95 <= 1 s, <= 300 ms for {', '.join(sorted(FAST))}; queries flat): "
        + ("OK" if not missed else f"MISSED: {'; '.join(missed)}")
    )
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
