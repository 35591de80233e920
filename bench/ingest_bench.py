"""Telemetry ingest: 5,000 simulated node agents posting 8-GPU reports at a steady rate.

    make bench-ingest     # = python -m devstack run -- python bench/ingest_bench.py

Runs gunicorn (gthread workers) on a fresh database with 5,000 nodes and a node token
each (issued through the ORM), then drives it from this process over loopback with an
open-loop schedule: agent i reports at t0 + i/agents * interval, then every interval
(default 10 s -> 500 reports/s). Each report is an 8-GPU body as the agent sends it
(docs/agent-report.md), with changing utilisation, memory, temperature and power.

The load generator is a small asyncio HTTP/1.1 client on keep-alive connections (a
fixed pool, bounded in count and run time). Latency is measured from each report's
*scheduled* time to its answer, so a server that falls behind shows up as latency
instead of a slower schedule (no coordinated omission); the service-only time is
printed too.

Same-run baselines on the same stack and connections: ``GET /healthz`` (no database) and a
duplicate report (authentication, parsing, validation and the statement, nothing written).
Rows written per report come from pg_stat_user_tables after gunicorn has exited, WAL
bytes from pg_current_wal_lsn().
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    database_url,
    free_port,
    fresh_database,
    log,
    server_cpu_seconds,
    stop,
)

BENCH_DB = "portal_bench_ingest"
TABLES = ["telemetry_agentreport", "telemetry_nodetelemetry", "telemetry_gpustate",
          "telemetry_gpuhistory5m"]  # fmt: skip
MAX_AGENTS = 20_000
MAX_SECONDS = 600


def bench_env(conn_max_age: int) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url(BENCH_DB)
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    env["LOG_LEVEL"] = "WARNING"
    env["DEBUG"] = "false"  # DEBUG keeps every query in memory
    env["DB_CONN_MAX_AGE"] = str(conn_max_age)
    return env


def wait_http(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit("gunicorn did not answer")


# -- fleet ---------------------------------------------------------------------------------


def make_fleet(agents: int) -> list[tuple[str, str]]:
    """5,000 nodes with 8 GPUs and one node token each; returns (node name, raw token)."""
    import secrets

    from inventory.models import Cluster, GpuPod, Node
    from telemetry.models import NodeToken
    from telemetry.tokens import TOKEN_PREFIX, hash_token

    cluster = Cluster.objects.create(slug="bench", name="Bench", auth_method="kubeconfig",
                                     kubeconfig_path="/nonexistent")  # fmt: skip
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, name=f"gpu-{i:05d}", gpu_product="NVIDIA-H100-80GB-HBM3",
             gpu_count=8, fingerprint="bench")
        for i in range(agents)
    )  # fmt: skip
    # Each node runs the pod its reports' processes name (the portal refuses processes of
    # pods the inventory does not place on the node: telemetry/consistency.py).
    GpuPod.objects.bulk_create(
        GpuPod(cluster=cluster, namespace="team-a", name=f"train-{n.name}", node=n,
               node_name=n.name, phase="Running", requests={"nvidia.com/gpu": 8})
        for n in nodes
    )  # fmt: skip
    raws = [TOKEN_PREFIX + secrets.token_urlsafe(30) for _ in nodes]
    NodeToken.objects.bulk_create(
        NodeToken(node=n, name="bench", prefix=raw[:8], key_hash=hash_token(raw))
        for n, raw in zip(nodes, raws, strict=True)
    )
    return [(n.name, raw) for n, raw in zip(nodes, raws, strict=True)]


class Agent:
    """One simulated node: a stable GPU identity, a workload pattern, a token."""

    def __init__(self, name: str, token: str, rng: random.Random):
        self.name, self.rng = name, rng
        self.headers = f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        kind = rng.random()
        self.base = 90 if kind < 0.5 else (2 if kind < 0.8 else 45)  # busy / idle / mixed
        self.topology = [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]
        self.last_body: bytes | None = None

    def body(self) -> bytes:
        rng = self.rng
        gpus = []
        for i in range(8):
            util = max(0, min(100, int(rng.gauss(self.base, 5))))
            gpus.append({
                "index": i, "uuid": f"GPU-{self.name}-{i}", "name": "NVIDIA H100 80GB HBM3",
                "lost": False, "memory_total_mib": 81559,
                "memory_used_mib": 600 + util * 700, "utilization_gpu_pct": util,
                "utilization_memory_pct": util // 2, "temperature_c": 35 + util // 3,
                "power_w": 70.0 + util * 6.1, "power_limit_w": 700.0, "mig_mode": None,
                "mig_devices": [],
                "processes": [{"pid": 1000 + i, "used_memory_mib": util * 700,
                               "pod": f"team-a/train-{self.name}"}] if util > 5 else [],
                "unsupported": [],
            })  # fmt: skip
        ts = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self.last_body = json.dumps({
            "node": self.name, "timestamp": ts, "agent_version": "0.1.0", "interval_s": 10,
            "driver_version": "550.107.02", "cuda_driver_version": 12040, "gpus": gpus,
            "topology": self.topology,
        }, separators=(",", ":")).encode()  # fmt: skip
        return self.last_body


# -- a small HTTP/1.1 keep-alive client ------------------------------------------------------


class Conn:
    def __init__(self, port: int):
        self.port = port
        self.reader = self.writer = None

    async def request(self, head: bytes, body: bytes = b"") -> int:
        for attempt in (1, 2):
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
                self.writer.write(head + body)
                status_line = await self.reader.readline()
                if not status_line:
                    raise ConnectionResetError
                length, close = 0, False
                while True:
                    line = await self.reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"connection" and value.strip().lower() == b"close":
                        close = True
                await self.reader.readexactly(length)
                if close:
                    self.writer.close()
                    self.writer = None
                return int(status_line.split()[1])
            except (ConnectionError, asyncio.IncompleteReadError):
                self.writer = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def post_head(agent: Agent, body: bytes) -> bytes:
    return (f"POST /api/v1/agent/reports/ HTTP/1.1\r\nHost: 127.0.0.1\r\n{agent.headers}"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip


GET_HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def drive(port: int, jobs, seconds: float, rate: float, connections: int) -> dict:
    """Open loop: job k is due at t0 + k/rate; ``jobs(k)`` returns (head, body)."""
    queue: asyncio.Queue = asyncio.Queue(maxsize=connections * 64)
    results: list[tuple[float, float, float]] = []  # (due, start, end) times
    statuses: dict[int, int] = {}
    t0 = time.perf_counter() + 0.05
    total = int(seconds * rate)

    async def producer():
        for k in range(total):
            due = t0 + k / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await queue.put((due, k))
        for _ in range(connections):
            await queue.put(None)

    async def worker():
        conn = Conn(port)
        while (item := await queue.get()) is not None:
            due, k = item
            head, body = jobs(k)
            start = time.perf_counter()
            try:
                status = await conn.request(head, body)
            except OSError:
                status = 0
            end = time.perf_counter()
            results.append((due, start, end))
            statuses[status] = statuses.get(status, 0) + 1
        if conn.writer is not None:
            conn.writer.close()

    started = time.perf_counter()
    await asyncio.gather(producer(), *(worker() for _ in range(connections)))
    wall = time.perf_counter() - started
    total_lat = sorted(end - due for due, _, end in results)
    service = sorted(end - start for _, start, end in results)
    # From the first report's due time to the last answer (wall adds the start-up gap).
    span = max(end for _, _, end in results) - t0 if results else wall
    return {"n": len(results), "wall": wall, "span": span, "statuses": statuses,
            "latency": total_lat, "service": service, "t0": t0, "raw": results}  # fmt: skip


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(p / 100 * len(values)))] * 1000


def describe(name: str, r: dict) -> str:
    return (f"{name:<28} {r['n'] / r['span']:7.1f}/s  p50 {pct(r['latency'], 50):6.1f} ms  "
            f"p95 {pct(r['latency'], 95):6.1f} ms  p99 {pct(r['latency'], 99):6.1f} ms  "
            f"(service p50 {pct(r['service'], 50):.1f} / p95 {pct(r['service'], 95):.1f} ms)  "
            f"{dict(sorted(r['statuses'].items()))}")  # fmt: skip


def table_counters(cur) -> dict[str, int]:
    cur.execute(
        "SELECT relname, n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        [TABLES],
    )
    return dict(cur.fetchall())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=5000)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds per agent")
    parser.add_argument("--seconds", type=float, default=60.0, help="ingest phase length")
    parser.add_argument("--baseline-seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per process")
    parser.add_argument("--connections", type=int, default=24)
    parser.add_argument("--conn-max-age", type=int, default=600)
    args = parser.parse_args()
    if not (0 < args.agents <= MAX_AGENTS and 0 < args.seconds <= MAX_SECONDS):
        raise SystemExit(f"agents 1..{MAX_AGENTS}, seconds up to {MAX_SECONDS}")
    rate = args.agents / args.interval

    log(f"fresh database {BENCH_DB}")
    fresh_database(BENCH_DB)
    env = bench_env(args.conn_max_age)
    os.environ.update(DATABASE_URL=env["DATABASE_URL"], LOG_LEVEL="WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.db import connection

    log(f"{args.agents} nodes and node tokens")
    rng = random.Random(5)
    agents = [Agent(name, raw, rng) for name, raw in make_fleet(args.agents)]
    connection.close()

    tmp = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    port = free_port()
    out = open(tmp / "web.log", "wb")  # noqa: SIM115 - lives as long as the process
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi", "-k", "gthread",
         "-w", str(args.workers), "--threads", str(args.threads), "--keep-alive", "30",
         "--backlog", "2048", "-b", f"127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_http(port)
        log(f"baseline: GET /healthz at {rate:.0f}/s for {args.baseline_seconds:.0f} s")
        healthz = asyncio.run(drive(port, lambda k: (GET_HEALTHZ, b""), args.baseline_seconds,
                                    rate, args.connections))  # fmt: skip
        with connection.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()")
            (lsn0,) = cur.fetchone()
            before = table_counters(cur)
        connection.close()

        def report_job(k: int):
            agent = agents[k % len(agents)]
            body = agent.body()
            return post_head(agent, body), body

        log(f"ingest: {args.agents} agents every {args.interval:g} s = {rate:.0f} reports/s "
            f"for {args.seconds:.0f} s")  # fmt: skip
        cpu0, procs0 = resource.getrusage(resource.RUSAGE_SELF), server_cpu_seconds()
        ingest = asyncio.run(drive(port, report_job, args.seconds, rate, args.connections))
        cpu1, procs1 = resource.getrusage(resource.RUSAGE_SELF), server_cpu_seconds()
        gen_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)

        def duplicate_job(k: int):
            agent = agents[k % len(agents)]
            return post_head(agent, agent.last_body), agent.last_body

        log(f"baseline: duplicate reports at {rate:.0f}/s for {args.baseline_seconds:.0f} s")
        duplicate = asyncio.run(drive(port, duplicate_job, args.baseline_seconds, rate,
                                      args.connections))  # fmt: skip
    finally:
        stop(web)
        out.close()
        log(f"logs in {tmp}")

    time.sleep(1.5)  # backends flush their statistics on exit
    with connection.cursor() as cur:
        after = table_counters(cur)
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn0])
        (wal,) = cur.fetchone()
        cur.execute("SELECT pg_total_relation_size('telemetry_gpuhistory5m'), "
                    "pg_total_relation_size('telemetry_gpustate'), "
                    "(SELECT count(*) FROM telemetry_gpuhistory5m)")  # fmt: skip
        hist_bytes, state_bytes, hist_rows = cur.fetchone()
    accepted = ingest["statuses"].get(202, 0)
    rows = {t: after.get(t, 0) - before.get(t, 0) for t in TABLES}
    # After the first interval every report updates rows (the first one of a node inserts).
    warm = ingest["t0"] + args.interval
    steady = sorted(end - due for due, _, end in ingest["raw"] if due >= warm)

    print(f"\n{args.agents} agents x 8 GPUs every {args.interval:g} s ({rate:.0f} reports/s "
          f"offered), gunicorn gthread {args.workers}x{args.threads}, "
          f"{args.connections} keep-alive connections, {os.cpu_count()} CPUs")  # fmt: skip
    print(describe("baseline GET /healthz", healthz))
    print(describe("baseline duplicate report", duplicate))
    print(describe("ingest (8-GPU reports)", ingest))
    print(f"{'  after the first interval':<28} p50 {pct(steady, 50):6.1f} ms  "
          f"p95 {pct(steady, 95):6.1f} ms  p99 {pct(steady, 99):6.1f} ms")  # fmt: skip
    print(f"sustained: {accepted} accepted in {ingest['span']:.1f} s = "
          f"{accepted / ingest['span']:.1f} reports/s; load generator used "
          f"{gen_cpu:.1f} CPU-s ({gen_cpu / ingest['wall'] * 100:.0f} % of one core)")  # fmt: skip
    per_report = {k: (procs1[k] - procs0[k]) / max(accepted, 1) * 1000 for k in procs0}
    print(f"CPU per report: gunicorn {per_report['gunicorn']:.2f} ms, PostgreSQL "
          f"{per_report['postgres']:.2f} ms, load generator "
          f"{gen_cpu / max(accepted, 1) * 1000:.2f} ms")  # fmt: skip
    per = {t.removeprefix("telemetry_"): round(v / max(accepted, 1), 2) for t, v in rows.items()}
    print(f"rows written per report: {sum(rows.values()) / max(accepted, 1):.2f} {per}; "
          f"WAL {wal / max(accepted, 1) / 1024:.1f} KiB per report")  # fmt: skip
    print(f"storage: {hist_rows} 5-minute points = {hist_bytes / 1e6:.1f} MB with indexes "
          f"({hist_bytes / max(hist_rows, 1):.0f} B/point); latest state "
          f"{state_bytes / 1e6:.1f} MB")  # fmt: skip
    # Kept up: every scheduled report accepted, the last answer within 1 s of the schedule.
    kept_up = accepted == int(args.seconds * rate) and ingest["span"] <= args.seconds + 1
    ok = kept_up and rate >= 500 and pct(steady, 95) < 100
    print(f"targets: >= 500 reports/s sustained (offered {rate:.0f}/s, kept up: "
          f"{'yes' if kept_up else 'no'}), p95 < 100 ms after the first interval: "
          f"{'OK' if ok else 'MISSED'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
