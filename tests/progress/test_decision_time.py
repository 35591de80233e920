"""Typical time to a decision (quotas/decision_time.py) over real rows, and its place on a
pending request's page ("What happens next")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from mig.models import MigRequest
from quotas import decision_time
from quotas.models import Operation, QuotaRequest

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def _decided(w, *, waited: timedelta, ago: timedelta, kind="new", status="approved"):
    """A quota request filed ``waited`` before its decision, decided ``ago``."""
    decided = NOW - ago
    return QuotaRequest.objects.create(
        team=w["vision"], namespace=w["ns"], kind=kind, resource="nvidia.com/gpu", amount=1,
        starts_at=decided - waited, justification="measured", requested_by=w["requester"],
        status=status, decided_by=w["admin"], decided_at=decided, created_at=decided - waited,
    )  # fmt: skip


def _mig_decided(w, *, waited: timedelta, ago: timedelta, status="rejected"):
    decided = NOW - ago
    return MigRequest.objects.create(
        team=w["vision"], namespace=w["ns"], cluster=w["cluster"], product="A100-80GB",
        layout={"7g.80gb": 1}, gpus=1, justification="measured", requested_by=w["requester"],
        status=status, decided_by=w["admin"], decided_at=decided, finished_at=decided,
        created_at=decided - waited,
    )  # fmt: skip


def test_no_decisions_yet(world):
    # the fixture's request is pending: no decision to measure
    typical = decision_time.quota_decisions(now=NOW)
    assert (typical.count, typical.median, typical.text) == (0, None, "")
    assert decision_time.mig_decisions(now=NOW).median is None
    assert decision_time.quota_applies(now=NOW).median is None


def test_median_and_count_over_the_last_90_days(world):
    hour = timedelta(hours=1)
    _decided(world, waited=1 * hour, ago=timedelta(days=1))
    _decided(world, waited=3 * hour, ago=timedelta(days=10), status="rejected")
    _decided(world, waited=8 * hour, ago=timedelta(days=89), status="applied")
    # left out: older than 90 days, a release (granted at once), a cancelled request
    _decided(world, waited=100 * hour, ago=timedelta(days=91))
    _decided(world, waited=timedelta(0), ago=timedelta(days=2), kind="release")
    QuotaRequest.objects.filter(pk=world["req"].pk).update(status="cancelled")
    typical = decision_time.quota_decisions(now=NOW)
    assert typical.count == 3
    assert typical.median == 3 * hour
    assert typical.text == "3 h"


def test_an_even_count_takes_the_middle_of_the_two(world):
    _decided(world, waited=timedelta(minutes=10), ago=timedelta(days=1))
    _decided(world, waited=timedelta(minutes=30), ago=timedelta(days=1))
    typical = decision_time.quota_decisions(now=NOW)
    assert (typical.count, typical.median) == (2, timedelta(minutes=20))


def test_mig_requests_are_measured_apart(world):
    _decided(world, waited=timedelta(hours=1), ago=timedelta(days=1))
    _mig_decided(world, waited=timedelta(days=2), ago=timedelta(days=3))
    _mig_decided(world, waited=timedelta(days=2, hours=4), ago=timedelta(days=3))
    _mig_decided(world, waited=timedelta(days=5), ago=timedelta(days=3))
    mig = decision_time.mig_decisions(now=NOW)
    assert (mig.count, mig.median, mig.text) == (3, timedelta(days=2, hours=4), "2 days 4 h")
    assert decision_time.quota_decisions(now=NOW).count == 1


def test_typical_apply_time_counts_succeeded_approval_applies(world):
    def op(seconds: float, reason="approval", status=Operation.Status.SUCCEEDED):
        created = NOW - timedelta(days=1)
        return Operation.objects.create(
            namespace=world["ns"], reason=reason, status=status, created_at=created,
            finished_at=created + timedelta(seconds=seconds),
        )  # fmt: skip

    op(2), op(4), op(30, reason="renewal")
    op(600, reason="drift"), op(900, status=Operation.Status.FAILED)  # not counted
    typical = decision_time.quota_applies(now=NOW)
    assert (typical.count, typical.median, typical.text) == (3, timedelta(seconds=4), "4 s")


@pytest.mark.parametrize(
    "value, text",
    [(timedelta(0), "1 s"), (timedelta(seconds=45), "45 s"), (timedelta(minutes=12), "12 min"),
     (timedelta(hours=3, minutes=20), "3 h 20 min"), (timedelta(hours=5), "5 h"),
     (timedelta(days=1), "1 day"), (timedelta(days=2, hours=4, minutes=9), "2 days 4 h")],
)  # fmt: skip
def test_duration_text(value, text):
    assert decision_time.duration_text(value) == text


def test_pending_page_says_what_happens_next_with_the_typical_time(client, world):
    page = reverse("quotas:request", args=[world["req"].pk])
    client.force_login(world["requester"])
    html = client.get(page).content.decode()
    assert "What happens next" in html
    assert "No decisions in the last 90 days yet" in html
    assert "usually within a minute" in html
    _decided(world, waited=timedelta(minutes=40), ago=timedelta(days=1))
    html = client.get(page).content.decode()
    assert "Typical time to a decision: <strong>40 min</strong>" in html
    assert "median of 1 decision in the last 90 days" in html


def test_a_decided_request_has_no_what_happens_next(client, world):
    req = _decided(world, waited=timedelta(minutes=5), ago=timedelta(days=1), status="rejected")
    client.force_login(world["requester"])
    html = client.get(reverse("quotas:request", args=[req.pk])).content.decode()
    assert "What happens next" not in html


def test_mig_pending_page_shows_the_mig_typical_time(client, world):
    _mig_decided(world, waited=timedelta(hours=2), ago=timedelta(days=1))
    client.force_login(world["requester"])
    html = client.get(reverse("mig:request", args=[world["mig"].pk])).content.decode()
    assert "Typical time to a decision: <strong>2 h</strong>" in html
    assert "median of 1 MIG decision in the last 90 days" in html
