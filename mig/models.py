"""MIG requests and the steps of their reconfiguration run.

A ``MigRequest`` asks for a MIG layout on some GPUs of one node; an admin approves it
with a node and a drain policy, and ``mig.coordinator`` then walks its ``MigStep`` rows
one at a time. The rows are the coordinator's whole state, so a run survives a worker
crash: whichever worker claims the request next carries on at the first unfinished step.
Transitions are model methods that refuse illegal moves; ``mig.services`` wraps them with
audit events and side effects.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from inventory.models import Cluster, Node
from quotas.models import Team, TeamNamespace


class TransitionError(Exception):
    """An illegal state change (e.g. approving a cancelled request)."""


class MigRequest(models.Model):
    class Kind(models.TextChoices):
        APPLY = "apply", "apply a layout"
        REVERT = "revert", "revert a failed run"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        REJECTED = "rejected"
        CANCELLED = "cancelled"

    class DrainPolicy(models.TextChoices):
        WAIT = "wait", "wait until the node's GPUs are idle (with a timeout)"
        EVICT = "evict", "evict GPU pods through the Eviction API (PDBs respected)"

    OPEN = (Status.PENDING, Status.APPROVED, Status.RUNNING)
    ACTIVE = (Status.APPROVED, Status.RUNNING)  # a run holds the node
    TERMINAL = (Status.SUCCEEDED, Status.FAILED, Status.REJECTED, Status.CANCELLED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.APPLY)
    # For a revert: the failed run whose node it puts back to its previous config.
    reverts = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="reverted_by"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="mig_requests")
    namespace = models.ForeignKey(
        TeamNamespace, on_delete=models.PROTECT, related_name="mig_requests"
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="mig_requests")
    product = models.CharField(max_length=50, help_text="catalog short name, e.g. A100-80GB")
    # Instances per GPU, e.g. {"3g.40gb": 1, "1g.10gb": 2}; the same on each of ``gpus`` GPUs.
    layout = models.JSONField(default=dict)
    gpus = models.PositiveIntegerField()
    # Admins may ask for a specific node when filing; the approver picks ``node``.
    requested_node = models.ForeignKey(
        Node, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    justification = models.TextField(max_length=2000)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="mig_requests"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)

    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, max_length=2000)
    drain_policy = models.CharField(max_length=10, choices=DrainPolicy.choices, blank=True)
    node = models.ForeignKey(
        Node, on_delete=models.PROTECT, null=True, blank=True, related_name="mig_runs"
    )
    strategy = models.CharField(max_length=10, blank=True)  # the node's, at approval
    config_name = models.CharField(max_length=100, blank=True)  # the mig-parted config set
    # nvidia.com/mig.config of the node before this run touched it (for a revert).
    previous_config = models.CharField(max_length=100, blank=True)
    # {"nvidia.com/mig-3g.40gb": 2}: what the grant step gave the namespace.
    granted = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    # Run bookkeeping: a worker holds the lease while it executes one step.
    lease_until = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gt=0), name="migrequest_gpus_positive"),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "rejected", "cancelled"])
                | (Q(node__isnull=False) & ~Q(drain_policy="") & ~Q(config_name="")),
                name="migrequest_run_has_node_policy_config",
                violation_error_message="An approved MIG request needs a node, a drain "
                "policy and a config name.",
            ),
            # Never two runs on one node at once. The partial unique index also serves
            # "active run on node" (approval's check, the node page).
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(status__in=["approved", "running"]),
                name="migrequest_one_active_run_per_node",
                violation_error_message="Another MIG run is active on this node.",
            ),
        ]
        indexes = [
            # Serves the re-dispatcher: active runs whose next step is due.
            models.Index(
                fields=["next_run_at"],
                condition=Q(status__in=["approved", "running"]),
                name="migrequest_due",
            ),
            # Serves the admin queue: pending requests, oldest first.
            models.Index(
                fields=["created_at"],
                condition=Q(status="pending"),
                name="migrequest_pending_queue",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpus}x {self.product} {self.layout_text} for {self.namespace}"

    @property
    def layout_text(self) -> str:
        return "+".join(f"{n}x{p}" for p, n in sorted(self.layout.items())) or "no MIG"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN

    @property
    def can_revert(self) -> bool:
        """A failed run that changed the node's config label can be put back."""
        if self.kind != self.Kind.APPLY or self.status != self.Status.FAILED:
            return False
        if not self.previous_config or self.previous_config == self.config_name:
            return False
        return self.steps.filter(name=MigStep.Name.SET_LABEL, status=MigStep.Status.DONE).exists()

    def _move(self, to: str, allowed_from: tuple[str, ...]) -> str:
        if self.status not in allowed_from:
            raise TransitionError(f"A {self.status} MIG request cannot become {to}.")
        before, self.status, self.updated_at = self.status, to, timezone.now()
        return before

    def approve(self, by, *, node: Node, drain_policy: str, strategy: str, config_name: str,
                note: str = "") -> None:  # fmt: skip
        self._move(self.Status.APPROVED, (self.Status.PENDING,))
        self.decided_by, self.decided_at, self.decision_note = by, timezone.now(), note
        self.node, self.drain_policy, self.strategy = node, drain_policy, strategy
        self.config_name, self.previous_config = config_name, node.mig_config

    def reject(self, by, note: str) -> None:
        self._move(self.Status.REJECTED, (self.Status.PENDING,))
        self.decided_by, self.decided_at, self.decision_note = by, timezone.now(), note
        self.finished_at = self.decided_at

    def cancel(self) -> None:
        self._move(self.Status.CANCELLED, (self.Status.PENDING,))
        self.finished_at = timezone.now()

    def succeed(self) -> None:
        self._move(self.Status.SUCCEEDED, (self.Status.RUNNING,))
        self.finished_at, self.lease_until, self.next_run_at = timezone.now(), None, None

    def fail(self, error: str) -> None:
        self._move(self.Status.FAILED, self.ACTIVE)
        self.error = error[:4000]
        self.finished_at, self.lease_until, self.next_run_at = timezone.now(), None, None


class MigStep(models.Model):
    """One step of a run, in order; the coordinator executes the first unfinished one."""

    class Name(models.TextChoices):
        CORDON = "cordon"
        DRAIN = "drain"
        WRITE_CONFIG = "write_config", "write config"
        WAIT_MOUNT = "wait_mount", "wait for the config mount"
        SET_LABEL = "set_label", "set label"
        WAIT_STATE = "wait_state", "wait for mig-manager"
        WAIT_DEVICES = "wait_devices", "wait for the device plugin"
        UNCORDON = "uncordon"
        RESYNC = "resync"
        GRANT = "grant"

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        SKIPPED = "skipped"

    FINISHED = (Status.DONE, Status.SKIPPED)

    request = models.ForeignKey(MigRequest, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=20, choices=Name.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    detail = models.TextField(blank=True)
    # Facts a later attempt or step needs (e.g. whether the node was cordoned before).
    data = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["request", "position"]
        constraints = [
            models.UniqueConstraint(fields=["request", "name"], name="migstep_unique_name"),
            models.UniqueConstraint(fields=["request", "position"], name="migstep_unique_pos"),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.status}"

    @property
    def ready_at(self):
        """For a waiting ``wait_mount``: when mig-manager's mounted config has the config."""
        from datetime import datetime

        value = (self.data or {}).get("ready_at")
        try:
            return datetime.fromisoformat(value) if value else None
        except ValueError:
            return None
