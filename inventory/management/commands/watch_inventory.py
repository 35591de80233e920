"""Watch every enabled cluster's nodes and keep the inventory fresh between full syncs."""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand

from inventory.watch import watch_all


class Command(BaseCommand):
    help = "Watch nodes of every enabled cluster (runs until SIGINT/SIGTERM)."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=int, default=60, help="seconds per watch request")

    def handle(self, *args, **opts):
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        threads = watch_all(stop, timeout_s=opts["timeout"])
        self.stdout.write(f"watching nodes of {len(threads)} cluster(s)")
        stop.wait()
        for thread in threads:
            thread.join(opts["timeout"] + 15)
