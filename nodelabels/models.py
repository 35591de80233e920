"""Label sets the portal keeps on nodes, the per-node record of what it applied, and the
outbox of label operations.

A ``LabelSet`` says "these labels on these nodes" (explicit names, or every node of one
GPU product). ``NodeLabelState`` remembers, per node, exactly which keys and values the
portal last applied: removal only ever touches those keys, and only while the node still
carries the portal's value. ``LabelOperation`` is the outbox row a worker claims to make
one node's labels match the enabled sets (see ``nodelabels.services``).
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from inventory.models import Cluster, Node

# Kubernetes label syntax (apimachinery validation.IsQualifiedName / IsValidLabelValue).
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NAME_MAX, PREFIX_MAX = 63, 253
# Prefixes owned by GPU Feature Discovery / the GPU Operator and by the kubelet & core.
RESERVED_PREFIXES = ("nvidia.com", "kubernetes.io", "k8s.io")


def label_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a label key the portal may manage (empty list: it is)."""
    if not isinstance(key, str) or not key:
        return ["A label key cannot be empty."]
    prefix, _, name = key.rpartition("/")
    errors = []
    if "/" in name or (prefix and prefix.count("/")):
        return [f"'{key}': a key is an optional DNS prefix, one '/', and a name."]
    if key.startswith("/"):
        errors.append(f"'{key}': the prefix before '/' cannot be empty.")
    elif prefix:
        if len(prefix) > PREFIX_MAX or not _DNS_SUBDOMAIN.match(prefix):
            errors.append(
                f"'{key}': the prefix must be a DNS subdomain (lower-case letters, digits, "
                f"'-' and '.', at most {PREFIX_MAX} characters)."
            )
        elif any(prefix == p or prefix.endswith("." + p) for p in RESERVED_PREFIXES):
            errors.append(
                f"'{key}': keys under {prefix}/ are reserved (NVIDIA GPU Feature Discovery, "
                "the kubelet and Kubernetes own them)."
            )
    if not name:
        errors.append(f"'{key}': the name after the prefix cannot be empty.")
    elif len(name) > NAME_MAX:
        errors.append(f"'{key}': the name part must be at most {NAME_MAX} characters.")
    elif not _NAME.match(name):
        errors.append(
            f"'{key}': the name must start and end with a letter or digit and contain only "
            "letters, digits, '-', '_' and '.'."
        )
    return errors


def label_value_errors(key: str, value) -> list[str]:
    """Why ``value`` is not a valid label value (empty list: it is)."""
    if not isinstance(value, str):
        return [f"'{key}': the value must be a string."]
    if len(value) > NAME_MAX:
        return [f"'{key}': the value must be at most {NAME_MAX} characters."]
    if value and not _NAME.match(value):
        return [
            f"'{key}': the value must be empty, or start and end with a letter or digit and "
            "contain only letters, digits, '-', '_' and '.'."
        ]
    return []


def node_name_errors(name) -> list[str]:
    if not isinstance(name, str) or len(name) > PREFIX_MAX or not _DNS_SUBDOMAIN.match(name):
        return [f"'{name}' is not a valid node name (a DNS subdomain)."]
    return []


class LabelSetQuerySet(models.QuerySet):
    def enabled(self) -> LabelSetQuerySet:
        return self.filter(enabled=True)


class LabelSet(models.Model):
    """Labels the portal keeps on a group of nodes of one cluster."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="label_sets")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    # {"example.org/gpu-type": "a100-80gb"}
    labels = models.JSONField(default=dict, blank=True)  # clean() asks for at least one
    # The node selector: explicit node names, or every node whose base GPU product (GFD
    # nvidia.com/gpu.product without -SHARED / -MIG-INVALID) is ``gpu_product``.
    node_names = models.JSONField(default=list, blank=True)
    gpu_product = models.CharField(max_length=100, blank=True)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = LabelSetQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="labelset_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def selector_display(self) -> str:
        if self.gpu_product:
            return f"GPU product {self.gpu_product}"
        return "nodes " + ", ".join(self.node_names)

    def matches(self, node: Node) -> bool:
        """Does the selector pick ``node`` (a present node of the same cluster)?"""
        if node.cluster_id != self.cluster_id or node.gone_at is not None:
            return False
        if self.gpu_product:
            return node.base_product == self.gpu_product
        return node.name in self.node_names

    def clean(self) -> None:
        """Shape of labels and selector; conflicts with other sets need the database and
        are checked by ``nodelabels.services.check_conflicts``."""
        errors: dict[str, list[str]] = {}
        if not isinstance(self.labels, dict) or not self.labels:
            errors["labels"] = ["Give at least one label, as {key: value}."]
        else:
            messages = []
            for key, value in self.labels.items():
                messages += label_key_errors(key) or label_value_errors(key, value)
            if messages:
                errors["labels"] = messages
        names = self.node_names
        if not isinstance(names, list):
            errors["node_names"] = ["Give a list of node names."]
        else:
            messages = [m for name in names for m in node_name_errors(name)]
            if len(set(names)) != len(names):
                messages.append("A node is listed twice.")
            if messages:
                errors["node_names"] = messages
            elif bool(names) == bool(self.gpu_product):
                errors["node_names"] = [
                    "Select nodes either by name or by GPU product (exactly one of the two)."
                ]
        if errors:
            raise ValidationError(errors)


class NodeLabelState(models.Model):
    """What the portal last applied to one node: the only labels it may ever remove."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    node_name = models.CharField(max_length=253)
    applied = models.JSONField(default=dict, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    # Last drift check that read this node from the API.
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "node_name"], name="nodelabelstate_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.node_name}"


class LabelOperation(models.Model):
    """Outbox row: make one node's portal-managed labels match the enabled label sets.

    Written in the same transaction as the change that needs it and dispatched on commit;
    a worker claims it with a conditional UPDATE; beat re-dispatches rows that stalled.
    The desired labels are recomputed at apply time, so running it late or twice is safe.
    """

    class Reason(models.TextChoices):
        APPLY = "apply"
        REMOVE = "remove"
        DRIFT = "drift"

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    OPEN = (Status.PENDING, Status.RUNNING)
    TERMINAL = (Status.SUCCEEDED, Status.FAILED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="label_operations")
    node_name = models.CharField(max_length=253)
    reason = models.CharField(max_length=10, choices=Reason.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # What the node should carry (set when the worker ran) and the keys it removed.
    desired = models.JSONField(default=dict, blank=True)
    removed = models.JSONField(default=list, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=8)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    lease_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # Two workers never patch the same node at once: the second claim fails.
            models.UniqueConstraint(
                fields=["cluster", "node_name"],
                condition=Q(status="running"),
                name="labelop_one_running_per_node",
            ),
        ]
        indexes = [
            # Serves the re-dispatcher and "is this node busy": unfinished operations.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status__in=["pending", "running"]),
                name="labelop_due",
            ),
            # Serves the latest operation per node on the list and node pages.
            models.Index(fields=["cluster", "node_name", "-created_at"], name="labelop_node"),
        ]

    def __str__(self) -> str:
        return f"{self.reason} labels on {self.node_name} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN

    def retry_or_fail(self, error: str, *, permanent: bool, now: datetime, delay) -> None:
        """The transition after a failed attempt (caller saves): back to pending with a
        delay, or failed for good when the error is permanent or attempts are spent."""
        if self.status != self.Status.RUNNING:
            raise ValueError(f"operation {self.pk} is {self.status}, not running")
        self.last_error, self.lease_until = error[:2000], None
        if permanent or self.attempts >= self.max_attempts:
            self.status, self.finished_at = self.Status.FAILED, now
        else:
            self.status, self.next_attempt_at = self.Status.PENDING, now + delay
