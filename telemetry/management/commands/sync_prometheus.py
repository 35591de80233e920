"""``manage.py sync_prometheus``: copy the latest GPU state from every Prometheus source now
(what the beat task ``telemetry.tasks.sync_prometheus`` does every minute)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from telemetry.promstate import sync_all


class Command(BaseCommand):
    help = "Copy the latest GPU state of Prometheus-sourced clusters (telemetry.promstate)."

    def handle(self, *args, **options) -> None:
        results = sync_all()
        if not results:
            self.stdout.write("no enabled Prometheus sources")
        failed = False
        for slug, r in results.items():
            if isinstance(r, str):
                failed = True
                self.stderr.write(f"{slug}: {r}")
            else:
                extra = f", {len(r.unknown_hosts)} unknown nodes" if r.unknown_hosts else ""
                self.stdout.write(f"{slug}: {r.gpus} GPUs on {r.nodes} nodes{extra}")
        if failed:
            raise SystemExit(1)
