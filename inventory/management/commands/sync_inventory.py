"""Sync one or all clusters now, in this process, with progress on the terminal."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from inventory.models import Cluster
from inventory.sync import sync_cluster
from inventory.syncdb import SyncBusy


class Command(BaseCommand):
    help = "Sync GPU inventory from Kubernetes now (all enabled clusters, or the named ones)."

    def add_arguments(self, parser):
        parser.add_argument("clusters", nargs="*", help="cluster slugs (default: all enabled)")
        parser.add_argument("--page-size", type=int, default=None)

    def handle(self, *args, **opts):
        qs = Cluster.objects.all()
        if opts["clusters"]:
            qs = qs.filter(slug__in=opts["clusters"])
            missing = set(opts["clusters"]) - set(qs.values_list("slug", flat=True))
            if missing:
                raise CommandError(f"Unknown cluster(s): {', '.join(sorted(missing))}")
        else:
            qs = qs.filter(sync_enabled=True)
        failed = 0
        for cluster in qs:
            self.stdout.write(f"Syncing {cluster.slug} …")
            try:
                run = sync_cluster(
                    cluster, page_size=opts["page_size"], trigger="manual", progress=_progress
                )
            except SyncBusy as err:
                raise CommandError(f"{cluster.slug}: {err}") from err
            sys.stderr.write("\n")
            if run.error:
                failed += 1
                self.stderr.write(self.style.ERROR(f"{cluster.slug}: failed: {run.error}"))
            else:
                self.stdout.write(
                    self.style.SUCCESS(
                        f"{cluster.slug}: {run.nodes_seen} nodes, {run.gpu_pods_seen} GPU pods "
                        f"of {run.pods_seen} pods, {run.rows_written} rows written "
                        f"in {run.duration_ms} ms"
                    )
                )
        if failed:
            raise CommandError(f"{failed} cluster(s) failed to sync")


def _progress(stage: str, done: int, total: int | None) -> None:
    of = f"/{total}" if total else ""
    sys.stderr.write(f"\r  {stage}: {done}{of} listed")
    sys.stderr.flush()
