"""What authentication and RBAC cost per request in the simulated cluster.

The simulator authenticates every request and authorises it with the RBAC objects of
``deploy/kubernetes/rbac.yaml``, as the portal's ServiceAccount meets them. This measures:

1. Over HTTP (the simulator in its own process, keep-alive connections): the same requests
   as the cluster admin (a static token in ``system:masters``: authentication only, RBAC is
   skipped) and as the portal's ServiceAccount (a signed token, then RBAC). The baseline is
   the admin, measured in the same run, interleaved round by round.
2. In process: the authenticator and the authorizer alone, per call.

    make bench-auth                   # or: ... bench/auth_bench.py --rounds 7

Figures are printed; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import urllib3
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import PORTAL_MANIFESTS, PORTAL_SERVICE_ACCOUNT, log  # noqa: E402

FLEET = ROOT / "simcluster" / "fleets" / "demo.yaml"
# (label, path, requests per round)
REQUESTS = [
    ("GET one node", "/api/v1/nodes/a100-00", 1500),
    ("GET one quota", "/api/v1/namespaces/ml-vision/resourcequotas/gpu-quota", 1500),
    ("LIST pods, all namespaces", "/api/v1/pods?limit=500", 600),
]


def _timed(pool: urllib3.HTTPConnectionPool, path: str, token: str, n: int) -> float:
    """Mean seconds per request over ``n`` sequential keep-alive requests."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    t0 = time.perf_counter()
    for _ in range(n):
        r = pool.request("GET", path, headers=headers, preload_content=True)
        if r.status != 200:
            raise SystemExit(f"GET {path}: HTTP {r.status} {r.data[:200]!r}")
    return (time.perf_counter() - t0) / n


def http_figures(rounds: int) -> list[tuple[str, float, float]]:
    from simcluster.testing import start_subprocess

    tmp = Path(tempfile.mkdtemp(prefix="auth-bench-"))
    portal_kc = tmp / "portal.kubeconfig"
    args = []
    for manifest in PORTAL_MANIFESTS:
        args += ["--apply", str(ROOT / manifest)]
    args += ["--serviceaccount-kubeconfig", f"{PORTAL_SERVICE_ACCOUNT}={portal_kc}"]
    args += ["--lease-renew", "0"]  # no heartbeat writes while measuring
    sim = start_subprocess(FLEET, kubeconfig=tmp / "kubeconfig", extra_args=args)
    try:
        portal_token = yaml.safe_load(portal_kc.read_text())["users"][0]["user"]["token"]
        host, port = sim.url.removeprefix("http://").split(":")
        pool = urllib3.HTTPConnectionPool(host, int(port), maxsize=1)
        out = []
        for label, path, n in REQUESTS:
            _timed(pool, path, sim.token, n // 5)  # warm-up both
            _timed(pool, path, portal_token, n // 5)
            admin, portal = [], []
            for _ in range(rounds):
                admin.append(_timed(pool, path, sim.token, n))
                portal.append(_timed(pool, path, portal_token, n))
            out.append((label, statistics.median(admin), statistics.median(portal)))
        return out
    finally:
        sim.stop()


def in_process_figures() -> dict[str, float]:
    """Microseconds per call of the authenticator and the authorizer alone."""
    from simcluster import SimCluster, requestinfo

    sim = SimCluster.from_fleet(FLEET, lease_renew_s=0)
    try:
        for manifest in PORTAL_MANIFESTS:
            sim.apply_file(ROOT / manifest)
        token = sim.issue_token(*PORTAL_SERVICE_ACCOUNT.split("/"), expiration_s=3600)
        header = f"Bearer {token}"
        user = sim.authn.authenticate(header)
        infos = [
            requestinfo.parse("GET", "/api/v1/nodes/a100-00", {}),
            requestinfo.parse("GET", "/api/v1/pods", {"limit": "500"}),
            requestinfo.parse("PATCH", "/api/v1/namespaces/ml-vision/resourcequotas/q", {}),
        ]
        n = 20_000
        figures = {
            "authenticate (verified token)": timeit.timeit(
                lambda: sim.authn.authenticate(header), number=n
            ),
            "request attributes (parse)": timeit.timeit(
                lambda: requestinfo.parse("GET", "/api/v1/nodes/a100-00", {}), number=n
            ),
            "authorize (cached decision)": timeit.timeit(
                lambda: sim.authz.authorize(user, infos[0]), number=n
            ),
        }
        # Distinct object names: every decision is new, the rules are evaluated.
        fresh = [
            requestinfo.parse("GET", f"/api/v1/namespaces/ns{i % 50}/resourcequotas/q{i}", {})
            for i in range(n)
        ]
        it = iter(fresh)
        figures["authorize (rules evaluated)"] = timeit.timeit(
            lambda: sim.authz.authorize(user, next(it)), number=n
        )
        return {k: v / n * 1e6 for k, v in figures.items()}
    finally:
        sim.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    log("in-process authenticator and authorizer")
    micro = in_process_figures()
    log(f"HTTP requests, {args.rounds} interleaved rounds (admin, then portal ServiceAccount)")
    rows = http_figures(args.rounds)
    print("\nPer request over HTTP (median of rounds; baseline: the admin, no RBAC)")
    print(f"{'request':<28}{'admin ms':>10}{'portal SA ms':>14}{'ratio':>8}{'delta us':>10}")
    for label, admin, portal in rows:
        print(
            f"{label:<28}{admin * 1e3:>10.3f}{portal * 1e3:>14.3f}"
            f"{portal / admin:>8.2f}{(portal - admin) * 1e6:>10.1f}"
        )
    print("\nIn process, per call")
    for label, us in micro.items():
        print(f"  {label:<34}{us:>8.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
