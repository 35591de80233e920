"""Inventory: what the clusters report, mirrored into Postgres by the sync.

Rows here are written only by ``inventory.sync`` (and the admin for clusters). Nodes that
disappear are marked ``gone_at``, never deleted, so history and foreign keys survive.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone


def check_api_url(value: str) -> None:
    """Validator of ``Cluster.api_url`` (model, form, API): empty, or a URL a token may be
    sent to (inventory/kube/credentials.py)."""
    from .kube.credentials import url_problem  # kube imports these models

    problem = url_problem(value) if value else None
    if problem:
        raise ValidationError(problem, code="invalid")


GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
MAX_PREFLIGHT_NAMESPACES = 50
_SHARED_SUFFIX_RE = re.compile(r"-SHARED$", re.IGNORECASE)
_MIG_SUFFIX_RE = re.compile(r"-MIG-(?:INVALID|[1-9]g\.[0-9]+gb(?:[+.]me)?)$", re.IGNORECASE)


def base_product(product: str) -> str:
    """The physical GPU of a GFD ``gpu.product`` label, without the suffixes GFD appends
    for sharing: ``-SHARED`` (time-slicing), ``-MIG-<profile>`` (single strategy) and
    ``-MIG-INVALID``. ``NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED`` -> ``NVIDIA-A100-SXM4-80GB``.
    """
    return _MIG_SUFFIX_RE.sub("", _SHARED_SUFFIX_RE.sub("", product.strip()))


def is_gpu_resource(name: str) -> bool:
    """True for the resources the portal tracks: whole GPUs and MIG slices."""
    return name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)


class Cluster(models.Model):
    class AuthMethod(models.TextChoices):
        KUBECONFIG = "kubeconfig", "kubeconfig file"
        IN_CLUSTER = "in_cluster", "in-cluster service account"
        TOKEN = "token", "API URL + bearer token"

    class SyncStatus(models.TextChoices):
        NEVER = "never", "never synced"
        OK = "ok", "in sync"
        FAILED = "failed", "last sync failed"

    class Enforcement(models.TextChoices):
        RESOURCEQUOTA = "resourcequota", "ResourceQuota (class not enforced)"
        KUEUE = "kueue", "Kueue (classes enforced per ResourceFlavor)"
        DRA = "dra", "Dynamic Resource Allocation (classes enforced per DeviceClass)"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(
        max_length=63,
        unique=True,
        validators=[RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "Use a DNS-style name.")],
    )
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    auth_method = models.CharField(max_length=20, choices=AuthMethod.choices)
    kubeconfig_path = models.CharField(max_length=500, blank=True)
    kubeconfig_context = models.CharField(max_length=200, blank=True)
    api_url = models.CharField(max_length=500, blank=True, validators=[check_api_url])
    # A secret: prefer bearer_token_file (a mounted secret) to keep it out of the database.
    bearer_token = models.CharField(max_length=4096, blank=True)
    bearer_token_file = models.CharField(max_length=500, blank=True)
    ca_cert = models.TextField(blank=True, help_text="PEM; empty uses the system trust store")
    verify_tls = models.BooleanField(default=True)
    sync_enabled = models.BooleanField(default=True)

    sync_status = models.CharField(
        max_length=10, choices=SyncStatus.choices, default=SyncStatus.NEVER
    )
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    # When the watcher (inventory/watch.py) last confirmed that every change of nodes and
    # pods up to then is in the portal: between full syncs the data is as of this.
    watched_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    server_version = models.CharField(max_length=50, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    # The connection preflight (inventory/preflight.py): namespaces it checks besides the
    # cluster's team namespaces, its last report, and the permissions found missing by it
    # or by the periodic re-check (inventory.tasks.recheck_permissions; /readyz reads it).
    preflight_namespaces = models.JSONField(default=list, blank=True)
    preflight = models.JSONField(default=dict, blank=True)
    preflight_status = models.CharField(
        max_length=10, blank=True, choices=[(v, v) for v in ("ok", "warning", "error")]
    )
    preflight_at = models.DateTimeField(null=True, blank=True)
    missing_permissions = models.JSONField(default=list, blank=True)
    permissions_checked_at = models.DateTimeField(null=True, blank=True)
    # From when the sync records the GPU pods that end (inventory/podruns.py): allocated
    # GPU-hours before it are not known for pods that ended before it.
    pods_recorded_since = models.DateTimeField(null=True, blank=True)
    # How grants become limits on this cluster (docs/quotas.md, "Enforcement backends").
    # ResourceQuota cannot tell GPU models apart: per-class grants are summed per resource
    # and the class is not enforced by Kubernetes. Kueue enforces them: one ResourceFlavor
    # per class, one ClusterQueue per team (quotas/kueue.py). So does DRA: a DeviceClass
    # per class and the portal's ResourceQuota counting devices per DeviceClass
    # (quotas/dra.py).
    enforcement = models.CharField(
        max_length=20, choices=Enforcement.choices, default=Enforcement.RESOURCEQUOTA
    )
    # On a DRA cluster: the GPU DeviceClasses the portal does not manage (the driver's
    # generic ones, an admin's), as the last sync found them; each team quota sets them to 0.
    dra_other_classes = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Credentials that cannot work (per auth method, inventory/connect.py) and the
        namespaces to check are refused with one message per field."""
        from .connect import credential_errors

        errors = credential_errors(self)
        names = self.preflight_namespaces
        if not isinstance(names, list) or not all(
            isinstance(n, str) and _DNS_LABEL_RE.fullmatch(n) for n in names
        ):
            errors["preflight_namespaces"] = "Give namespace names (DNS labels), one per entry."
        elif len(names) > MAX_PREFLIGHT_NAMESPACES:
            errors["preflight_namespaces"] = f"At most {MAX_PREFLIGHT_NAMESPACES} namespaces."
        if self.enforces_classes and self.pk is not None:
            from quotas.kueue import anyclass_blockers  # quotas builds on inventory

            blockers = anyclass_blockers(self)
            if blockers:
                errors["enforcement"] = blockers
        if errors:
            raise ValidationError(errors)

    @property
    def data_as_of(self) -> datetime | None:
        """Until when the inventory is known complete: the last good full sync, or later
        where a watch has kept it current since (None before any good sync)."""
        if self.last_success_at is None:
            return None
        if self.watched_at is not None and self.watched_at > self.last_success_at:
            return self.watched_at
        return self.last_success_at

    @property
    def is_watched(self) -> bool:
        """A watch keeps the data current (it confirmed so within INVENTORY_STALE_AFTER)."""
        return (
            self.watched_at is not None
            and self.last_success_at is not None
            and self.watched_at > self.last_success_at
            and timezone.now() - self.watched_at <= settings.INVENTORY_STALE_AFTER
        )

    @property
    def is_stale(self) -> bool:
        """Data is stale when the last sync failed or the data is older than
        INVENTORY_STALE_AFTER (a full sync that old and no watch since)."""
        if self.data_as_of is None or self.sync_status == self.SyncStatus.FAILED:
            return True
        return timezone.now() - self.data_as_of > settings.INVENTORY_STALE_AFTER

    @property
    def sync_age(self) -> timedelta | None:
        """How old the data is (see :attr:`data_as_of`)."""
        return None if self.data_as_of is None else timezone.now() - self.data_as_of

    @property
    def enforces_classes(self) -> bool:
        """False under ResourceQuota: a grant's class is the portal's bookkeeping only."""
        return self.enforcement != self.Enforcement.RESOURCEQUOTA

    @property
    def backend_name(self) -> str:
        """What enforces grants here, in a word: ResourceQuota, Kueue or DRA."""
        return {"kueue": "Kueue", "dra": "DRA"}.get(self.enforcement, "ResourceQuota")

    @property
    def is_kueue(self) -> bool:
        """Kueue admits the work: ClusterQueues, LocalQueues and Workloads, no portal quota."""
        return self.enforcement == self.Enforcement.KUEUE

    @property
    def is_dra(self) -> bool:
        """GPUs are DRA devices; the portal's ResourceQuota counts them per DeviceClass."""
        return self.enforcement == self.Enforcement.DRA


class SyncRun(models.Model):
    """One inventory sync of one cluster: an append-only record of what it did."""

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="sync_runs")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    trigger = models.CharField(max_length=20, default="beat")
    nodes_seen = models.PositiveIntegerField(default=0)
    pods_seen = models.PositiveIntegerField(default=0)
    gpu_pods_seen = models.PositiveIntegerField(default=0)
    pages = models.PositiveIntegerField(default=0)
    list_restarts = models.PositiveIntegerField(default=0)
    rows_created = models.PositiveIntegerField(default=0)
    rows_updated = models.PositiveIntegerField(default=0)
    rows_deleted = models.PositiveIntegerField(default=0)
    nodes_gone = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # The resourceVersions its node and pod lists were read at: where watches start from.
    nodes_version = models.CharField(max_length=64, blank=True)
    pods_version = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            # Serves "latest runs of a cluster" on the cluster page.
            models.Index(fields=["cluster", "-started_at"], name="syncrun_cluster_recent"),
        ]

    @property
    def rows_written(self) -> int:
        return self.rows_created + self.rows_updated + self.rows_deleted


class NodeQuerySet(models.QuerySet):
    def present(self) -> NodeQuerySet:
        return self.filter(gone_at__isnull=True)

    def gpu(self) -> NodeQuerySet:
        return self.exclude(gpu_product="")


class Node(models.Model):
    """A Kubernetes node, with its GPU Feature Discovery labels parsed into columns."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    labels = models.JSONField(default=dict)
    # nvidia.com/gpu.product as published (e.g. NVIDIA-A100-SXM4-80GB, NVIDIA-L40S-SHARED).
    gpu_product = models.CharField(max_length=100, blank=True, db_index=True)
    # NVML's name (``NVIDIA A100-SXM4-80GB``) where the DRA driver publishes it: what a
    # DeviceClass selects the class's devices by (quotas/dra.py).
    gpu_product_name = models.CharField(max_length=100, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    gpu_family = models.CharField(max_length=30, blank=True)
    compute_capability = models.CharField(max_length=10, blank=True)
    driver_version = models.CharField(max_length=30, blank=True)
    mig_capable = models.BooleanField(default=False)
    mig_strategy = models.CharField(max_length=10, blank=True)
    mig_config = models.CharField(max_length=100, blank=True)
    mig_config_state = models.CharField(max_length=20, blank=True)
    sharing_strategy = models.CharField(max_length=20, blank=True)
    gpu_replicas = models.PositiveIntegerField(default=1)
    instance_type = models.CharField(max_length=100, blank=True)
    # The GPU class whose selector matches the node's labels (inventory/classes.py sets it
    # after each sync; the sync itself never writes it).
    gpu_class = models.ForeignKey(
        "GpuClass", on_delete=models.SET_NULL, null=True, blank=True, related_name="nodes"
    )
    unschedulable = models.BooleanField(default=False)
    # spec.taints that keep pods off (NoSchedule, NoExecute): [{"key", "value", "effect"}].
    # A Kueue ResourceFlavor of the node's class carries tolerations for them.
    taints = models.JSONField(default=list, blank=True)
    ready = models.BooleanField(default=True)
    # Operand pods paused by mig-manager, or device plugin missing (GPU-FACTS 6).
    paused_operands = models.JSONField(default=list)
    k8s_created_at = models.DateTimeField(null=True, blank=True)
    # Digest of everything above, so an unchanged node costs no write.
    fingerprint = models.CharField(max_length=32)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_changed_at = models.DateTimeField(default=timezone.now)
    gone_at = models.DateTimeField(null=True, blank=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def base_product(self) -> str:
        return base_product(self.gpu_product)


class NodeResource(models.Model):
    """Capacity, allocatable and pod requests of one GPU resource on one node."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="resources")
    resource = models.CharField(max_length=100)
    capacity = models.PositiveIntegerField(default=0)
    allocatable = models.PositiveIntegerField(default=0)
    # Sum of requests of non-terminal pods bound to this node.
    requested = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["resource"]
        constraints = [
            models.UniqueConstraint(fields=["node", "resource"], name="noderesource_unique"),
        ]

    @property
    def unhealthy(self) -> int:
        return self.capacity - self.allocatable

    @property
    def idle(self) -> int:
        """Idle now on this node (inventory/figures.py): never below 0."""
        return max(self.allocatable - self.requested, 0)


class GpuPod(models.Model):
    """A non-terminal pod that requests GPU resources (pending pods included)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gpu_pods")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    node = models.ForeignKey(
        Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="gpu_pods"
    )
    node_name = models.CharField(max_length=253, blank=True)
    phase = models.CharField(max_length=20)
    # {"nvidia.com/gpu": 2}: effective pod request per GPU resource.
    requests = models.JSONField(default=dict)
    # The nvidia.com/ labels its nodeSelector (or a required node affinity) asks for.
    gpu_selector = models.JSONField(default=dict, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    k8s_created_at = models.DateTimeField(null=True, blank=True)
    # status.startTime (None while Pending): from then on it holds its node's GPUs, so the
    # idle insight counts a pod's idle time from here (telemetry/insight.py).
    started_at = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="gpupod_unique_name"
            ),
        ]
        indexes = [
            # Serves "GPU pods in a namespace" (team pages, usage).
            models.Index(fields=["cluster", "namespace"], name="gpupod_namespace"),
        ]


class PodRun(models.Model):
    """A GPU pod that ran and ended: the whole GPUs it held, from its start to its end.

    Written by the sync when a started pod's row goes (the pod finished, was deleted, or
    its name now belongs to a pod of another uid), so that allocated GPU-hours are known
    on clusters that send no telemetry (inventory/podruns.py)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    gpu_class = models.ForeignKey(
        "GpuClass", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Physical GPUs: the nvidia.com/gpu request / the node's time-slicing replicas.
    gpus = models.FloatField()
    started_at = models.DateTimeField()  # status.startTime
    # The last complete sync that saw it running: up to one sync interval before its end.
    ended_at = models.DateTimeField()

    class Meta:
        indexes = [
            # Serves "runs of these clusters that ended after the period began".
            models.Index(fields=["cluster", "ended_at"], name="podrun_cluster_ended"),
        ]


class NamespaceUsage(models.Model):
    """GPU resources requested by non-terminal pods of one namespace, per resource."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="usage")
    namespace = models.CharField(max_length=63)
    resource = models.CharField(max_length=100)
    requested = models.PositiveIntegerField(default=0)
    pods = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "resource"], name="nsusage_unique"
            ),
        ]


LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
PRODUCT_LABEL = "nvidia.com/gpu.product"


class GpuClass(models.Model):
    """A named set of GPUs on one cluster: the nodes whose labels match ``selector``.

    Derived after each sync (inventory/classes.py: one class per ``nvidia.com/gpu.product``,
    so a time-sliced product, published with ``-SHARED``, is a class of its own), or
    defined by an admin. Grants and requests name a class and a resource; how a backend
    enforces it (ResourceQuota sums per resource, a Kueue ResourceFlavor, a DRA
    DeviceClass) is mapped elsewhere, so a new backend needs no migration of grants.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gpu_classes")
    slug = models.SlugField(
        max_length=63,
        validators=[RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "Use a DNS-style name.")],
    )
    name = models.CharField(max_length=100, help_text="display name")
    # Node label matches, all of which must hold:
    # {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}.
    selector = models.JSONField(default=dict)
    weight = models.DecimalField(
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="optional weight or price per GPU-hour",
    )
    # False for a class an admin defined; derived classes keep admin edits of name/weight.
    derived = models.BooleanField(default=True)
    # As last derived from the class's present nodes (kept when they are all gone):
    resources = models.JSONField(default=list, blank=True)  # nvidia.com/gpu, nvidia.com/mig-*
    node_count = models.PositiveIntegerField(default=0)
    gpus = models.PositiveIntegerField(default=0)  # physical GPUs (GFD nvidia.com/gpu.count)
    replicas = models.PositiveIntegerField(default=1)  # time-slicing factor (gpu.replicas)
    empty_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["cluster__name", "name"]
        verbose_name_plural = "GPU classes"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "slug"], name="gpuclass_unique_slug"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def time_sliced(self) -> bool:
        return self.replicas > 1

    @property
    def empty(self) -> bool:
        return self.node_count == 0

    def covers(self, resource: str) -> bool:
        return resource in self.resources

    def capacity_text(self) -> str:
        """``32 replicas on 8 GPUs`` for a time-sliced class, ``8 GPUs`` otherwise."""
        if self.time_sliced:
            return f"{self.gpus * self.replicas} replicas on {self.gpus} GPUs"
        return f"{self.gpus} GPUs"

    def matches(self, labels: dict) -> bool:
        return bool(self.selector) and all(labels.get(k) == v for k, v in self.selector.items())

    def clean(self) -> None:
        sel = self.selector
        if (
            not isinstance(sel, dict)
            or not sel
            or not all(
                isinstance(k, str)
                and isinstance(v, str)
                and len(k) <= 316
                and LABEL_KEY.fullmatch(k)
                and LABEL_VALUE.fullmatch(v)
                for k, v in sel.items()
            )
        ):
            raise ValidationError(
                {"selector": "Give node label matches: {label key: value}, at least one."}
            )
        if self.cluster_id is None:
            return
        overlap = (
            Node.objects.filter(cluster_id=self.cluster_id, gone_at__isnull=True)
            .filter(labels__contains=sel, gpu_class__derived=False)
            .exclude(gpu_class_id=self.pk)
            .values_list("gpu_class__name", flat=True)
            .first()
        )
        if overlap:
            raise ValidationError(
                {
                    "selector": f"It matches nodes of class {overlap}: a node is in one "
                    "class. (Nodes of classes the portal derived move to yours.)"
                }
            )
