"""``/healthz`` (process up), ``/readyz`` (dependencies) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

import hmac
import time

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Count, Sum
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from inventory.models import Cluster, GpuClass, NodeResource
from telemetry.summary import IdleGpuCollector


@never_cache
@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_database() -> str | None:
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None


def _check_broker() -> str | None:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
        client.ping()
        client.close()
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None


def _telemetry_sources() -> dict[str, str | None]:
    """Per cluster read from Prometheus (telemetry/promsource.py): None when it answers,
    else why not. An outage makes /readyz ``degraded`` (pages show a banner), not failing."""
    from telemetry.models import PrometheusSource
    from telemetry.promsource import PromClient, PrometheusUnavailable, QueryRefused

    out: dict[str, str | None] = {}
    for source in PrometheusSource.objects.filter(enabled=True).select_related("cluster"):
        source.timeout_seconds = min(source.timeout_seconds, 2.0)  # a probe must be quick
        try:
            PromClient(source).instant("vector(1)")
        except (PrometheusUnavailable, QueryRefused) as err:
            out[source.cluster.slug] = str(err)
        else:
            out[source.cluster.slug] = None
    return out


@never_cache
@require_GET
def readyz(request):
    """503 when the database or the broker is unreachable.

    Details (each check's error, the clusters) only for the metrics token or a signed-in
    admin (:func:`_may_scrape`); anyone else gets the status and ok/fail per check.

    Stale clusters make the answer ``degraded`` but still 200: the portal keeps serving
    the last good inventory, and pulling it out of a load balancer would not help; so does
    a cluster whose telemetry Prometheus does not answer (``telemetry_prometheus``). So does
    a cluster on which the last preflight or permission re-check found a permission
    missing (inventory/preflight.py), named under ``missing_permissions``.
    """
    checks = {"database": _check_database(), "broker": _check_broker()}
    clusters = {}
    if checks["database"] is None:
        for c in Cluster.objects.filter(sync_enabled=True):
            age = c.sync_age
            full = None if c.last_success_at is None else timezone.now() - c.last_success_at
            clusters[c.slug] = {
                "status": "stale" if c.is_stale else "ok",
                "data_age_s": None if age is None else round(age.total_seconds()),
                "watched": c.is_watched,
                "last_success_age_s": None if full is None else round(full.total_seconds()),
                "last_error": c.last_error or None,
            }
            if c.missing_permissions:
                clusters[c.slug]["missing_permissions"] = list(c.missing_permissions)
        for slug, problem in _telemetry_sources().items():
            clusters.setdefault(slug, {"status": "ok"})["telemetry_prometheus"] = problem or "ok"
    failing = {name: err for name, err in checks.items() if err}
    stale = any(
        c.get("status") == "stale" or "missing_permissions" in c
        or c.get("telemetry_prometheus", "ok") != "ok"
        for c in clusters.values()
    )  # fmt: skip
    body = {"status": "fail" if failing else ("degraded" if stale else "ok")}
    if _may_scrape(request):
        body["checks"] = {name: (err or "ok") for name, err in checks.items()}
        body["clusters"] = clusters
    else:
        # Anyone (a load balancer, the kubelet) learns whether; only the metrics token or a
        # signed-in admin learns why: exception texts, cluster names and errors (#24).
        body["checks"] = {name: ("fail" if err else "ok") for name, err in checks.items()}
    return JsonResponse(body, status=503 if failing else 200)


class InventoryCollector:
    """Reads gauges from Postgres at scrape time, so every web process reports the same."""

    def collect(self):
        sync_age = GaugeMetricFamily(
            "portal_cluster_sync_age_seconds",
            "Seconds since the last successful full inventory sync",
            labels=["cluster"],
        )
        data_age = GaugeMetricFamily(
            "portal_cluster_data_age_seconds",
            "Seconds since the inventory was last known current (full sync or watch)",
            labels=["cluster"],
        )
        stale = GaugeMetricFamily(
            "portal_cluster_stale", "1 when the cluster's inventory is stale", labels=["cluster"]
        )
        now = time.time()
        for c in Cluster.objects.all():
            if c.last_success_at is not None:
                sync_age.add_metric([c.slug], now - c.last_success_at.timestamp())
                data_age.add_metric([c.slug], now - c.data_as_of.timestamp())
            stale.add_metric([c.slug], 1.0 if c.is_stale else 0.0)
        yield sync_age
        yield data_age
        yield stale
        families = {
            key: GaugeMetricFamily(
                f"portal_gpu_{key}",
                f"GPU resource {key} summed over present nodes",
                labels=["cluster", "product", "resource"],
            )
            for key in ("capacity", "allocatable", "requested")
        }
        rows = (
            NodeResource.objects.filter(node__gone_at__isnull=True)
            .values("node__cluster__slug", "node__gpu_product", "resource")
            .annotate(
                capacity=Sum("capacity"), allocatable=Sum("allocatable"), requested=Sum("requested")
            )
        )
        for row in rows:
            labels = [row["node__cluster__slug"], row["node__gpu_product"], row["resource"]]
            for key, family in families.items():
                family.add_metric(labels, row[key] or 0)
        yield from families.values()
        yield from self._classes()

    @staticmethod
    def _classes():
        """Per GPU class: the fleet page's "By GPU class" figures (quotas.figures)."""
        from inventory.figures import DEFINITIONS
        from quotas.figures import class_figures

        helps = {
            "allocatable": "Allocatable of the resource on the class's nodes",
            "requested": "What bound, unfinished pods request on the class's nodes",
            "idle": f"Idle now: {DEFINITIONS['idle']}",
            "granted": "What grants of the class reserve at peak from now",
            "held_beyond_grants": "What scheduled pods hold beyond their namespace's grants",
            "free_to_grant": f"Free to grant: {DEFINITIONS['free_to_grant']} Capped by the pool.",
        }
        families = {
            key: GaugeMetricFamily(
                f"portal_gpu_class_{key}", text, labels=["cluster", "gpu_class", "resource"]
            )
            for key, text in helps.items()
        }
        for f in class_figures(list(Cluster.objects.all())):
            labels = [f.gpu_class.cluster.slug, f.gpu_class.slug, f.resource]
            values = {"allocatable": f.allocatable, "requested": f.requested, "idle": f.idle,
                      "granted": f.granted, "held_beyond_grants": f.room.beyond,
                      "free_to_grant": f.free_to_grant}  # fmt: skip
            for key, family in families.items():
                family.add_metric(labels, values[key])
        yield from families.values()


class QuotaCollector:
    """Quota and workflow gauges: what teams are granted and use, and what is stuck."""

    @staticmethod
    def _usable(namespaces):
        """Usable by the team per namespace (quotas/figures.py), as the team page shows it;
        a namespace no quota limits has no sample (never a 0 that means "unlimited")."""
        from inventory.figures import DEFINITIONS
        from quotas.figures import usable
        from quotas.preview import states

        family = GaugeMetricFamily(
            "portal_namespace_usable",
            f"Usable by the team: {DEFINITIONS['usable']}",
            labels=["team", "cluster", "namespace", "resource", "gpu_class"],
        )
        for state in states(namespaces).values():
            ns = state.ns
            for u in usable(state):
                if u.usable is not None:
                    slug = u.gpu_class.slug if u.gpu_class else ""
                    family.add_metric(
                        [ns.team.slug, ns.cluster.slug, ns.name, u.resource, slug], u.usable
                    )
        return family

    def collect(self):
        from quotas.models import Operation, QuotaRequest, TeamNamespace

        hard = GaugeMetricFamily(
            "portal_quota_hard",
            "Managed ResourceQuota status.hard, as last read from the cluster",
            labels=["team", "cluster", "namespace", "resource"],
        )
        used = GaugeMetricFamily(
            "portal_quota_used",
            "Managed ResourceQuota status.used, as last read from the cluster",
            labels=["team", "cluster", "namespace", "resource"],
        )
        rows = TeamNamespace.objects.select_related("team", "cluster").exclude(quota_status={})
        for ns in rows:
            base = [ns.team.slug, ns.cluster.slug, ns.name]
            for key, value in (ns.quota_status.get("hard") or {}).items():
                hard.add_metric([*base, key.removeprefix("requests.")], float(value))
            for key, value in (ns.quota_status.get("used") or {}).items():
                used.add_metric([*base, key.removeprefix("requests.")], float(value))
        yield hard
        yield used
        from quotas.demand import pending_demand

        waiting = GaugeMetricFamily(
            "portal_gpu_demand_pending",
            "GPUs asked for by unscheduled pending pods, per namespace (quotas/demand.py)",
            labels=["team", "cluster", "namespace", "resource"],
        )
        per_class = GaugeMetricFamily(
            "portal_gpu_demand_pending_class",
            "The same GPUs by the GPU class their pods' node selectors name ('' for none)",
            labels=["team", "cluster", "namespace", "resource", "gpu_class"],
        )
        namespaces = list(TeamNamespace.objects.select_related("team", "cluster"))
        by_id = {ns.pk: ns for ns in namespaces}
        slugs = dict(GpuClass.objects.values_list("pk", "slug"))
        for (ns_id, resource), d in sorted(pending_demand(namespaces).items(), key=str):
            ns = by_id[ns_id]
            base = [ns.team.slug, ns.cluster.slug, ns.name, resource]
            waiting.add_metric(base, d.amount)
            for class_id, amount in sorted(d.by_class.items(), key=str):
                per_class.add_metric([*base, slugs.get(class_id, "")], amount)
        yield waiting
        yield per_class
        yield self._usable(namespaces)
        pending = GaugeMetricFamily(
            "portal_quota_requests_pending", "Quota requests waiting for an admin"
        )
        pending.add_metric([], QuotaRequest.objects.filter(status="pending").count())
        yield pending
        ops = GaugeMetricFamily(
            "portal_operations", "Quota apply operations by status", labels=["status"]
        )
        counts = dict(
            Operation.objects.exclude(status=Operation.Status.SUCCEEDED)
            .values_list("status")
            .annotate(n=Count("id"))
        )
        for status in ("pending", "running", "confirm", "failed"):  # confirm: waits for an admin
            ops.add_metric([status], counts.get(status, 0))
        yield ops


class GrantCollector:
    """Active grants with an end, one series per grant: when it ends
    (``portal_grant_expiry_timestamp_seconds``, a timestamp so the value only changes when
    the grant does; alerts take ``- time()``), what it adds (``portal_grant_amount``), and
    how much of the resource its namespace uses against its limit now
    (``portal_grant_namespace_used`` / ``_limit``). Used and limit are quotas.preview's,
    the figures the expiry reminder and the approval pages compare (quotas.limits.usage:
    pods' requests or the ResourceQuota's status.used; the effective limit, foreign
    quotas included), computed for every such namespace in a few queries."""

    def collect(self):
        from quotas import preview
        from quotas.models import Grant

        labels = ["team", "cluster", "namespace", "resource", "gpu_class", "grant"]
        families = {
            "expiry": GaugeMetricFamily(
                "portal_grant_expiry_timestamp_seconds",
                "When an active grant ends (Unix time); permanent grants are not listed",
                labels=labels,
            ),
            "amount": GaugeMetricFamily(
                "portal_grant_amount", "What an active grant with an end adds", labels=labels
            ),
            "used": GaugeMetricFamily(
                "portal_grant_namespace_used",
                "What the grant's namespace uses of its resource now (quotas.limits.usage)",
                labels=labels,
            ),
            "limit": GaugeMetricFamily(
                "portal_grant_namespace_limit",
                "The namespace's effective limit of the grant's resource now",
                labels=labels,
            ),
        }
        grants = list(
            Grant.objects.active_at(timezone.now())
            .filter(ends_at__isnull=False)
            .select_related("namespace__team", "namespace__cluster", "gpu_class")
            .order_by("ends_at", "id")
        )
        namespaces = list({g.namespace_id: g.namespace for g in grants}.values())
        states = preview.states(namespaces) if namespaces else {}
        for g in grants:
            ns = g.namespace
            values = [ns.team.slug, ns.cluster.slug, ns.name, g.resource,
                      g.gpu_class.slug if g.gpu_class else "", str(g.pk)]  # fmt: skip
            families["expiry"].add_metric(values, g.ends_at.timestamp())
            families["amount"].add_metric(values, g.amount)
            state = states[ns.pk]
            families["used"].add_metric(values, state.used.get(f"requests.{g.resource}", 0))
            effective = state.effective.get(g.resource)
            if effective is not None:
                families["limit"].add_metric(values, effective.limit)
        yield from families.values()


class MigCollector:
    """``portal_mig_requests{cluster, kind, status}``: MIG requests by status (a failed run
    stays failed, so a rise of ``status="failed"`` is a run that just failed), and
    ``portal_mig_last_run_failed{cluster, node}``: 1 where the node's latest finished run
    failed (a later success or revert clears it)."""

    def collect(self):
        from mig.models import MigRequest

        requests = GaugeMetricFamily(
            "portal_mig_requests", "MIG requests by status", labels=["cluster", "kind", "status"]
        )
        counts = {
            (slug, kind, status): n
            for slug, kind, status, n in MigRequest.objects.values_list(
                "cluster__slug", "kind", "status"
            ).annotate(n=Count("id"))
        }
        clusters = sorted(
            {k[0] for k in counts} | set(Cluster.objects.values_list("slug", flat=True))
        )
        for slug in clusters:
            for kind in MigRequest.Kind.values:
                for status in MigRequest.Status.values:
                    requests.add_metric([slug, kind, status], counts.get((slug, kind, status), 0))
        yield requests
        failed = GaugeMetricFamily(
            "portal_mig_last_run_failed",
            "1 when the node's latest finished MIG run failed",
            labels=["cluster", "node"],
        )
        # One row per node: its latest finished run (PostgreSQL DISTINCT ON).
        latest = (
            MigRequest.objects.filter(
                node__isnull=False,
                status__in=[MigRequest.Status.SUCCEEDED, MigRequest.Status.FAILED],
            )
            .order_by("node_id", "-updated_at", "-created_at")
            .distinct("node_id")
            .values_list("cluster__slug", "node__name", "status")
        )
        for slug, node, status in sorted(latest):
            failed.add_metric([slug, node], 1.0 if status == MigRequest.Status.FAILED else 0.0)
        yield failed


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(InventoryCollector())
REGISTRY.register(QuotaCollector())
REGISTRY.register(GrantCollector())
REGISTRY.register(MigCollector())
REGISTRY.register(IdleGpuCollector())


@never_cache
@require_GET
def metrics(request):
    """Prometheus metrics. They name teams and namespaces, so they always need
    ``Authorization: Bearer $METRICS_TOKEN`` or a staff session, in development too
    (``make demo`` makes a token and prints how to scrape)."""
    if not _may_scrape(request):
        return HttpResponse("Metrics need a bearer token (METRICS_TOKEN).\n", status=401,
                            content_type="text/plain")  # fmt: skip
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


def _may_scrape(request) -> bool:
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        given = header.removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), token.encode())
    return bool(request.user.is_authenticated and request.user.is_staff)
