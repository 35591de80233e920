"""``manage.py check_cluster <slug>... | --all``: run the connection preflight and print it.

The same checks as the connect page and the cluster page (inventory/preflight.py); the
result is kept on the cluster like the page's "Run preflight again" (``--no-save`` to only
print). Exit status 1 when any cluster has an error.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from inventory.connect import rerun
from inventory.models import Cluster
from inventory.preflight import ERROR, Report, run_preflight

MARK = {"ok": "[ok]     ", "warning": "[warning]", "error": "[error]  "}


def render(cluster: Cluster, report: Report) -> str:
    """The report as plain text: one line per check, then its fix and missing rules."""
    lines = [f"Cluster {cluster.slug} ({cluster.name}): {report.status}"]
    if report.namespaces:
        lines.append(f"  namespaces checked: {', '.join(report.namespaces)}")
    for f in report.findings:
        lines.append(f"  {MARK.get(f.level, f.level)} {f.check:<13} {f.summary}")
        if f.fix:
            lines.append(f"  {'':<9} {'':<13} fix: {f.fix}")
        if f.check == "permissions":
            for item in f.items:
                if item.get("granted"):
                    continue
                lines.append(f"  {'':<23} missing: {item['key']} ({item['feature']})")
                lines.extend(f"  {'':<25} {line}" for line in item["rule"].splitlines())
    return "\n".join(lines)


class Command(BaseCommand):
    help = "Run the connection preflight of clusters and print it (exit 1 on an error)."

    def add_arguments(self, parser):
        parser.add_argument("clusters", nargs="*", help="cluster slugs")
        parser.add_argument("--all", action="store_true", help="every configured cluster")
        parser.add_argument(
            "--no-save", action="store_true", help="print only; keep the stored result"
        )

    def handle(self, *args, **opts):
        slugs = opts["clusters"]
        if bool(slugs) == bool(opts["all"]):
            raise CommandError("Name one or more clusters, or give --all.")
        qs = Cluster.objects.all() if opts["all"] else Cluster.objects.filter(slug__in=slugs)
        missing = set(slugs) - set(qs.values_list("slug", flat=True))
        if missing:
            raise CommandError(f"Unknown cluster(s): {', '.join(sorted(missing))}")
        failed = 0
        for cluster in qs.order_by("slug"):
            report = run_preflight(cluster) if opts["no_save"] else rerun(cluster, actor=None)
            self.stdout.write(render(cluster, report))
            failed += report.status == ERROR
        if failed:
            self.stderr.write(f"{failed} cluster(s) with preflight errors.")
            sys.exit(1)
