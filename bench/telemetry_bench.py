"""Telemetry pages at 5,000 nodes x 8 GPUs: the Prometheus source against agent ingest.

    make bench-telemetry    # = python -m devstack run -- python bench/telemetry_bench.py [...]

One fleet (one cluster, 5,000 nodes of four GPU products, 8 GPUs each, ~14,000 running GPU
pods in 400 team namespaces; bench/telemetry_fleet.py) with the same utilisation values
served two ways, in one run:

  (a) agent ingest: the history as the portal stores agent reports, GpuHistory1h rows for
      the closed hours of the last 24 h and GpuHistory5m rows for the last 3 h (COPY), the
      latest state (GpuState, with the agent's pod attribution in ``processes``), and
      hourly rows of every GPU for the ``--days`` (30) before (28 million rows at 40,000
      GPUs; written by PostgreSQL from the plan, bench/telemetry_fleet.py);
  (b) Prometheus: dcgm-exporter series written as OpenMetrics with devstack/promhistory.py
      and turned into TSDB blocks by promtool before a real Prometheus starts on them; then
      the agent's state and history are deleted, the cluster gets a PrometheusSource row
      and its GpuState is copied from Prometheus (telemetry.promstate.sync_all), so what
      the pages show can only come from Prometheus.

Series resolution: one sample a minute for the last 3 h, one per 5 minutes before (to 24 h
back). The samples run an hour past the build, as a scraping Prometheus would have them
by the time the pages are read (queries never look past "now"): the run must finish
within that (it takes a few minutes).

For each source, first what the beat does every minute (telemetry/summary.py): the
cluster's figures computed from nothing (the first computation, the month's GPU-hours per
namespace and hour included), then again (the steady state, settled hours kept), then once
more rewriting the GPU-hours of the last 4 hours (as one minute in five does), each with
its wall time and its CPU in the portal, PostgreSQL and Prometheus; then the computations
until the GPU-hours before the month are filled back to the hourly retention (a day of
history per computation), so showback of last month reads those rows. Then every page that
reads them, as the admin and as a member of one team (fleet, idle, team, showback of this
month and of the last, My teams, the idle API), N times (``--repeat``, default 5) after a
warm-up, with the cache cleared before each request (cold) and not (warm): latency (p50,
p95), portal / PostgreSQL / Prometheus CPU, SQL queries. Prometheus' query log names the
costliest queries of each computation. The two sources must agree on the idle allocations
(count, GPUs) and on every product's held and busy GPUs; the run fails with a clear
message where they do not, or where a page misses its target (p95 <= 1 s). ``--json FILE``
writes the page figures as make bench-pages does (``page``, ``source``, ``cache``,
``role``, ``p50_ms``, ``p95_ms``, ``queries``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import free_port, fresh_database, log, stop  # noqa: E402
from bench.telemetry_fleet import (  # noqa: E402
    SLOT,
    build_agent,
    build_blocks,
    build_fleet,
    expected,
    plan_fleet,
)

BENCH_DB = "portal_bench_telemetry"
BANNER = b"Telemetry of cluster"  # templates/telemetry/_outages.html: a source did not answer


def start_prometheus(data: Path, workdir: Path) -> tuple[subprocess.Popen, str]:
    config = workdir / "prometheus.yml"
    # The query log says which PromQL the pages spend Prometheus' time on (the report).
    config.write_text(
        f"global:\n  scrape_interval: 1m\n  query_log_file: {workdir / 'query.log'}\n"
    )
    port = free_port()
    log_file = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
        stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(
                f"prometheus exited: {(workdir / 'prometheus.log').read_text()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:  # noqa: S310 - http
                if resp.status == 200:
                    return proc, url
        except OSError:
            pass
        time.sleep(0.3)
    stop(proc)
    raise SystemExit("prometheus did not become ready in 120 s")


# -- measuring ------------------------------------------------------------------------------


def proc_cpu(pid: int) -> float:
    """utime + stime (+ reaped children's) of one process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class PgCpu:
    """CPU of this bench's PostgreSQL server: the postmaster (with the children it reaped,
    parallel workers included) and its live children; other servers on the host are not
    counted."""

    def __init__(self) -> None:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            (backend,) = cur.fetchone()
        self.master = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])

    def __call__(self) -> float:
        total = proc_cpu(self.master)
        tick = os.sysconf("SC_CLK_TCK")
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == self.master:
                    total += (int(fields[11]) + int(fields[12])) / tick
        return total


class QueryLog:
    """Prometheus' query log read from where the last call stopped: the costliest queries
    (by execution time, summed per query text) since then."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def top(self, n: int = 4) -> list[tuple[float, int, str]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
            self.offset = f.tell()
        cost: dict[str, list] = {}
        for line in data.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            query = re.sub(r'=~"[^"]*"', '=~"<hosts>"', entry.get("params", {}).get("query", ""))
            seconds = entry.get("stats", {}).get("timings", {}).get("execTotalTime", 0.0)
            cell = cost.setdefault(query, [0.0, 0])
            cell[0] += seconds
            cell[1] += 1
        ranked = sorted(((s, c, q) for q, (s, c) in cost.items()), reverse=True)
        return ranked[:n]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def measure(client, url: str, repeat: int, prom_pid: int, pg: PgCpu) -> dict:
    """Cold (cache cleared before each request) and warm (as the previous request left
    it) figures of one page."""
    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def one(clear: bool) -> tuple[float, ...]:
        if clear:
            cache.clear()
        p0, g0, c0 = proc_cpu(prom_pid), pg(), time.process_time()
        with CaptureQueriesContext(connection) as ctx:
            t0 = time.perf_counter()
            response = client.get(url)
            wall = time.perf_counter() - t0
        c1, g1, p1 = time.process_time(), pg(), proc_cpu(prom_pid)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")
        banner = BANNER in response.content  # a source did not answer: figures missing
        return wall, c1 - c0, g1 - g0, p1 - p0, len(ctx.captured_queries), banner

    t0 = time.perf_counter()
    client.get(url)  # warm-up: imports, templates
    if time.perf_counter() - t0 > SLOW_S:  # far over its target: once per mode is enough
        repeat = 1
    out = {}
    for mode in ("cold", "warm"):
        runs = [one(mode == "cold") for _ in range(repeat)]
        walls = [r[0] for r in runs]
        out[mode] = {"median": statistics.median(walls), "p95": pct(walls, 95),
                     "cpu": statistics.median(r[1] for r in runs),
                     "pg": statistics.median(r[2] for r in runs),
                     "prom": statistics.median(r[3] for r in runs),
                     "queries": max(r[4] for r in runs),
                     "banner": f"{sum(r[5] for r in runs)}/{len(runs)}"}  # fmt: skip
    return out


def last_month() -> str:
    """The month before this one, as showback's ``?month=`` takes it."""
    from telemetry.showback import parse_month

    _, start, _ = parse_month(None)
    return (start - timedelta(days=1)).strftime("%Y-%m")


def rss_probe(mode: str, *urls: str) -> dict:
    """Peak RSS of a fresh process doing a worker's or a web process's part
    (bench/rss_probe.py)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "rss_probe.py"), mode, *urls],
        stdout=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"rss_probe {mode} failed ({out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def refresh_cost(prom_pid: int, pg: PgCpu, qlog: QueryLog) -> dict:
    """What the beat's computation of the figures costs (telemetry.summary.refresh_all)."""
    from telemetry import summary

    qlog.top()  # skip what came before
    p0, g0, c0 = proc_cpu(prom_pid), pg(), time.process_time()
    t0 = time.perf_counter()
    result = summary.refresh_all()
    wall = time.perf_counter() - t0
    c1, g1, p1 = time.process_time(), pg(), proc_cpu(prom_pid)
    if any(isinstance(v, str) for v in result.values()):
        raise SystemExit(f"the figures were not computed: {result}")
    return {"wall": wall, "cpu": c1 - c0, "pg": g1 - g0, "prom": p1 - p0, "top": qlog.top()}


def backfill(cluster, prom_pid: int, pg: PgCpu, qlog: QueryLog) -> dict:
    """The beat's computations until the GPU-hours before the month are filled back to the
    hourly retention (telemetry.summary._backfill): how many, and what each cost."""
    from telemetry.models import ClusterSummary

    runs = []
    for _ in range(80):
        runs.append(refresh_cost(prom_pid, pg, qlog))
        if ClusterSummary.objects.get(cluster=cluster).data.get("usage_complete"):
            break
    else:
        raise SystemExit("the GPU-hours were not filled back to the retention in 80 runs")
    walls = [r["wall"] for r in runs]
    return {"runs": len(runs), "total": sum(walls), "max": max(walls),
            "median": statistics.median(walls), "pg": sum(r["pg"] for r in runs),
            "prom": sum(r["prom"] for r in runs)}  # fmt: skip


def figures(client) -> dict:
    """What the pages show (one instrumented request each, cache cleared: the warm-up)."""
    from django.core.cache import cache
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    try:
        cache.clear()
        fleet = client.get("/telemetry/")
        idle = client.get("/telemetry/idle/")
    finally:
        teardown_test_environment()
    for r in (fleet, idle):
        if r.status_code != 200:
            raise SystemExit(f"{r.request['PATH_INFO']} answered {r.status_code}")
    banner = [
        f"{r.request['PATH_INFO']}: {line.strip()}"
        for r in (fleet, idle)
        for line in r.content.decode().splitlines()
        if BANNER.decode() in line
    ]
    return {
        "products": {
            r.label: (round(r.held, 2), round(r.busy, 2), r.util_pct)
            for r in fleet.context["products"]
        },
        "gpus_total": fleet.context.get("gpus_total"),
        "idle": len(idle.context["allocations"]),
        "idle_gpus": idle.context["gpus"],
        "banner": banner[:2],
    }


def compare(want: dict, a: dict, b: dict) -> list[str]:
    problems = []
    for name, got in (("(a) agent", a), ("(b) prometheus", b)):
        if got["banner"]:
            problems.append(f"{name}: pages incomplete, {got['banner']}")
    for key in ("idle", "idle_gpus"):
        if a[key] != want[key]:
            problems.append(f"(a) {key} = {a[key]}, the fleet plan says {want[key]}")
        if b[key] != a[key]:
            problems.append(f"sources disagree on {key}: (a) {a[key]}, (b) {b[key]}")
    for product, (held, busy) in want["products"].items():
        ha, ba, _ = a["products"].get(product, (0, 0, None))
        hb, bb, _ = b["products"].get(product, (0, 0, None))
        if abs(ha - held) > 0.5 or abs(ba - busy) > 0.5:
            problems.append(f"(a) {product} held/busy {ha}/{ba}, the fleet plan says {held}/{busy}")
        if abs(hb - ha) > 0.5 or abs(bb - ba) > 0.5:
            problems.append(
                f"sources disagree on {product} held/busy: (a) {ha}/{ba}, (b) {hb}/{bb}"
            )
    return problems


def switch_to_prometheus(cluster, url: str) -> dict:
    """The cluster becomes a Prometheus one: no agent state or history left in PostgreSQL,
    a PrometheusSource row, GpuState copied from Prometheus."""
    from django.db import connection

    from telemetry.models import GpuState, PrometheusSource

    with connection.cursor() as cur:
        cur.execute("TRUNCATE telemetry_gpuhistory5m, telemetry_gpuhistory1h, telemetry_gpustate, "
                    "telemetry_nodetelemetry CASCADE")  # fmt: skip
    PrometheusSource.objects.create(cluster=cluster, url=url, timeout_seconds=60, enabled=True)
    start = time.perf_counter()
    try:
        from telemetry.promstate import sync_all
    except ImportError:
        log("telemetry.promstate.sync_all is not there yet: no GpuState for (b)")
    else:
        sync_all()
    return {"seconds": time.perf_counter() - start, "gpus": GpuState.objects.count()}


PAGES = [  # (name, URL, roles): what an admin or a member of team-000 opens
    ("telemetry fleet", "/telemetry/", ("admin", "member")),
    ("telemetry idle", "/telemetry/idle/", ("admin",)),
    ("telemetry team", "/telemetry/teams/team-000/", ("admin", "member")),
    ("showback", "/telemetry/showback/", ("admin", "member")),
    ("showback last month", "/telemetry/showback/?month={last_month}", ("admin", "member")),
    ("my teams", "/teams/", ("admin", "member")),
    ("api idle allocations", "/api/v1/idle-allocations/", ("admin", "member")),
]
TARGET_S = 1.0
# The computation from nothing (its month of GPU-hours included), a minute after, and a
# minute that rewrites the GPU-hours per namespace and hour.
RUNS = ("first", "steady", "usage")
SLOW_S = 10.0  # a page slower than this is read once per mode (N = 1 in its row)


def report(args, prep: dict, fig_a: dict, fig_b: dict, res: dict) -> list[str]:
    """Print the figures; return the pages that missed their target."""
    print(
        f"\nFleet: {args.nodes} nodes x 8 GPUs, {prep['pods']} running GPU pods, "
        f"{args.teams * 4} team namespaces; {os.cpu_count()} CPUs; N={args.repeat} per figure"
    )
    print(
        f"prepare (a): {prep['a']['rows']} history rows (1h {prep['a']['telemetry_gpuhistory1h']}, "
        f"5m {prep['a']['telemetry_gpuhistory5m']}) + latest state in {prep['a']['seconds']:.1f} s"
    )
    print(f"prepare (b): {prep['b']['samples']} samples -> {prep['b']['blocks']} blocks in "
          f"{prep['b']['seconds']:.1f} s (promtool {prep['b']['promtool_seconds']:.1f} s), "
          f"Prometheus ready in {prep['ready']:.1f} s, GpuState sync "
          f"{prep['sync']['seconds']:.1f} s ({prep['sync']['gpus']} GPUs)")  # fmt: skip
    print("\nThe beat's computation of the figures (telemetry.summary.refresh_all), seconds:")
    print(f"{'source':<16}{'run':<9}{'wall':>8}{'portal CPU':>12}{'PG CPU':>8}{'prom CPU':>10}")
    for src, name in (("a", "(a) agent"), ("b", "(b) prometheus")):
        for run in RUNS:
            r = res[src]["refresh"][run]
            print(f"{name:<16}{run:<9}{r['wall']:>8.2f}{r['cpu']:>12.2f}{r['pg']:>8.2f}"
                  f"{r['prom']:>10.2f}")  # fmt: skip
    print("Filling the GPU-hours before the month (each computation one span more), seconds:")
    for src, name in (("a", "(a) agent"), ("b", "(b) prometheus")):
        b = res[src]["backfill"]
        print(f"  {name:<16}{b['runs']:>3} computations, wall median {b['median']:.2f}, "
              f"max {b['max']:.2f}, total {b['total']:.1f} (PG CPU {b['pg']:.1f}, "
              f"Prometheus CPU {b['prom']:.1f})")  # fmt: skip
    print("\nPeak RSS of one process, MB (fresh process; after django.setup() in brackets):")
    for src, name in (("a", "(a) agent"), ("b", "(b) prometheus")):
        w, p = res[src]["rss"]["worker"], res[src]["rss"]["web"]
        print(f"  {name:<16} worker computing the figures {w['peak_rss_mb']:>5.0f} "
              f"({w['baseline_mb']:.0f}); web serving every page above {p['peak_rss_mb']:>5.0f} "
              f"({p['baseline_mb']:.0f})")  # fmt: skip
    print(f"\n{'page':<22}{'source':<16}{'role':<8}{'cache':<6}{'p50 ms':>8}{'p95 ms':>8}"
          f"{'portal CPU':>11}{'PG CPU':>8}{'prom CPU':>9}{'queries':>8}{'banner':>7}")  # fmt: skip
    missed = []
    for src, name in (("a", "(a) agent"), ("b", "(b) prometheus")):
        for (page, role), modes in res[src]["pages"].items():
            for mode, r in modes.items():
                ok = r["p95"] <= TARGET_S
                if not ok:
                    missed.append(f"{page} ({name}, {role}, {mode})")
                print(f"{page:<22}{name:<16}{role:<8}{mode:<6}{r['median'] * 1000:>8.0f}"
                      f"{r['p95'] * 1000:>8.0f}{r['cpu'] * 1000:>9.0f}ms{r['pg'] * 1000:>6.0f}ms"
                      f"{r['prom'] * 1000:>7.0f}ms{r['queries']:>8}{r['banner']:>7}"
                      f"{'' if ok else '  MISSED'}")  # fmt: skip
    print("\n(b) costliest Prometheus queries of each computation (hosts elided):")
    for run in RUNS:
        for seconds, count, query in res["b"]["refresh"][run]["top"]:
            text = query if len(query) <= 160 else query[:157] + "..."
            print(f"  {run:<7}{seconds:>7.1f} s {count:>3}x  {text}")
    print("\nWhat the pages show: product held / busy GPUs, mean utilisation over 24 h")
    for product in sorted(fig_a["products"]):
        ha, ba, ua = fig_a["products"][product]
        hb, bb, ub = fig_b["products"].get(product, (0, 0, None))
        print(
            f"  {product:<24} (a) {ha:>7.0f} / {ba:>7.0f} {ua or 0:5.1f} %   "
            f"(b) {hb:>7.0f} / {bb:>7.0f} {ub or 0:5.1f} %"
        )
    print(
        f"  idle allocations: (a) {fig_a['idle']} holding {fig_a['idle_gpus']} GPUs, "
        f"(b) {fig_b['idle']} holding {fig_b['idle_gpus']} GPUs"
    )
    return missed


def json_rows(args, res: dict) -> list[dict]:
    return [
        {"page": page, "source": {"a": "agent", "b": "prometheus"}[src], "cache": mode,
         "role": role, "p50_ms": round(r["median"] * 1000, 1),
         "p95_ms": round(r["p95"] * 1000, 1), "queries": r["queries"], "nodes": args.nodes}
        for src in ("a", "b")
        for (page, role), modes in res[src]["pages"].items()
        for mode, r in modes.items()
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--teams", type=int, default=100, help="4 namespaces each")
    parser.add_argument("--repeat", type=int, default=5, help="requests per figure")
    parser.add_argument("--json", help="write the page figures to this file as JSON")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--days", type=int, default=30, help="days of agent history")
    args = parser.parse_args()
    if not (1 <= args.nodes <= 20_000 and 1 <= args.teams <= 1000 and 1 <= args.repeat <= 100
            and 1 <= args.days <= 400):  # fmt: skip
        raise SystemExit("nodes 1..20000, teams 1..1000, repeat 1..100, days 1..400")
    started = time.perf_counter()
    log(f"fresh database {BENCH_DB}")
    os.environ.update(DATABASE_URL=fresh_database(BENCH_DB), DEBUG="false", LOG_LEVEL="WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client, override_settings

    from quotas.models import Membership, Team

    ref = int(time.time()) // SLOT
    gpus, pods = plan_fleet(args.nodes, args.teams, args.seed, ref)
    want = expected(gpus, pods)
    log(f"fleet: {args.nodes} nodes, {len(pods)} pods")
    fleet = build_fleet(gpus, pods, args.nodes, args.teams, ref)
    connection.close()  # the block writers fork
    workdir = Path(tempfile.mkdtemp(prefix="telemetry-bench-"))
    prom = None
    try:
        log("(b) OpenMetrics + promtool blocks")
        blocks = build_blocks(gpus, ref, workdir)
        t0 = time.perf_counter()
        prom, url = start_prometheus(blocks["data"], workdir)
        ready = time.perf_counter() - t0
        qlog = QueryLog(workdir / "query.log")
        log("(a) agent state and history rows")
        agent = build_agent(gpus, fleet["nodes"], ref, days=args.days)
        users = {
            "admin": get_user_model().objects.create(username="bench-admin", is_staff=True),
            "member": get_user_model().objects.create(username="bench-member"),
        }
        Membership.objects.create(team=Team.objects.get(slug="team-000"), user=users["member"])
        clients = {}
        for role, user in users.items():
            clients[role] = Client()
            clients[role].force_login(user)
        pg = PgCpu()
        res, figs = {}, {}
        for src in ("a", "b"):
            if src == "b":
                log("(b) switching the cluster to its Prometheus")
                sync = switch_to_prometheus(fleet["cluster"], url)
            log(f"({src}) the beat's computation of the figures: first, then steady")
            res[src] = {"refresh": {}, "pages": {}}
            for run in RUNS:
                # "usage": a minute whose computation rewrites the GPU-hours per namespace
                # and hour, as one in every TELEMETRY_USAGE_INTERVAL_SECONDS does.
                with override_settings(
                    TELEMETRY_USAGE_INTERVAL_SECONDS=0 if run == "usage" else 300
                ):
                    res[src]["refresh"][run] = refresh_cost(prom.pid, pg, qlog)
                log(f"  {run}: {res[src]['refresh'][run]['wall']:.1f} s")
            res[src]["backfill"] = backfill(fleet["cluster"], prom.pid, pg, qlog)
            log(f"  backfill: {res[src]['backfill']['runs']} computations")
            res[src]["rss"] = {
                "worker": rss_probe("refresh"),
                "web": rss_probe(
                    "pages", *[path.format(last_month=last_month()) for _, path, _ in PAGES]
                ),
            }
            figs[src] = figures(clients["admin"])
            for page, path, roles in PAGES:
                path = path.format(last_month=last_month())
                for role in roles:
                    got = measure(clients[role], path, args.repeat, prom.pid, pg)
                    res[src]["pages"][(page, role)] = got
                    log(f"  {page} as {role}: p95 cold {got['cold']['p95'] * 1000:.0f} ms")
    finally:
        if prom is not None:
            stop(prom)
        shutil.rmtree(workdir, ignore_errors=True)
    prep = {"a": agent, "b": blocks, "ready": ready, "sync": sync, "pods": len(pods)}
    missed = report(args, prep, figs["a"], figs["b"], res)
    if args.json:
        Path(args.json).write_text(json.dumps(json_rows(args, res), indent=1))
        print(f"figures written to {args.json}")
    problems = compare(want, figs["a"], figs["b"])
    problems += [f"p95 over {TARGET_S:g} s: {m}" for m in missed]
    print(f"\nwhole run {time.perf_counter() - started:.0f} s")
    if problems:
        print("FAILED:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("OK: both sources show the same idle allocations and product held/busy GPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
