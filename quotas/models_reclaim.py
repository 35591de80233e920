"""Idle grants reclaimed by a policy teams can see (issue #25 section 2).

A :class:`ReclaimPolicy` (per cluster, optionally per GPU class; off by default) says after
how many idle hours a grant's unused part is announced, how long the team has to answer,
and how long a manager's "still needed" holds it. A :class:`GrantReclaim` is one such
announcement for one namespace, class and resource: warned, then held (a manager's answer),
lowered (the grace ended) or withdrawn (the GPUs were used again, the grant ended, the
policy was turned off). The rules live in quotas/reclaim.py; what telemetry says is
unused, in telemetry/reclaim.py.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from inventory.models import GPU_RESOURCE, Cluster, GpuClass

MAX_HOURS = 24 * 30


def _hours(default: int, help_text: str, minimum: int = 1):
    return models.PositiveIntegerField(
        default=default,
        validators=[MinValueValidator(minimum), MaxValueValidator(MAX_HOURS)],
        help_text=help_text,
    )


class ReclaimPolicy(models.Model):
    """When the unused part of a cluster's (or one class's) grants goes back to the pool."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="reclaim_policies")
    # Null: every class of the cluster that has no policy of its own (and any-class grants).
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    enabled = models.BooleanField(default=False, help_text="off: nothing is announced or lowered")
    idle_hours = _hours(24, "hours a grant's GPUs stay unused before the team is warned")
    grace_hours = _hours(48, "hours between the warning and the lowering")
    hold_hours = _hours(168, "hours a manager's 'still needed' holds the grant")
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["cluster__name", "gpu_class__name"]
        verbose_name_plural = "reclaim policies"
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "gpu_class"], name="reclaimpolicy_unique", nulls_distinct=False
            ),
        ]

    def __str__(self) -> str:
        scope = self.gpu_class.name if self.gpu_class_id else "every class"
        return f"reclaim policy of {self.cluster} ({scope})"

    def snapshot(self) -> dict:
        return {
            "enabled": self.enabled,
            "idle_hours": self.idle_hours,
            "grace_hours": self.grace_hours,
            "hold_hours": self.hold_hours,
        }


class GrantReclaimQuerySet(models.QuerySet):
    def open(self) -> GrantReclaimQuerySet:
        return self.filter(status__in=GrantReclaim.OPEN)


class GrantReclaim(models.Model):
    """One announcement that part of a namespace's grants of one class will go back."""

    class Status(models.TextChoices):
        WARNED = "warned", "warned"
        HELD = "held", "still needed"
        LOWERED = "lowered", "lowered"
        WITHDRAWN = "withdrawn", "withdrawn"

    OPEN = (Status.WARNED, Status.HELD)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    policy = models.ForeignKey(ReclaimPolicy, on_delete=models.CASCADE, related_name="reclaims")
    namespace = models.ForeignKey(
        "quotas.TeamNamespace", on_delete=models.CASCADE, related_name="reclaims"
    )
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    resource = models.CharField(max_length=100, default=GPU_RESOURCE)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.WARNED)
    # At the warning: granted, what the policy may take back, and the evidence (hours
    # judged, GPUs held now, the most held in a busy hour, the telemetry's source).
    granted = models.PositiveIntegerField()
    unused = models.PositiveIntegerField()
    basis = models.JSONField(default=dict)
    warned_at = models.DateTimeField()
    grace_ends_at = models.DateTimeField()
    # A manager's (or an admin's) "still needed".
    reason = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    answered_at = models.DateTimeField(null=True, blank=True)
    held_until = models.DateTimeField(null=True, blank=True)
    # The end: lowered by how much, or why it was withdrawn.
    closed_at = models.DateTimeField(null=True, blank=True)
    lowered_by = models.PositiveIntegerField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True)

    objects = GrantReclaimQuerySet.as_manager()

    class Meta:
        ordering = ["-warned_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "gpu_class", "resource"],
                condition=Q(status__in=["warned", "held"]),
                name="grantreclaim_one_open",
                nulls_distinct=False,
            ),
        ]
        indexes = [models.Index(fields=["status", "grace_ends_at"], name="grantreclaim_due")]

    def __str__(self) -> str:
        return f"reclaim of {self.unused} {self.resource} in {self.namespace} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN

    @property
    def team(self):
        return self.namespace.team

    @property
    def class_name(self) -> str:
        return self.gpu_class.name if self.gpu_class_id else "any class"
