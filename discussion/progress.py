"""Whether a request page's progress part is live (polled), and what it shows.

A quota request is live while it is approved but not applied yet and one of its apply
operations is pending (or retrying) or running. A MIG request is live while its run
holds the node (approved, or running its steps). Once the work ends the fragment is
served without its polling attributes, so the browser stops asking.
"""

from __future__ import annotations

from django.urls import reverse

from mig.models import MigRequest
from quotas.models import Operation, QuotaRequest

POLL_EVERY = "2s"
LIVE_OPERATIONS = (Operation.Status.PENDING, Operation.Status.RUNNING)


def quota_live(req: QuotaRequest, operations: list[Operation]) -> bool:
    if req.status not in (QuotaRequest.Status.APPROVED, QuotaRequest.Status.APPLYING):
        return False
    return any(op.status in LIVE_OPERATIONS for op in operations)


def mig_live(req: MigRequest) -> bool:
    return req.status in MigRequest.ACTIVE


def quota_context(req: QuotaRequest, operations: list[Operation]) -> dict:
    """The keys the progress partial of a quota request page needs (with the timeline)."""
    return {
        "live": quota_live(req, operations),
        "poll_every": POLL_EVERY,
        "progress_url": reverse("discussion:request-progress", args=[req.pk]),
        "page_url": reverse("quotas:request", args=[req.pk]),
    }


def mig_context(req: MigRequest) -> dict:
    return {
        "live": mig_live(req),
        "poll_every": POLL_EVERY,
        "progress_url": reverse("discussion:mig-request-progress", args=[req.pk]),
        "page_url": reverse("mig:request", args=[req.pk]),
    }
