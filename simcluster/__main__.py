"""CLI: ``python -m simcluster --fleet FILE --port N`` or ``python -m simcluster generate ...``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path

DEFAULT_FLEET = Path(__file__).parent / "fleets" / "demo.yaml"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "generate":
        from simcluster.fleet import main_generate

        return main_generate(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m simcluster", description=__doc__)
    ap.add_argument("--fleet", default=str(DEFAULT_FLEET), help="fleet YAML/JSON file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    ap.add_argument("--token", help="require 'Authorization: Bearer TOKEN'")
    ap.add_argument("--continue-ttl", type=float, default=300.0, help="continue token TTL (s)")
    ap.add_argument("--mig-step", type=float, default=2.0, help="mig-manager step delay (s)")
    ap.add_argument("--debug", action="store_true", help="log every request")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    log = logging.getLogger("simcluster")
    from simcluster.cluster import SimCluster

    t0 = time.monotonic()
    sim = SimCluster.from_fleet(
        args.fleet, token=args.token, continue_ttl=args.continue_ttl, mig_step_s=args.mig_step
    )
    load_s = time.monotonic() - t0
    url = sim.start(args.host, args.port)
    kc = ""
    if args.kubeconfig:
        kc = str(sim.write_kubeconfig(args.kubeconfig))
    counts = sim.counts()
    log.info(
        "simcluster listening on %s (%d nodes, %d pods, loaded in %.1fs)%s",
        url,
        counts["nodes"],
        counts["pods"],
        load_s,
        f", kubeconfig at {kc}" if kc else "",
    )
    print(f"SIMCLUSTER_URL={url}", flush=True)
    done = threading.Event()

    def _stop(_sig: int, _frame: object) -> None:
        done.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    done.wait()
    log.info("simcluster stopping")
    sim.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
