"""Telemetry storage: node tokens, latest state per GPU, idempotency keys, bounded history.

Written by ``telemetry.ingest`` (one SQL statement per report) and ``telemetry.retention``
(rollup and expiry); everything else reads. Sizes and retention: docs/telemetry.md.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.utils import timezone

from inventory.models import Node


class NodeTokenQuerySet(models.QuerySet):
    def active(self) -> NodeTokenQuerySet:
        return self.filter(revoked_at__isnull=True)


class NodeToken(models.Model):
    """A node agent's credential: it may report for ``node`` and nothing else.

    Issued by an admin (``telemetry.tokens.issue``); the raw secret (``gqa_`` + 40
    characters) is shown once, only its SHA-256 is stored.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12)
    key_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = NodeTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.node} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def revoke(self) -> None:
        """Revoke once; revoking again keeps the first time."""
        NodeToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        self.refresh_from_db(fields=["revoked_at"])


class NodeTelemetry(models.Model):
    """Per-node facts from the agent's latest report."""

    node = models.OneToOneField(
        Node, on_delete=models.CASCADE, primary_key=True, related_name="telemetry"
    )
    driver_version = models.CharField(max_length=32, blank=True)
    cuda_driver_version = models.PositiveIntegerField(null=True, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    interval_s = models.PositiveIntegerField(default=15)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    # topology[i][j]: "X", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS" or null (validated on
    # ingest, telemetry.ingest.validate_report).
    topology = models.JSONField(null=True, blank=True)
    # Portal clock when the latest report arrived / the agent's own timestamp in it.
    last_report_at = models.DateTimeField()
    last_report_timestamp = models.DateTimeField()
    # last_report_at + 3 intervals: past it, the node's GPUs count as stale.
    stale_after = models.DateTimeField()

    class Meta:
        verbose_name_plural = "node telemetry"
        indexes = [
            # Serves "nodes that stopped reporting" (admin list, stale badge counts).
            models.Index(fields=["stale_after"], name="nodetelemetry_stale_after"),
        ]

    @property
    def is_stale(self) -> bool:
        return self.stale_after < timezone.now()


class GpuStateQuerySet(models.QuerySet):
    def stale(self, now: datetime | None = None) -> GpuStateQuerySet:
        return self.filter(stale_after__lt=now or timezone.now())

    def fresh(self, now: datetime | None = None) -> GpuStateQuerySet:
        return self.filter(stale_after__gte=now or timezone.now())


class GpuState(models.Model):
    """The latest reported state of one GPU slot (node, index).

    A slot keeps its row (and history) when the card behind it is replaced; ``uuid`` then
    changes. Unsupported metrics are NULL and named in ``unsupported``; a lost GPU keeps
    its last known identity with ``lost`` set and NULL metrics.
    """

    # No index of its own: gpustate_unique_slot (node, index) serves lookups by node.
    node = models.ForeignKey(
        Node, on_delete=models.CASCADE, related_name="gpu_states", db_index=False
    )
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96, blank=True)
    name = models.CharField(max_length=96, blank=True)
    lost = models.BooleanField(default=False)
    memory_total_mib = models.PositiveIntegerField(null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)
    utilization_gpu_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    utilization_memory_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    temperature_c = models.SmallIntegerField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    power_limit_w = models.FloatField(null=True, blank=True)
    mig_current = models.BooleanField(null=True, blank=True)
    mig_pending = models.BooleanField(null=True, blank=True)
    # [{"index", "uuid", "profile", "memory_total_mib", "memory_used_mib"}], validated on
    # ingest (telemetry.ingest); at most 64.
    mig_devices = models.JSONField(default=list, blank=True)
    # [{"pid", "used_memory_mib", "pod", "mig_uuid"}], validated on ingest; at most 256.
    processes = models.JSONField(default=list, blank=True)
    # Names of the metrics NVML could not read on this GPU.
    unsupported = models.JSONField(default=list, blank=True)
    # The latest XID error of the GPU (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS; NULL: none
    # or not known). The agent reads no XIDs (NVML gives them only as events).
    xid_last = models.PositiveIntegerField(null=True, blank=True)
    # The agent's timestamp of the report this state comes from.
    reported_at = models.DateTimeField()
    # Portal clock + 3 report intervals: past it the GPU has not been heard of (stale).
    stale_after = models.DateTimeField()

    objects = GpuStateQuerySet.as_manager()

    class Meta:
        ordering = ["node", "index"]
        indexes = [
            # A report's GPU UUIDs are looked up among other nodes' (telemetry/consistency.py).
            models.Index(fields=["uuid"], name="gpustate_uuid"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpustate_unique_slot"),
            models.CheckConstraint(
                condition=models.Q(utilization_gpu_pct__lte=100)
                & models.Q(utilization_memory_pct__lte=100),
                name="gpustate_utilization_pct",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}/{self.index}"

    @property
    def is_stale(self) -> bool:
        return self.stale_after < timezone.now()

    @property
    def memory_used_pct(self) -> float | None:
        if not self.memory_total_mib or self.memory_used_mib is None:
            return None
        return 100.0 * self.memory_used_mib / self.memory_total_mib


class AgentReport(models.Model):
    """Idempotency key of an accepted report; pruned after 2 hours (reports older than
    1 hour are refused, so a replay can never outlive its key)."""

    # agentreport_unique (node, timestamp) serves lookups by node.
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)
    timestamp = models.DateTimeField()
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "timestamp"], name="agentreport_unique"),
        ]
        indexes = [
            # Serves the pruning DELETE (received_at < now - 2 h); BRIN: rows arrive in order.
            BrinIndex(fields=["received_at"], name="agentreport_received"),
        ]


class HistoryQuerySet(models.QuerySet):
    def with_averages(self) -> HistoryQuerySet:
        """Annotate ``util_avg``, ``mem_used_avg_mib`` and ``power_avg_w`` (NULL: no data)."""
        F, Func = models.F, models.Func

        def avg(total: str, count: str):
            return models.ExpressionWrapper(
                F(total) * 1.0 / Func(F(count), 0, function="NULLIF"),
                output_field=models.FloatField(),
            )

        return self.annotate(
            util_avg=avg("util_sum", "util_n"),
            mem_used_avg_mib=avg("mem_used_sum", "mem_n"),
            power_avg_w=avg("power_sum", "power_n"),
        )


class HistoryPoint(models.Model):
    """One GPU over one bucket, as sums and counts so averages stay exact when merged.

    ``*_n`` count the samples that had the metric (unsupported/lost samples do not), so
    ``util_sum / util_n`` is the exact mean of the reported values; ``with_averages()``
    annotates the means, and sums over several points or GPUs stay exact the same way.
    """

    # The unique (gpu, bucket) constraint serves lookups by GPU; one index less per write.
    gpu = models.ForeignKey(GpuState, on_delete=models.CASCADE, related_name="+", db_index=False)
    bucket = models.DateTimeField()
    samples = models.PositiveIntegerField(default=0)
    util_sum = models.BigIntegerField(default=0)
    util_n = models.PositiveIntegerField(default=0)
    util_max = models.PositiveSmallIntegerField(null=True)
    mem_used_sum = models.BigIntegerField(default=0)
    mem_n = models.PositiveIntegerField(default=0)
    temp_max = models.SmallIntegerField(null=True)
    power_sum = models.FloatField(default=0)
    power_n = models.PositiveIntegerField(default=0)

    objects = HistoryQuerySet.as_manager()

    class Meta:
        abstract = True


class GpuHistory5m(HistoryPoint):
    """5-minute points, accumulated on ingest; kept 30 days (TELEMETRY_5M_RETENTION)."""

    class Meta:
        ordering = ["gpu", "bucket"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "bucket"], name="gpuhistory5m_unique"),
        ]
        indexes = [
            # Serves rollup and retention range scans on bucket; BRIN: rows arrive in bucket order.
            BrinIndex(fields=["bucket"], name="gpuhistory5m_bucket"),
        ]


class GpuHistory1h(HistoryPoint):
    """Hourly points rolled up from the 5-minute ones; kept 365 days."""

    class Meta:
        ordering = ["gpu", "bucket"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "bucket"], name="gpuhistory1h_unique"),
        ]
        indexes = [
            # Serves rollup and retention range scans on bucket; BRIN as above.
            BrinIndex(fields=["bucket"], name="gpuhistory1h_bucket"),
        ]


class ClusterSummary(models.Model):
    """What the telemetry pages show of one cluster, computed before anyone asks
    (telemetry.summary): held / busy GPUs per namespace and product, the idle allocations
    with their idle-since, and the hourly utilisation per product over the last day.
    One row per measured cluster, replaced by each computation."""

    cluster = models.OneToOneField(
        "inventory.Cluster", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    computed_at = models.DateTimeField()
    seconds = models.FloatField(default=0.0)  # how long the computation took
    data = models.JSONField(default=dict)

    class Meta:
        verbose_name_plural = "cluster summaries"


class UsageHour(models.Model):
    """GPU-hours a namespace's pods held (``allocated``) and their utilisation-weighted
    part (``busy``) in one hour, per GPU class of the nodes: written by the figures'
    computation (telemetry.summary) with the attribution of the time, so showback and the
    team chart sum rows instead of reading every GPU's history per view. The last 3 closed
    hours and the current one are rewritten at each computation (late reports)."""

    cluster = models.ForeignKey("inventory.Cluster", on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=253)
    # SET_NULL as the node's own class: a deleted class's hours show under "no class".
    gpu_class = models.ForeignKey(
        "inventory.GpuClass", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    hour = models.DateTimeField()
    allocated = models.FloatField()
    busy = models.FloatField()

    class Meta:
        indexes = [
            models.Index(fields=["cluster", "hour"], name="usagehour_cluster_hour"),
            models.Index(fields=["cluster", "namespace", "hour"], name="usagehour_ns_hour"),
        ]


from .models_source import PrometheusSource  # noqa: E402,F401  (a model of this app, own module)
