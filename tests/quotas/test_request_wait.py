"""An estimated wait for a pending quota request (issue #25 section 4): when the capacity it
needs frees (grants' ends, the approval's own figure) and the median time to a decision,
with its basis, or "no estimate" and why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from inventory.classes import refresh
from quotas.models import QuotaRequest
from quotas.request_wait import estimate
from tests.conftest import api_for
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


@pytest.fixture
def world():
    with time_machine.travel(NOW, tick=False):
        cluster = make_cluster("lab")
        make_node(cluster, "a100-0", gpus=8)
        (a100,) = refresh(cluster)
        alice = make_user("alice")
        vision = make_team("vision", members=[alice])
        nlp = make_team("nlp")
        ns_v = make_namespace(vision, cluster, "ml-vision")
        ns_n = make_namespace(nlp, cluster, "nlp-main")
        make_grant(ns_n, 6, days=2, gpu_class=a100)  # 6 of 8 until NOW + 2 days
    return {"cluster": cluster, "a100": a100, "alice": alice, "vision": vision, "ns_v": ns_v}


def ask(world, amount, *, days=None, created=NOW):
    return QuotaRequest.objects.create(
        team=world["vision"], namespace=world["ns_v"], resource=GPU, amount=amount,
        gpu_class=world["a100"], requested_by=world["alice"], justification="estimate me",
        starts_at=created, ends_at=None if days is None else created + timedelta(days=days),
        created_at=created,
    )  # fmt: skip


def decisions(world, *hours):
    """Decided requests, each decided ``hours`` after it was filed (within 90 days)."""
    for n, h in enumerate(hours):
        filed = NOW - timedelta(days=10 + n)
        r = ask(world, 1, created=filed)
        QuotaRequest.objects.filter(pk=r.pk).update(
            status=QuotaRequest.Status.REJECTED, decided_at=filed + timedelta(hours=h)
        )


def test_the_capacity_frees_when_a_grant_ends_and_the_decision_follows(world):
    decisions(world, 1, 2, 3)  # median 2 h
    with time_machine.travel(NOW, tick=False):
        wait = estimate(ask(world, 4))
    assert wait.at == NOW + timedelta(days=2)  # the later of the two: nlp's grant ends
    assert "the capacity frees at 2026-12-09 09:00 UTC (in 2 days), when grants end" in wait.text
    assert "4 asked, 2 free to grant over its window now" in wait.text
    assert "median of 2 h (3 decisions in 90 days)" in wait.text


def test_room_now_means_the_typical_decision_time(world):
    decisions(world, 1, 2, 3)
    with time_machine.travel(NOW, tick=False):
        wait = estimate(ask(world, 2))
    assert wait.at == NOW + timedelta(hours=2)
    assert wait.text.startswith("Estimated decision: 2026-12-07 11:00 UTC (in 2 h): the capacity")
    with time_machine.travel(NOW + timedelta(hours=5), tick=False):
        late = estimate(QuotaRequest.objects.filter(amount=2).get())
    assert late.at == NOW + timedelta(hours=5) and "waited longer than that" in late.text


def test_no_estimate_without_decisions_or_when_nothing_ends(world):
    with time_machine.travel(NOW, tick=False):
        wait = estimate(ask(world, 4))
        assert wait.at is None
        assert "0 decision(s) in the last 90 days (an estimate needs 3)" in wait.text
        assert "frees at 2026-12-09 09:00 UTC" in wait.text
        decisions(world, 1, 1, 1)
        # a window that ends before nlp's grant does: nothing frees inside it
        short = estimate(ask(world, 4, days=1))
        assert short.at is None and "no grant that holds them ends before the window" in short.text
        make_grant(world["ns_v"].__class__.objects.get(name="nlp-main"), 5, gpu_class=world["a100"])
        never = estimate(ask(world, 4))  # 5 more held for good: 3 free after the end
        assert never.at is None and "No estimate" in never.text


def test_the_page_and_the_api_show_the_estimate(world, client):
    decisions(world, 1, 2, 3)
    with time_machine.travel(NOW, tick=False):
        req = ask(world, 4)
        client.force_login(world["alice"])
        page = client.get(reverse("quotas:request", args=[req.pk])).content.decode()
        assert "data-wait-estimate>Estimated decision: 2026-12-09 09:00 UTC" in page
        body = api_for(world["alice"]).get(f"/api/v1/quota-requests/{req.pk}/").json()
        assert body["wait_estimate"]["at"] == "2026-12-09T09:00:00Z"
        assert body["wait_estimate"]["text"].startswith("Estimated decision:")
        done = QuotaRequest.objects.filter(status=QuotaRequest.Status.REJECTED).first()
        other = api_for(world["alice"]).get(f"/api/v1/quota-requests/{done.pk}/").json()
        assert other["wait_estimate"] is None  # decided: nothing to wait for
