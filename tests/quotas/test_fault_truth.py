"""State that tells the truth after a fault (issue #11 section 4).

A permanent apply failure withdraws the grant (capacity, desired quota and audit agree);
the drift check does not call the portal's own missing change an outside edit; a live
worker keeps its lease by heartbeat, a dead one's operation is reclaimed with its
attempt closed; a deleted managed quota is recreated even with an operation in flight;
members' pending requests are capped per team and the approval queue is paginated.
Faults come from the simulated cluster (simcluster/faults.py) over HTTP.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from quotas import services
from quotas.apply import desired_hard, redispatch_due, run_operation
from quotas.capacity import free
from quotas.models import AuditEvent, Grant, Operation, OperationAttempt, QuotaRequest
from quotas.services import RequestData
from quotas.tasks import reconcile_quotas
from tests.conftest import api_for, kill, wait_for

GPU = "nvidia.com/gpu"
QUOTA = "gpu-portal-quota"
WHY = "fine-tuning run for the benchmark paper"
KEY = f"requests.{GPU}"


def submit(s, amount: int, user=None) -> QuotaRequest:
    data = RequestData(team=s["team"], namespace=s["ns"], resource=GPU, amount=amount,
                       justification=WHY)  # fmt: skip
    return services.submit(user or s["alice"], data)


def approve(s, amount: int) -> QuotaRequest:
    return services.approve(submit(s, amount), s["admin"])


def pending_op() -> Operation:
    return Operation.objects.filter(status="pending").get()


def quota_hard(core) -> dict | None:
    try:
        return dict(core.read_namespaced_resource_quota(QUOTA, "vision").spec.hard)
    except ApiException:
        return None


def fail_quota_writes(sim) -> None:
    """Every call on ResourceQuotas answers 422: a permanent failure."""
    sim.faults.update(error_code=422, fail_after=1, path_regex="resourcequotas")


# -- (a) a permanent failure withdraws the grant ---------------------------------------------


@pytest.mark.django_db
def test_a_permanent_apply_failure_withdraws_the_grant_everywhere(setup, sim):
    core = setup["core"]
    approve(setup, 2)
    assert run_operation(pending_op().pk) == "succeeded"  # a managed namespace, 2 GPUs
    fail_quota_writes(sim)
    req = approve(setup, 3)
    assert run_operation(pending_op().pk) == "failed"
    req.refresh_from_db()
    grant = Grant.objects.get(pk=req.grant_id)
    assert req.status == "failed" and "withdrawn" in req.events.last().note
    assert grant.ended_at is not None and grant.state() == "apply_failed"
    # It reserves nothing and counts in no quota: capacity, desired state agree.
    now = timezone.now()
    assert free(setup["ns"].cluster, None, GPU, now, None).reserved == 2
    assert desired_hard(setup["ns"]) == {KEY: 2}
    event = AuditEvent.objects.get(action="grant.apply_failed")
    assert "422" in event.note and event.after["end_reason"] == "apply_failed"
    sim.faults.reset()
    # The follow-up apply brings the cluster back to the database; drift finds nothing.
    assert run_operation(pending_op().pk) == "succeeded"
    counts = reconcile_quotas()
    assert counts["reverted"] == counts["caught_up"] == 0
    assert quota_hard(core) == {KEY: "2"}
    assert not AuditEvent.objects.filter(action="quota.drift_reverted").exists()


@pytest.mark.django_db
def test_drift_does_not_call_the_portals_own_missing_change_an_outside_edit(setup, sim):
    core = setup["core"]
    approve(setup, 2)
    run_operation(pending_op().pk)
    fail_quota_writes(sim)
    services.set_baseline(setup["ns"], GPU, 1, setup["admin"])  # no request to withdraw
    assert run_operation(pending_op().pk) == "failed"
    sim.faults.reset()
    assert reconcile_quotas()["caught_up"] == 1
    assert not AuditEvent.objects.filter(action="quota.drift_reverted").exists()
    event = AuditEvent.objects.get(action="quota.catch_up")
    assert event.before == {KEY: "2"} and event.after == {KEY: "3"}
    assert "own change" in event.note and "422" in event.note
    assert run_operation(pending_op().pk) == "succeeded"
    assert quota_hard(core) == {KEY: "3"}
    # A real edit is still one.
    core.patch_namespaced_resource_quota(QUOTA, "vision", {"spec": {"hard": {KEY: "9"}}})
    assert reconcile_quotas()["reverted"] == 1
    assert AuditEvent.objects.get(action="quota.drift_reverted").note == "edited outside the portal"


# -- (b) dead claimants, missing quotas ------------------------------------------------------


def test_the_default_lease_is_short():
    assert django_settings.QUOTA_OPERATION_LEASE_SECONDS <= 60


@pytest.mark.django_db
def test_a_deleted_quota_is_recreated_while_an_operation_is_in_flight(setup):
    core = setup["core"]
    approve(setup, 3)
    run_operation(pending_op().pk)
    now = timezone.now()
    # Another operation of the namespace is claimed by a worker that is gone.
    stuck = Operation.objects.create(namespace=setup["ns"], reason="approval", status="running",
                                     attempts=1, started_at=now,
                                     lease_until=now + timedelta(minutes=5))  # fmt: skip
    core.delete_namespaced_resource_quota(QUOTA, "vision")
    assert reconcile_quotas()["recreated"] == 1
    assert reconcile_quotas()["recreated"] == 0  # one recreation waits already
    assert run_operation(pending_op().pk) == "succeeded"
    assert quota_hard(core) == {KEY: "3"}
    assert Operation.objects.get(pk=stuck.pk).status == "running"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_live_slow_worker_keeps_its_lease_by_heartbeat(setup, sim, start_worker):
    sim.faults.update(latency_ms=2500, path_regex="resourcequotas")
    start_worker(QUOTA_OPERATION_LEASE_SECONDS=1)
    req = approve(setup, 3)
    op = Operation.objects.get()
    deadline = time.monotonic() + 40
    while Operation.objects.get(pk=op.pk).status != "succeeded":
        redispatch_due()  # beat, impatient: must not take a live worker's operation
        assert time.monotonic() < deadline, "the operation did not finish"
        time.sleep(0.25)
    assert Operation.objects.get(pk=op.pk).attempts == 1
    assert QuotaRequest.objects.get(pk=req.pk).status == "applied"
    assert not AuditEvent.objects.filter(action="quota.worker_lost").exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_dead_workers_attempt_says_so_and_is_retried(setup, sim, start_worker):
    sim.faults.update(latency_ms=4000, path_regex="resourcequotas")
    first = start_worker(QUOTA_OPERATION_LEASE_SECONDS=1)
    approve(setup, 3)
    op = Operation.objects.get()
    wait_for(lambda: OperationAttempt.objects.filter(operation=op).exists())
    kill(first)
    sim.faults.reset()
    start_worker(QUOTA_OPERATION_LEASE_SECONDS=1)
    wait_for(lambda: redispatch_due() >= 0 and Operation.objects.get(pk=op.pk).status
             == "succeeded", timeout=30, interval=0.5)  # fmt: skip
    dead = OperationAttempt.objects.get(operation=op, number=1)
    assert dead.finished_at is not None and not dead.ok
    assert dead.worker and f"worker {dead.worker} lost" in dead.error
    assert "lease expired" in dead.error
    assert OperationAttempt.objects.get(operation=op, number=2).ok
    assert AuditEvent.objects.filter(action="quota.worker_lost").count() == 1
    assert quota_hard(setup["core"]) == {KEY: "3"}


# -- (d) the queue stays small ---------------------------------------------------------------


@pytest.mark.django_db
def test_members_pending_requests_are_capped_per_team(setup, settings):
    settings.QUOTA_MAX_PENDING_PER_TEAM = 2
    client = api_for(setup["alice"])
    body = {"team": "vision", "namespace": "vision", "resource": GPU, "amount": 1,
            "justification": WHY}  # fmt: skip
    for _ in range(2):
        assert client.post("/api/v1/quota-requests/", body, format="json").status_code == 201
    r = client.post("/api/v1/quota-requests/", body, format="json")
    assert r.status_code == 400
    assert "already has 2 pending request(s), the most allowed (2)" in str(r.json())
    assert "team" in str(r.json())
    # An admin filing on the team's behalf is not capped.
    submit(setup, 1, user=setup["admin"])
    assert QuotaRequest.objects.filter(status="pending").count() == 3


@pytest.mark.django_db
def test_the_approval_queue_is_paginated(setup, settings, client):
    settings.QUOTA_MAX_PENDING_PER_TEAM = 100
    for _ in range(23):
        submit(setup, 1)
    client.force_login(setup["admin"])
    first = client.get("/admin-queue/")
    assert first.status_code == 200
    html = first.content.decode()
    assert "23 pending requests; showing 1\u201320" in html and "Page 1 of 2" in html
    assert html.count('class="card queue__item"') == 20
    second = client.get("/admin-queue/?page=2").content.decode()
    assert second.count('class="card queue__item"') == 3
