"""``manage.py demo_prometheus_source``: point the demo cluster's telemetry at the demo's
Prometheus, or back at the agents (``TELEMETRY_SOURCE`` of ``make demo``, devstack/demo.py).

``--url URL`` creates or updates the cluster's ``PrometheusSource`` (enabled, no cluster
label: the demo Prometheus sees one cluster). ``--disable`` turns the row off, so an agent
run on the same data folder reads the agents' reports again (the row stays, with whatever
an admin set on it, for the next Prometheus run). Not audited: it is the demo's set-up,
like ``seed_demo``.

``--write-pods FILE`` writes which synced pod holds which fake GPU, for the fake fleet's
``--pods`` option: dcgm-exporter labels a series with the pod that holds the device (from
the kubelet's pod-resources API); the demo's fake exporters have no kubelet, so this file
stands in for it. Whole GPUs go to the running pods in name order from GPU 0 (``seed_demo``
makes exactly those GPUs busy), MIG slices to the pods requesting their profile.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from inventory.models import GPU_RESOURCE, Cluster, GpuPod
from telemetry.models_source import PrometheusSource

MIG_PREFIX = "nvidia.com/mig-"


class Command(BaseCommand):
    help = "Point the demo cluster's telemetry at a Prometheus (--url) or the agents (--disable)."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", default="demo", help="cluster slug (default demo)")
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--url", help="the Prometheus base URL, e.g. http://127.0.0.1:9090")
        what.add_argument("--disable", action="store_true", help="read the agents again")
        parser.add_argument("--write-pods", metavar="FILE", help="pod attribution for the fleet")
        parser.add_argument("--tokens", default="", help="fleet tokens file (default: DATA_DIR)")

    def handle(self, *args, **opts):
        cluster = Cluster.objects.filter(slug=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {opts['cluster']!r} (run seed_demo first)")
        if opts["disable"]:
            n = PrometheusSource.objects.filter(cluster=cluster, enabled=True).update(enabled=False)
            self.stdout.write(f"{cluster.slug}: telemetry from the agents ({n} source(s) disabled)")
            return
        source = PrometheusSource.objects.filter(cluster=cluster).first() or PrometheusSource(
            cluster=cluster
        )
        source.url, source.cluster_label, source.cluster_value = opts["url"], "", ""
        source.enabled = True
        try:
            source.full_clean()
        except ValidationError as err:
            raise CommandError(f"--url {opts['url']!r}: {'; '.join(err.messages)}") from None
        source.save()
        self.stdout.write(f"{cluster.slug}: telemetry from Prometheus at {source.url}")
        if opts["write_pods"]:
            tokens = Path(opts["tokens"] or settings.DATA_DIR / "agent-tokens.json")
            try:
                spec = json.loads(tokens.read_text())
            except (OSError, ValueError) as err:
                raise CommandError(f"cannot read the fleet tokens file {tokens}: {err}") from None
            pods = attribution(cluster, spec)
            Path(opts["write_pods"]).write_text(json.dumps(pods, indent=1, sort_keys=True))
            held = sum(len(v) for v in pods.values())
            self.stdout.write(
                f"{cluster.slug}: {held} device(s) held by pods -> {opts['write_pods']}"
            )


def attribution(cluster: Cluster, spec: dict) -> dict[str, dict[str, str]]:
    """``{node: {"<gpu>" or "<gpu>/<mig>": "namespace/pod"}}`` for the fleet ``spec``."""
    from gpuagent.fleet import scenarios

    free: dict[str, dict[str, list[str]]] = {}  # node -> resource -> device keys
    for name, _cfg, scenario in scenarios(spec):
        lost = set(scenario.get("failures", {}).get("lost", []))
        mig = scenario.get("mig") or {}
        slots: dict[str, list[str]] = {GPU_RESOURCE: []}
        for i in range(int(scenario.get("gpus", 0))):
            if i in lost:
                continue
            if i not in mig:
                slots[GPU_RESOURCE].append(str(i))
                continue
            for m, profile in enumerate(mig[i]):
                slots.setdefault(MIG_PREFIX + profile, []).append(f"{i}/{m}")
        free[name] = slots
    out: dict[str, dict[str, str]] = {}
    pods = GpuPod.objects.filter(cluster=cluster, phase="Running", node__isnull=False)
    for pod in pods.select_related("node").order_by("name"):
        slots = free.get(pod.node.name)
        if slots is None:
            continue
        for resource, amount in sorted((pod.requests or {}).items()):
            if resource != GPU_RESOURCE and not resource.startswith(MIG_PREFIX):
                continue
            for _ in range(int(amount or 0)):
                if not slots.get(resource):
                    break
                key = slots[resource].pop(0)
                out.setdefault(pod.node.name, {})[key] = f"{pod.namespace}/{pod.name}"
    return out
