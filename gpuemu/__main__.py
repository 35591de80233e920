"""``python -m gpuemu --kubeconfig PATH --fleet FILE [--load-only]``.

Loads the fleet through the API (:func:`gpuemu.load`), then runs the GPU Operator,
mig-manager and device-plugin controllers (:class:`gpuemu.Emulator`) until Ctrl-C or
SIGTERM, logging what they do. ``--no-load`` runs the controllers against a cluster that is
already loaded; ``--load-only`` stops after loading. The delays default to the fleet's
``gpuOperator`` keys.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from devstack.kubeapi import KubeError
from gpuemu.emulator import Emulator
from gpuemu.kubeconfig import api_from_kubeconfig
from gpuemu.load import load
from gpuemu.options import Options
from simcluster.fleet import load_fleet


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuemu", description=__doc__.split("\n\n")[1])
    ap.add_argument("--kubeconfig", required=True, help="the cluster admin's kubeconfig")
    ap.add_argument("--context", default="", help="kubeconfig context (default: current)")
    ap.add_argument("--fleet", default="simcluster/fleets/demo.yaml", help="fleet file")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--load-only", action="store_true", help="load the fleet, then exit")
    mode.add_argument("--no-load", action="store_true", help="only run the controllers")
    ap.add_argument("--workers", type=int, default=8, help="threads creating objects")
    ap.add_argument(
        "--schedule-pending",
        action="store_true",
        help="let kube-scheduler place the fleet's unscheduled Pending pods",
    )
    ap.add_argument("--config-mount-delay", type=float, help="s (fleet configMountDelay)")
    ap.add_argument("--device-plugin-restart", type=float, help="s (fleet devicePluginRestart)")
    ap.add_argument("--client-pause-timeout", type=float, help="s (fleet clientPauseTimeout)")
    ap.add_argument("--mig-step", type=float, help="s between mig-manager steps (0.2)")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    log = logging.getLogger("gpuemu")
    fleet = load_fleet(args.fleet)
    api = api_from_kubeconfig(args.kubeconfig, args.context)
    try:
        if not args.no_load:
            report = load(api, fleet, workers=args.workers, hold_pending=not args.schedule_pending)
            print(f"loaded {args.fleet}: {report}", flush=True)
        if args.load_only:
            return 0
        options = Options.from_fleet(
            fleet,
            config_mount_delay_s=args.config_mount_delay,
            device_plugin_restart_s=args.device_plugin_restart,
            client_pause_timeout_s=args.client_pause_timeout,
            mig_step_s=args.mig_step,
        )
        emu = Emulator(api, options).start()
    except (KubeError, OSError, TimeoutError) as exc:
        log.error("%s", exc)
        return 1
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    print("GPU emulation running (Ctrl-C stops it)", flush=True)
    while not done.wait(1.0):
        pass
    emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
