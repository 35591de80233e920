"""What a flood of wrong passwords costs the web server, before and after the lockout.

    python -m devstack run -- python bench/signin_bench.py      # ARGS: --flood 60 --parallel 20

Runs gunicorn as the image does (sync workers, default 3) on a fresh database, with the
real password hasher (PBKDF2, Django's default cost: the tests' fast hasher is not used),
and drives ``POST /api/v1/auth/token/`` from this process:

1. baseline: a good sign-in (right password, its own account and address), alone;
2. before any lockout: ``--flood`` wrong-password attempts, ``--parallel`` at a time,
   each for another account from another address, so none is locked out and each runs
   the hasher (what an attacker spreading guesses gets, per attempt);
3. after the lockout: the attacker's address and its target account are locked out (the
   limit of failures reached), then ``--locked-flood`` more wrong-password attempts,
   ``--parallel`` at a time, from there: refused before the hasher runs.

During 2 and 3 one client signs in with the right password over and over; its latency is
compared with the baseline. CPU is that of the gunicorn and PostgreSQL processes (from
/proc), per attempt. Addresses are sent as X-Forwarded-For with ``TRUSTED_PROXIES`` set to
the loopback address (this process plays the proxy); the token rate limit is raised out
of the way, so the lockout is what is measured. docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import urllib3

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

BENCH_DB = "portal_bench_signin"
TOKEN = "/api/v1/auth/token/"
GOOD_USER, GOOD_PASSWORD, GOOD_ADDRESS = "good", "right-password-1", "192.0.2.50"
VICTIM, VICTIM_PASSWORD, ATTACKER = "victim", "the-victims-password-1", "203.0.113.1"


def cpu_seconds() -> float:
    """CPU time so far of the gunicorn and PostgreSQL processes together."""
    return sum(server_cpu_seconds().values())


def wait_http(pool: urllib3.HTTPConnectionPool, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pool.request("GET", "/healthz", retries=False).status == 200:
                return
        except urllib3.exceptions.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("gunicorn did not answer")


def attempt(pool, username: str, password: str, address: str) -> tuple[int, float]:
    body = json.dumps({"username": username, "password": password}).encode()
    headers = {"Content-Type": "application/json", "X-Forwarded-For": address}
    t0 = time.perf_counter()
    r = pool.request("POST", TOKEN, body=body, headers=headers, retries=False, timeout=300)
    return r.status, time.perf_counter() - t0


def good_login(pool) -> float:
    status, seconds = attempt(pool, GOOD_USER, GOOD_PASSWORD, GOOD_ADDRESS)
    if status != 201:
        raise SystemExit(f"good sign-in answered {status}")
    return seconds


def flood(pool, jobs: list[tuple[str, str, str]], parallel: int, probe_cpu: float) -> dict:
    """Run the attempts ``parallel`` at a time while one client signs in again and again."""
    done = threading.Event()
    probes: list[float] = []

    def probe() -> None:
        while not done.is_set():
            probes.append(good_login(pool))
            time.sleep(0.1)

    prober = threading.Thread(target=probe)
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    prober.start()
    with ThreadPoolExecutor(parallel) as ex:
        results = list(ex.map(lambda job: attempt(pool, *job), jobs))
    wall = time.perf_counter() - t0
    done.set()
    prober.join()
    # The good sign-ins' own hashing is taken off (measured alone in the baseline).
    cpu = cpu_seconds() - cpu0 - len(probes) * probe_cpu
    statuses: dict[int, int] = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "n": len(jobs),
        "wall": wall,
        "cpu": cpu,
        "latency": statistics.median(s for _, s in results),
        "statuses": statuses,
        "probes": probes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=60, help="attempts before the lockout")
    parser.add_argument("--locked-flood", type=int, default=1000, help="attempts after it")
    parser.add_argument("--parallel", type=int, default=20)
    parser.add_argument("--workers", type=int, default=3, help="gunicorn sync workers")
    parser.add_argument("--baseline", type=int, default=5, help="good sign-ins alone")
    args = parser.parse_args()
    if not (0 < args.flood <= 1000 and 0 < args.locked_flood <= 20000 and args.parallel > 0):
        raise SystemExit("flood 1..1000, locked-flood 1..20000")

    log(f"fresh database {BENCH_DB}")
    fresh_database(BENCH_DB)
    env = dict(os.environ, DATABASE_URL=database_url(BENCH_DB), LOG_LEVEL="ERROR")
    env.update(DEBUG="false", TRUSTED_PROXIES="127.0.0.1")
    env["TOKEN_THROTTLE_RATE"] = "1000000/min"  # out of the way: the lockout is measured
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.update(env)
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection

    users = get_user_model().objects
    users.create_user(GOOD_USER, password=GOOD_PASSWORD)
    users.create_user(VICTIM, password=VICTIM_PASSWORD)
    connection.close()
    limit = settings.AXES_FAILURE_LIMIT
    hasher = settings.PASSWORD_HASHERS[0].rsplit(".", 1)[1]

    tmp = Path(tempfile.mkdtemp(prefix="signin-bench-"))
    port = free_port()
    out = open(tmp / "web.log", "wb")  # noqa: SIM115 - lives as long as the process
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi", "--workers", str(args.workers),
         "--timeout", "300", "-b", f"127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=args.parallel + 2, block=True)
    try:
        wait_http(pool)
        good_login(pool)  # warm up: imports, connections
        log(f"baseline: {args.baseline} good sign-ins alone")
        cpu0 = cpu_seconds()
        baseline = [good_login(pool) for _ in range(args.baseline)]
        baseline_cpu = (cpu_seconds() - cpu0) / args.baseline

        log(f"before any lockout: {args.flood} wrong passwords, {args.parallel} at a time")
        spread = [(f"guess-{i}", "wrong", f"198.51.{i // 250}.{i % 250 + 1}")
                  for i in range(args.flood)]  # fmt: skip
        before = flood(pool, spread, args.parallel, baseline_cpu)

        log(f"locking out {VICTIM} from {ATTACKER}: {limit} wrong passwords")
        statuses = [attempt(pool, VICTIM, f"wrong-{i}", ATTACKER)[0] for i in range(limit + 1)]
        if statuses[-1] != 429:
            raise SystemExit(f"no lockout after {limit} failures: {statuses}")
        log(f"after the lockout: {args.locked_flood} wrong passwords, {args.parallel} at a time")
        locked = [(VICTIM, f"flood-{i}", ATTACKER) for i in range(args.locked_flood)]
        after = flood(pool, locked, args.parallel, baseline_cpu)
    finally:
        stop(web)
        out.close()
        log(f"logs in {tmp}")

    base = statistics.median(baseline)
    print(f"\nPOST {TOKEN}, gunicorn {args.workers} sync workers, {os.cpu_count()} CPUs, "
          f"hasher {hasher}, lockout after {limit} failures, {args.parallel} parallel")  # fmt: skip
    print(f"baseline good sign-in alone: {base * 1000:7.0f} ms, "
          f"{baseline_cpu:.3f} CPU-s per sign-in")  # fmt: skip
    rows = [("before lockout (spread)", before), ("after lockout (locked)", after)]
    for label, r in rows:
        per = r["cpu"] / r["n"]
        probe = statistics.median(r["probes"]) if r["probes"] else float("nan")
        print(f"{label:<24} {r['n']:5d} attempts {r['statuses']}: {per:.4f} CPU-s and "
              f"{r['wall'] / r['n'] * 1000:7.1f} ms wall per attempt, median answer "
              f"{r['latency'] * 1000:7.0f} ms; good sign-in meanwhile {probe * 1000:7.0f} ms "
              f"(x{probe / base:.2f} baseline, {len(r['probes'])} sign-ins)")  # fmt: skip
    ratio = (before["cpu"] / before["n"]) / max(after["cpu"] / after["n"], 1e-9)
    print(f"CPU per attempt, before / after lockout: x{ratio:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
