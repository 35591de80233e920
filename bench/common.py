"""What both benchmarks need: a fresh, migrated database of their own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


def database_url(name: str) -> str:
    """$DATABASE_URL with the database name (its last path segment) replaced."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    head = parts.path.rsplit("/", 1)[0]
    return urlunsplit(parts._replace(path=f"{head}/{name}"))


def fresh_database(name: str) -> str:
    """Drop and create database ``name`` on $DATABASE_URL's server, migrate it, return its URL."""
    import environ
    import psycopg2

    cfg = environ.Env.db_url_config(os.environ["DATABASE_URL"])
    conn = psycopg2.connect(
        dbname=cfg["NAME"], user=cfg["USER"], password=cfg["PASSWORD"] or None,
        host=cfg["HOST"] or None, port=cfg["PORT"] or None,
    )  # fmt: skip
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    url = database_url(name)
    env = dict(os.environ, DATABASE_URL=url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    return url


def log(msg: str) -> None:
    """Progress on stderr, so stdout stays the benchmark's figures."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM a process group started with start_new_session, SIGKILL after 15 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# The portal's install manifests: the benchmarks, like the tests and the demo, run the
# portal with its own ServiceAccount and exactly this RBAC (so authorisation is measured).
PORTAL_MANIFESTS = ("deploy/kubernetes/namespace.yaml", "deploy/kubernetes/rbac.yaml")
PORTAL_SERVICE_ACCOUNT = "gpu-quota-portal/gpu-quota-portal"


def cluster_kind() -> str:
    """``real`` (the control plane of ``make k8s``) or ``simulator``: ``$BENCH_CLUSTER``, else
    real where its binaries are built. Every benchmark prints it with its figures."""
    wanted = os.environ.get("BENCH_CLUSTER", "").strip()
    if wanted in ("real", "simulator"):
        return wanted
    if wanted:
        raise SystemExit(f"BENCH_CLUSTER={wanted!r}: use real or simulator")
    from devstack import k8sbuild

    return "real" if k8sbuild.installed_dir() is not None else "simulator"


def sim_argv(fleet: Path, kubeconfig: Path, portal_kubeconfig: Path) -> list[str]:
    """The benchmark's cluster (:func:`cluster_kind`): ``python -m devstack.cluster`` or
    ``python -m simcluster``, same arguments. The admin's kubeconfig is written last, so once
    it exists the portal's (a ServiceAccount token) exists too."""
    if cluster_kind() == "real":
        workdir = kubeconfig.parent / "controlplane"
        argv = [sys.executable, "-m", "devstack.cluster", "--fleet", str(fleet),
                "--workdir", str(workdir), "--no-kueue"]  # fmt: skip
    else:
        argv = [sys.executable, "-m", "simcluster", "--fleet", str(fleet), "--port", "0"]
    for manifest in PORTAL_MANIFESTS:
        argv += ["--apply", str(ROOT / manifest)]
    argv += ["--serviceaccount-kubeconfig", f"{PORTAL_SERVICE_ACCOUNT}={portal_kubeconfig}"]
    return [*argv, "--kubeconfig", str(kubeconfig)]


def server_cpu_seconds() -> dict[str, float]:
    """CPU time so far of gunicorn workers and PostgreSQL processes (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    totals = {"gunicorn": 0.0, "postgres": 0.0}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        used = (int(fields[11]) + int(fields[12])) / tick
        if b"gunicorn" in cmd:
            totals["gunicorn"] += used
        elif stat.split("(", 1)[1].startswith("postgres"):
            totals["postgres"] += used
    return totals


def p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile (the largest of fewer than 20 values)."""
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)] if ordered else 0.0


def time_gets(client, url: str, repeat: int, before=None) -> dict:
    """Read ``url`` ``repeat`` times through Django's test client (``before()`` runs before
    each read, e.g. a cache clear): p50 and p95 in ms, and the last read's SQL queries."""
    import statistics
    import time

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    timings, queries = [], 0
    for _ in range(repeat):
        if before is not None:
            before()
        with CaptureQueriesContext(connection) as ctx:
            start = time.perf_counter()
            response = client.get(url)
            timings.append(time.perf_counter() - start)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")
        queries = len(ctx.captured_queries)
    return {"p50_ms": statistics.median(timings) * 1000, "p95_ms": p95(timings) * 1000,
            "queries": queries}  # fmt: skip


def peak_rss_mb() -> float:
    """This process's own peak RSS in MB (VmHWM; ru_maxrss would carry the forking
    parent's peak across exec on Linux, so a small child of a large bench reads large)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def django_on_fresh_database(name: str) -> None:
    """Point Django at a fresh, migrated database ``name`` and set it up (quiet logs)."""
    os.environ["DATABASE_URL"] = fresh_database(name)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
