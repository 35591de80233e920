"""Teams, their namespaces, quota requests, grants, apply operations and the audit trail.

State changes go through model methods and ``quotas.services``; every one writes an
append-only ``AuditEvent`` (and, for requests, a ``RequestEvent`` in the timeline).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from inventory.models import Cluster, GpuClass

DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "Use lower-case letters, digits and '-', starting and ending with a letter or digit.",
)


class Team(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=63, unique=True, validators=[DNS_LABEL])
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "member"
        MANAGER = "manager", "manager"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_unique"),
        ]


class TeamNamespace(models.Model):
    """A Kubernetes namespace of one team on one cluster, whose GPU quota the portal manages."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="namespaces")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="team_namespaces")
    name = models.CharField(max_length=63, validators=[DNS_LABEL])
    created_by_portal = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    # The managed ResourceQuota's status as last read from the cluster (after an apply
    # or a drift check): {"hard": {...}, "used": {...}}.
    quota_status = models.JSONField(default=dict, blank=True)
    quota_status_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            # A namespace's quota has one owner.
            models.UniqueConstraint(fields=["cluster", "name"], name="teamnamespace_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.slug}/{self.name}"

    def used(self, resource: str) -> int | None:
        """``status.used`` of the managed quota for a resource, as last read (None: unknown)."""
        value = (self.quota_status.get("used") or {}).get(f"requests.{resource}")
        return None if value is None else int(value)


class ForeignQuota(models.Model):
    """A ResourceQuota in a team namespace that the portal does not own, as last read.

    Kubernetes enforces every quota of a namespace (GPU-FACTS.md section 1), so these
    bind next to the portal's own. An admin adopts one (its GPU keys become baseline
    grants) or keeps it as an outside limit; until then it is undecided.
    """

    class Decision(models.TextChoices):
        UNDECIDED = "undecided"
        ADOPTED = "adopted"
        KEPT = "kept", "kept as an outside limit"
        REMOVED = "removed", "adopted and removed"

    namespace = models.ForeignKey(
        TeamNamespace, on_delete=models.CASCADE, related_name="foreign_quotas"
    )
    name = models.CharField(max_length=253)
    # requests.nvidia.com/* keys (what quota counts) with their spec.hard and status.used.
    hard = models.JSONField(default=dict, blank=True)
    used = models.JSONField(default=dict, blank=True)
    # limits.nvidia.com/* and bare nvidia.com/* keys: accepted by the API server, never
    # counted by the pod evaluator (pkg/quota/v1/evaluator/core/pods.go).
    ignored = models.JSONField(default=dict, blank=True)
    # spec.scopes as Exists, then scopeSelector.matchExpressions: [[scope, op, [values]]].
    scopes = models.JSONField(default=list, blank=True)
    decision = models.CharField(max_length=10, choices=Decision.choices, default=Decision.UNDECIDED)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )  # fmt: skip
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, max_length=2000)
    seen_at = models.DateTimeField(default=timezone.now)
    # Set when a read no longer finds it in the namespace.
    gone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="foreignquota_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def scoped(self) -> bool:
        """A scoped quota binds only the pods its scopes select."""
        return bool(self.scopes)

    @property
    def present(self) -> bool:
        return self.gone_at is None

    def scope_text(self) -> str:
        return "; ".join(
            f"{scope} {op} {', '.join(values)}".strip() for scope, op, values in self.scopes
        )


class OvercommitPolicy(models.Model):
    """How far grants may exceed allocatable for one resource on one cluster (default 1.0)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="overcommit")
    resource = models.CharField(max_length=100)
    ratio = models.DecimalField(
        max_digits=4,
        decimal_places=2,
        default=1,
        validators=[MinValueValidator(0), MaxValueValidator(10)],
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "resource"], name="overcommit_unique"),
        ]


class CapacityLock(models.Model):
    """One row per (cluster, resource): approvals lock it so they run one at a time.

    Row locks on the grants themselves cannot stop two approvals that each insert a new
    grant; a lock on the pool they draw from can.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE)
    resource = models.CharField(max_length=100)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "resource"], name="capacitylock_unique"),
        ]


def class_label(gpu_class: GpuClass | None) -> str:
    return "any class" if gpu_class is None else gpu_class.name


class GrantQuerySet(models.QuerySet):
    def active_at(self, when: datetime) -> GrantQuerySet:
        return self.filter(ended_at__isnull=True, starts_at__lte=when).filter(
            Q(ends_at__isnull=True) | Q(ends_at__gt=when)
        )

    def overlapping(self, start: datetime, end: datetime | None) -> GrantQuerySet:
        """Grants that reserve capacity at some instant of [start, end)."""
        qs = self.filter(ended_at__isnull=True).filter(
            Q(ends_at__isnull=True) | Q(ends_at__gt=start)
        )
        return qs if end is None else qs.filter(starts_at__lt=end)


class Grant(models.Model):
    """+amount of one resource for one team namespace, permanently or for a window."""

    class Kind(models.TextChoices):
        REQUEST = "request", "approved request"
        BASELINE = "baseline", "team baseline"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    namespace = models.ForeignKey(TeamNamespace, on_delete=models.PROTECT, related_name="grants")
    # The GPU class it reserves (null: any class of the cluster). Class + resource is
    # all a grant says; each enforcement backend maps it (docs/quotas.md, "GPU classes").
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.PROTECT, null=True, blank=True, related_name="grants"
    )
    resource = models.CharField(max_length=100)
    amount = models.PositiveIntegerField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True, help_text="empty: permanent")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.REQUEST)
    # Set when the grant stops counting early (released, replaced, apply_failed: its
    # request's apply failed for good) or at its end (expired).
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=20, blank=True)
    reminder_sent_at = models.DateTimeField(null=True, blank=True)  # before its end
    start_reminder_sent_at = models.DateTimeField(null=True, blank=True)  # before its start
    # True once an apply was queued with this grant counting (at approval when it starts
    # at once; by beat when its start arrives).
    start_applied = models.BooleanField(default=False)
    # When an apply that counted this grant first succeeded (null: not enforced yet). A
    # request whose apply fails for good withdraws its grant unless another apply of the
    # namespace enforced it meanwhile (end_reason "apply_failed", docs/quotas.md).
    applied_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = GrantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="grant_amount_positive"),
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=models.F("starts_at")),
                name="grant_ends_after_start",
            ),
        ]
        indexes = [
            # Serves the capacity sweep: grants of one resource still counting.
            models.Index(
                fields=["resource", "starts_at"],
                condition=Q(ended_at__isnull=True),
                name="grant_open_by_resource",
            ),
        ]

    def __str__(self) -> str:
        return f"+{self.amount} {self.resource} for {self.namespace}"

    @property
    def team(self) -> Team:
        return self.namespace.team

    def state(self, now: datetime | None = None) -> str:
        now = now or timezone.now()
        if self.ended_at is not None:
            return self.end_reason or "ended"
        if self.starts_at > now:
            return "upcoming"
        if self.ends_at is not None and self.ends_at <= now:
            return "expired"
        return "active"


class QuotaRequest(models.Model):
    class Kind(models.TextChoices):
        NEW = "new", "new grant"
        RENEWAL = "renewal", "renewal"
        RELEASE = "release", "release"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        APPLYING = "applying"
        APPLIED = "applied"
        REJECTED = "rejected"
        CANCELLED = "cancelled"
        FAILED = "failed"

    OPEN = (Status.PENDING, Status.APPROVED, Status.APPLYING)
    TERMINAL = (Status.APPLIED, Status.REJECTED, Status.CANCELLED, Status.FAILED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="requests")
    namespace = models.ForeignKey(TeamNamespace, on_delete=models.PROTECT, related_name="requests")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.NEW)
    # Renewals extend this grant, releases end it.
    target_grant = models.ForeignKey(
        Grant, on_delete=models.PROTECT, null=True, blank=True, related_name="change_requests"
    )
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.PROTECT, null=True, blank=True, related_name="requests",
        help_text="empty: any class",
    )  # fmt: skip
    resource = models.CharField(max_length=100)
    amount = models.PositiveIntegerField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True, help_text="empty: permanent")
    justification = models.TextField(max_length=2000)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_requests"
    )
    on_behalf = models.BooleanField(default=False, help_text="filed by an admin for the team")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, max_length=2000)
    grant = models.OneToOneField(
        Grant, on_delete=models.PROTECT, null=True, blank=True, related_name="request"
    )
    # What the approval gave, kept as decided: the grant itself changes later (a renewal
    # extends it, a release ends it), and "4 of 6, until ..." must stay true on the page.
    granted_amount = models.PositiveIntegerField(
        null=True, blank=True, help_text="empty: nothing granted (yet)"
    )
    granted_ends_at = models.DateTimeField(
        null=True, blank=True, help_text="the approved end; empty and an amount: permanent"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="request_amount_positive"),
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=models.F("starts_at")),
                name="request_ends_after_start",
            ),
        ]
        indexes = [
            # Serves the admin queue: open requests, oldest first.
            models.Index(
                fields=["created_at"],
                condition=Q(status="pending"),
                name="request_pending_queue",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.amount} {self.resource} for {self.namespace}"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN

    @property
    def duration(self) -> timedelta | None:
        return None if self.ends_at is None else self.ends_at - self.starts_at


class RequestEvent(models.Model):
    """One transition of a request: the timeline on its page. Append-only."""

    request = models.ForeignKey(QuotaRequest, on_delete=models.CASCADE, related_name="events")
    from_status = models.CharField(max_length=10, blank=True)
    to_status = models.CharField(max_length=10)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    note = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]


class Operation(models.Model):
    """Outbox row: make one namespace's managed ResourceQuota match the database.

    Written in the same transaction as the change that needs it; a worker claims it with a
    conditional UPDATE; beat re-dispatches rows that stalled. Applying is idempotent: the
    desired quota is recomputed from the grants active at apply time.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        # It would write a hard limit below what the namespace's pods use: it waits for
        # an admin to confirm (quotas/limits.py).
        CONFIRM = "confirm", "needs confirmation"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    namespace = models.ForeignKey(
        TeamNamespace, on_delete=models.CASCADE, related_name="operations"
    )
    reason = models.CharField(max_length=30)  # approval, release, expiry, start, drift, baseline
    requests = models.ManyToManyField(QuotaRequest, blank=True, related_name="operations")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=8)
    last_error = models.TextField(blank=True)
    # Set while the cluster gives no answer at all: when the first unanswered attempt began.
    unreachable_since = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    lease_until = models.DateTimeField(null=True, blank=True)
    applied_hard = models.JSONField(default=dict, blank=True)
    # Keys it would lower below usage: {"requests.nvidia.com/gpu": {"hard": 0, "was": 4,
    # "used": 4}}; set when it starts waiting for confirmation.
    lowering = models.JSONField(default=dict, blank=True)
    # What an admin accepted: {"requests.nvidia.com/gpu": 0}; a later apply may write
    # these values (or more) below usage, never less.
    confirmed_hard = models.JSONField(default=dict, blank=True)
    confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )  # fmt: skip
    confirmed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # Serves the re-dispatcher: unfinished operations that are due.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status__in=["pending", "running"]),
                name="operation_due",
            ),
        ]


class OperationAttempt(models.Model):
    """One try of an operation, with its outcome (shown on the request page)."""

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    # The worker process that ran it ("host/pid"): which one died when a lease lapsed.
    worker = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["operation", "number"]


class AuditEvent(models.Model):
    """Append-only record of every state change: who, what, before, after, when."""

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    # "alice", or "system" for workers; kept when the user is deleted.
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=50, db_index=True)
    object_type = models.CharField(max_length=50)
    object_id = models.CharField(max_length=64)
    team = models.ForeignKey(Team, on_delete=models.SET_NULL, null=True, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]


class NotificationOptOut(models.Model):
    """A user who does not want e-mails of one kind (all kinds are on by default)."""

    class Kind(models.TextChoices):
        NEW_REQUEST = "new_request", "new request (admins)"
        APPROVED = "approved", "request approved"
        REJECTED = "rejected", "request rejected"
        APPLIED = "applied", "quota applied"
        FAILED = "failed", "apply failed"
        EXPIRING = "expiring", "grant expiring soon"
        STARTING = "starting", "booking starting soon"
        EXPIRED = "expired", "grant expired"
        RECLAIM = "reclaim", "idle GPUs of a grant to be taken back, or taken back"
        CONFIRM = "confirm", "quota lowering below usage needs confirmation (admins)"
        COMMENT = "comment", "a comment on a request (yours, your team's, or one you commented on)"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_opt_outs"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "kind"], name="optout_unique"),
        ]


from .models_feeds import CalendarFeed  # noqa: E402,F401  (a model of this app, own module)
from .models_kueue import TeamQueue  # noqa: E402,F401  (a model of this app, own module)
from .models_reclaim import GrantReclaim, ReclaimPolicy  # noqa: E402,F401  (own module)
