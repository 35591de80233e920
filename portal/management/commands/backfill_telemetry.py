"""``manage.py backfill_telemetry --days 7``: the demo fleet's past week of GPU history.

Reads the fake agent fleet's tokens file (``seed_demo`` writes it to
``DATA_DIR/agent-tokens.json``) and stores the reports its agents would have sent over
the last days (``telemetry.backfill``). Safe to run again: buckets that hold data stay.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inventory.models import Cluster
from telemetry.backfill import backfill


class Command(BaseCommand):
    help = "Backfill the demo agent fleet's GPU telemetry history (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=float, default=7)
        parser.add_argument("--cluster", default="demo", help="cluster slug")
        parser.add_argument("--tokens", default="", help="fleet tokens file (default: DATA_DIR)")
        parser.add_argument("--seed", type=int, default=0, help="the fleet's --seed")

    def handle(self, *args, **opts):
        path = Path(opts["tokens"] or settings.DATA_DIR / "agent-tokens.json")
        if not path.exists():
            raise CommandError(f"no fleet tokens file at {path} (run seed_demo first)")
        if not 0 < opts["days"] <= 30:
            raise CommandError("--days: more than 0, at most 30 (the 5-minute retention)")
        cluster = Cluster.objects.filter(slug=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {opts['cluster']!r}")
        done = backfill(cluster, json.loads(path.read_text()), days=opts["days"], seed=opts["seed"])
        self.stdout.write(
            f"Telemetry backfill of {cluster.slug}: {done.reports} report(s) for "
            f"{done.nodes} node(s) over {opts['days']:g} day(s), {done.skipped_buckets} "
            f"bucket(s) already stored, {done.hourly_rows} hourly row(s), {done.seconds:.1f} s"
        )
