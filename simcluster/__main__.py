"""CLI: ``python -m simcluster --fleet FILE --port N`` or ``python -m simcluster generate ...``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

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
    ap.add_argument(
        "--advertise",
        metavar="HOST",
        help="the host name clients reach this server by, when not --host (a compose "
        "service name): used in the kubeconfigs and the TLS certificate",
    )
    ap.add_argument("--token", help="the admin's bearer token (random when not given)")
    ap.add_argument(
        "--apply",
        action="append",
        default=[],
        metavar="FILE",
        help="create or update the objects of FILE as the admin after the fleet loads "
        "(like kubectl apply -f; repeatable, in order)",
    )
    ap.add_argument(
        "--serviceaccount-kubeconfig",
        action="append",
        default=[],
        metavar="NS/NAME=PATH",
        help="issue a 24 h token for ServiceAccount NS/NAME (TokenRequest) and write a "
        "kubeconfig with it to PATH (repeatable; after --apply)",
    )
    ap.add_argument("--continue-ttl", type=float, default=300.0, help="continue token TTL (s)")
    ap.add_argument("--mig-step", type=float, default=2.0, help="mig-manager step delay (s)")
    # the GPU operator emulation (simcluster/gpuoperator.py); unset: the fleet's gpuOperator
    # keys, else the real components' timings (60 s, 5 s, 300 s)
    ap.add_argument(
        "--config-mount-delay",
        type=float,
        help="seconds until a ConfigMap write reaches mig-manager's mounted file",
    )
    ap.add_argument(
        "--device-plugin-restart",
        type=float,
        help="seconds from mig.config.state=success to the new allocatable and GFD labels",
    )
    ap.add_argument(
        "--client-pause-timeout",
        type=float,
        help="seconds mig-manager waits for each kind of GPU client pod to go",
    )
    # controllers (simcluster/controllers.py)
    ap.add_argument("--pod-stop", type=float, default=1.0, help="time pods take to stop (s)")
    ap.add_argument(
        "--lease-renew", type=float, default=10.0, help="node lease renewal interval (s); 0: off"
    )
    ap.add_argument("--quota-sync", type=float, default=0.1, help="quota controller delay (s)")
    ap.add_argument(
        "--namespace-sync", type=float, default=5.0, help="namespace controller delay (s)"
    )
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
        args.fleet,
        token=args.token,
        continue_ttl=args.continue_ttl,
        mig_step_s=args.mig_step,
        config_mount_delay_s=args.config_mount_delay,
        device_plugin_restart_s=args.device_plugin_restart,
        client_pause_timeout_s=args.client_pause_timeout,
        pod_stop_s=args.pod_stop,
        lease_renew_s=args.lease_renew,
        quota_sync_s=args.quota_sync,
        namespace_sync_s=args.namespace_sync,
    )
    load_s = time.monotonic() - t0
    sim.advertise_host = args.advertise or ""
    url = sim.start(args.host, args.port)
    try:
        _install(sim, args.apply, args.serviceaccount_kubeconfig)
    except Exception as exc:  # a bad manifest or a missing ServiceAccount: say which
        log.error("simcluster setup failed: %s", exc)
        sim.stop()
        return 2
    kc = ""
    if args.kubeconfig:  # written last: once it exists, everything above is in place
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


def _install(sim: SimCluster, manifests: list[str], sa_kubeconfigs: list[str]) -> None:
    """``--apply`` the manifests, then write the ``--serviceaccount-kubeconfig`` files."""
    for path in manifests:
        sim.apply_file(path)
    for spec in sa_kubeconfigs:
        ref, sep, path = spec.partition("=")
        ns, slash, name = ref.partition("/")
        if not (sep and slash and ns and name and path):
            raise ValueError(f"--serviceaccount-kubeconfig wants NS/NAME=PATH, got {spec!r}")
        token = sim.issue_token(ns, name, expiration_s=24 * 3600)
        sim.write_kubeconfig(path, token=token, user=name)


if __name__ == "__main__":
    sys.exit(main())
