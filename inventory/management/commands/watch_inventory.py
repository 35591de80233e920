"""Watch every enabled cluster's nodes and pods and keep the inventory fresh between full
syncs (inventory/watch.py)."""

from __future__ import annotations

import signal
import threading
import time

from django.core.management.base import BaseCommand

from inventory.watch import Progress, Watchers
from portal import liveness

# By default a thread is stale when it has neither started a watch nor seen an event for
# this long beyond its watch timeout (the server ends each watch after --timeout seconds).
STALE_GRACE_S = 60


class Command(BaseCommand):
    help = "Watch nodes and pods of every enabled cluster (runs until SIGINT/SIGTERM)."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=int, default=60, help="seconds per watch request")
        parser.add_argument(
            "--heartbeat", type=float, default=10, help="seconds between liveness heartbeats"
        )
        parser.add_argument(
            "--rescan",
            type=float,
            default=30,
            help="seconds between re-reads of the cluster list (connected, disabled, edited)",
        )
        parser.add_argument(
            "--stale-after",
            type=float,
            default=None,
            help=f"seconds without progress of a watch thread before the heartbeat stops "
            f"(default: --timeout + {STALE_GRACE_S})",
        )

    def handle(self, *args, **opts):
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        progress = Progress()
        watchers = Watchers(stop, timeout_s=opts["timeout"], progress=progress)
        watchers.reconcile()
        self.stdout.write(f"watching nodes and pods of {len(watchers)} cluster(s)")
        # Liveness (portal/liveness.py): the heartbeat is touched only while every watch
        # thread is making progress.
        limit = opts["stale_after"] or opts["timeout"] + STALE_GRACE_S
        next_scan = time.monotonic() + opts["rescan"]
        while True:
            if time.monotonic() >= next_scan:
                started, stopped = watchers.reconcile()
                if started or stopped:
                    self.stdout.write(f"watching nodes and pods of {len(watchers)} cluster(s) "
                                      f"(started {started}, stopped {stopped})")  # fmt: skip
                next_scan = time.monotonic() + opts["rescan"]
            if progress.stalest_age() <= limit and watchers.healthy():
                liveness.touch("watcher")
            if stop.wait(min(opts["heartbeat"], opts["rescan"])):
                break
        watchers.close(opts["timeout"] + 15)
