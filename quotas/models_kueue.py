"""A team's Kueue ClusterQueue on one cluster: what admins set and what Kueue reports.

Only clusters whose enforcement is Kueue have these (quotas/kueue.py builds the objects).
The nominal quota is never stored here: it is computed from the team's active grants at
apply time, as the ResourceQuota's ``hard`` is.
"""

from __future__ import annotations

import uuid

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from inventory.models import Cluster

# Kueue's cohortName: a DNS subdomain of at most 253 characters
# (apis/kueue/v1beta2/clusterqueue_types.go, CohortReference).
COHORT_NAME = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "Use a DNS subdomain: lower-case letters, digits, '-' and '.'.",
)


# Kueue's preemption policies (apis/kueue/v1beta2/clusterqueue_types.go, v0.17.0):
# reclaimWithinCohort Never|LowerPriority|Any, borrowWithinCohort.policy Never|LowerPriority,
# both defaulted to Never.
RECLAIM = [("Never", "Never"), ("LowerPriority", "LowerPriority"), ("Any", "Any")]
BORROW = [("Never", "Never"), ("LowerPriority", "LowerPriority")]
# Its webhook (pkg/webhooks/common.go validateFairSharing): a weight is 0 or above 10^-9;
# three decimals here, so any positive value stored is above it.
WEIGHT_PLACES = 3


def weight_text(weight) -> str:
    """A weight as Kueue stores the quantity sent: "2", "0.5" (no exponent, no trailing 0)."""
    return format(weight.normalize(), "f")


class TeamQueue(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey("quotas.Team", on_delete=models.CASCADE, related_name="queues")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="team_queues")
    cohort = models.CharField(
        max_length=253, blank=True, validators=[COHORT_NAME],
        help_text="Kueue cohort the team's ClusterQueue borrows and lends in (empty: none)",
    )  # fmt: skip
    borrowing_limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="GPUs per class the queue may borrow from its cohort (empty: no limit)",
    )  # fmt: skip
    lending_limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="GPUs per class of unused quota the cohort may borrow (empty: all of it)",
    )  # fmt: skip
    fair_weight = models.DecimalField(
        max_digits=9, decimal_places=WEIGHT_PLACES, null=True, blank=True,
        validators=[MinValueValidator(0)],
        help_text="Kueue fairSharing.weight: the queue's share of what the cohort lends, "
        "relative to the others' (empty: Kueue's default, 1; 0: borrows only what nobody "
        "else wants). Used when fair sharing is enabled in Kueue's configuration.",
    )  # fmt: skip
    reclaim_within_cohort = models.CharField(
        max_length=20, choices=RECLAIM, default="Never",
        help_text="Kueue preemption.reclaimWithinCohort: whether the queue's pending work may "
        "preempt workloads other queues run on GPUs borrowed from its nominal quota",
    )  # fmt: skip
    borrow_within_cohort = models.CharField(
        max_length=20, choices=BORROW, default="Never",
        help_text="Kueue preemption.borrowWithinCohort.policy: whether the queue may preempt "
        "lower-priority workloads of the cohort to borrow (needs reclaim not Never; classical "
        "preemption only, not with fair sharing)",
    )  # fmt: skip
    # The ClusterQueue's status as last read (after an apply or a drift check), and the
    # GPUs of the team's workloads, admitted and pending, per namespace (quotas/kueue.py).
    status = models.JSONField(default=dict, blank=True)
    workloads = models.JSONField(default=dict, blank=True)
    status_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["cluster__name", "team__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "cluster"], name="teamqueue_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.slug}/{self.team.slug}"

    @property
    def weight_text(self) -> str:
        """The fair-sharing weight as sent to Kueue; "1" (Kueue's default) when none is set."""
        return "1" if self.fair_weight is None else weight_text(self.fair_weight)

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.cluster_id and not self.cluster.is_kueue:
            raise ValidationError({"cluster": f"Cluster {self.cluster.slug} does not use Kueue."})
        if not self.cohort and (self.borrowing_limit is not None or self.lending_limit is not None):
            # Kueue's webhook: "must be nil when cohort is empty" (clusterqueue_webhook.go).
            raise ValidationError(
                {"cohort": "Borrowing and lending limits need a cohort; set one or clear them."}
            )
        if self.reclaim_within_cohort == "Never" and self.borrow_within_cohort != "Never":
            # Kueue's CEL rule on ClusterQueuePreemption and its webhook (validatePreemption).
            raise ValidationError({"borrow_within_cohort": (
                "Borrowing by preemption needs reclaimWithinCohort other than Never "
                "(Kueue: reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never)."
            )})  # fmt: skip
