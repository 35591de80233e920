"""Applying grants as ResourceQuotas in the simulated cluster (official client over HTTP).

Operations run in this process here (``run_operation``), exactly the function the Celery
task calls; ``test_worker.py`` runs them through a real worker.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from quotas import services
from quotas.apply import CONFIRMING, confirm_operation, run_operation
from quotas.models import AuditEvent, Operation, OperationAttempt, QuotaRequest
from quotas.services import RequestData
from quotas.tasks import process_grant_windows, reconcile_quotas
from tests.conftest import wait_for
from tests.inventory.test_sync import pod_body

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
QUOTA = "gpu-portal-quota"
WHY = "fine-tuning run for the benchmark paper"


def approve(s, amount=3, **kw) -> QuotaRequest:
    data = RequestData(team=s["team"], namespace=s["ns"], resource=GPU, amount=amount,
                       justification=WHY, **kw)  # fmt: skip
    return services.approve(services.submit(s["alice"], data), s["admin"])


def hard(core) -> dict:
    quota = core.read_namespaced_resource_quota(QUOTA, "vision")
    return dict(quota.spec.hard)


def only_op() -> Operation:
    return Operation.objects.filter(status="pending").get()


def test_request_to_enforced_quota_end_to_end(setup):
    core = setup["core"]
    req = approve(setup, amount=3)
    assert run_operation(only_op().pk) == "succeeded"
    req.refresh_from_db()
    assert req.status == "applied"
    assert [e.to_status for e in req.events.all()] == ["pending", "approved", "applying", "applied"]
    quota = core.read_namespaced_resource_quota(QUOTA, "vision")
    assert quota.spec.hard == {"requests.nvidia.com/gpu": "3"}
    assert quota.status.hard == {"requests.nvidia.com/gpu": "3"}
    assert quota.metadata.labels["app.kubernetes.io/managed-by"] == "gpu-quota-portal"
    core.create_namespaced_pod("vision", pod_body("fits", "gpu-0", 3))
    reconcile_quotas()  # reads the quota back: status.used is what pods request now
    setup["ns"].refresh_from_db()
    assert setup["ns"].used(GPU) == 3
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("vision", pod_body("too-many", "gpu-1", 1))
    assert err.value.status == 403
    assert "exceeded quota: gpu-portal-quota" in err.value.body
    assert "used: requests.nvidia.com/gpu=3, limited: requests.nvidia.com/gpu=3" in err.value.body


def test_apply_leaves_other_managers_fields_and_is_idempotent(setup):
    core = setup["core"]
    core.create_namespaced_resource_quota(
        "vision", {"metadata": {"name": QUOTA}, "spec": {"hard": {"count/pods": "50"}}}
    )
    approve(setup, amount=2)
    run_operation(only_op().pk)
    assert hard(core) == {"count/pods": "50", "requests.nvidia.com/gpu": "2"}
    version = core.read_namespaced_resource_quota(QUOTA, "vision").metadata.resource_version
    op = Operation.objects.create(namespace=setup["ns"], reason="drift")
    assert run_operation(op.pk) == "succeeded"
    assert hard(core) == {"count/pods": "50", "requests.nvidia.com/gpu": "2"}
    assert run_operation(op.pk) == "skipped"  # a finished operation is never claimed again
    assert core.read_namespaced_resource_quota(QUOTA, "vision").metadata.resource_version == version


def test_transient_failure_retries_with_backoff_then_succeeds(setup, sim):
    sim.faults.update(error_rate=1.0, error_code=503, path_regex="resourcequotas")
    req = approve(setup)
    op = only_op()
    assert run_operation(op.pk) == "pending"
    op.refresh_from_db()
    assert op.attempts == 1 and "503" in op.last_error
    assert op.next_attempt_at > timezone.now()
    assert run_operation(op.pk) == "skipped"  # not due yet
    req.refresh_from_db()
    assert req.status == "applying"
    sim.faults.reset()
    with time_machine.travel(op.next_attempt_at + timedelta(seconds=1)):
        assert run_operation(op.pk) == "succeeded"
    attempts = list(OperationAttempt.objects.filter(operation=op).values_list("ok", flat=True))
    assert attempts == [False, True]
    req.refresh_from_db()
    assert req.status == "applied" and hard(setup["core"]) == {"requests.nvidia.com/gpu": "3"}


def test_permanent_failure_fails_the_request_and_is_audited(setup, sim, mailoutbox, on_commit):
    setup["admin"].email = "root@example.com"
    setup["admin"].save()
    sim.faults.update(error_rate=1.0, error_code=422, path_regex="resourcequotas")
    req = approve(setup)
    with on_commit(execute=True):
        assert run_operation(only_op().pk) == "failed"
    req.refresh_from_db()
    assert req.status == "failed"
    assert AuditEvent.objects.filter(action="quota.apply_failed").count() == 1
    assert any("failed" in m.subject and "root@example.com" in m.to for m in mailoutbox)


def test_gives_up_after_max_attempts(setup, sim):
    sim.faults.update(error_rate=1.0, error_code=500, path_regex="resourcequotas")
    approve(setup)
    op = only_op()
    op.max_attempts = 2
    op.save()
    assert run_operation(op.pk) == "pending"
    with time_machine.travel(timezone.now() + timedelta(minutes=1)):
        assert run_operation(op.pk) == "failed"


def test_expiry_with_frozen_time_falls_back_to_remaining_grants(setup):
    core = setup["core"]
    approve(setup, amount=2)  # permanent
    approve(setup, amount=4, ends_at=timezone.now() + timedelta(days=2))
    for op in Operation.objects.filter(status="pending"):
        run_operation(op.pk)
    assert hard(core) == {"requests.nvidia.com/gpu": "6"}
    with time_machine.travel(timezone.now() + timedelta(days=2, minutes=1)):
        counts = process_grant_windows()
        assert counts["expired"] == 1
        run_operation(only_op().pk)
        assert hard(core) == {"requests.nvidia.com/gpu": "2"}
        assert AuditEvent.objects.filter(action="grant.expired").count() == 1
        assert process_grant_windows()["expired"] == 0


def test_future_grant_starts_counting_when_its_window_opens(setup):
    core = setup["core"]
    start = timezone.now() + timedelta(days=1)
    approve(setup, amount=5, starts_at=start, ends_at=start + timedelta(days=3))
    run_operation(only_op().pk)
    assert hard(core) == {"requests.nvidia.com/gpu": "0"}  # managed, nothing granted yet
    with time_machine.travel(start + timedelta(minutes=1)):
        assert process_grant_windows()["started"] == 1
        run_operation(only_op().pk)
        assert hard(core) == {"requests.nvidia.com/gpu": "5"}


def test_expiry_reminder_is_sent_once(setup, mailoutbox, on_commit):
    approve(setup, amount=1, ends_at=timezone.now() + timedelta(days=2))
    with on_commit(execute=True):
        assert process_grant_windows()["reminded"] == 1
        assert process_grant_windows()["reminded"] == 0
    reminders = [m for m in mailoutbox if "ends in 2 days" in m.subject]
    assert len(reminders) == 1 and reminders[0].to == ["alice@example.com"]


def test_drift_is_reverted_and_a_deleted_quota_recreated(setup):
    core = setup["core"]
    approve(setup, amount=3)
    run_operation(only_op().pk)
    assert reconcile_quotas()["reverted"] == 0  # in sync: nothing to do
    core.patch_namespaced_resource_quota(
        QUOTA, "vision", {"spec": {"hard": {"requests.nvidia.com/gpu": "99"}}}
    )
    assert reconcile_quotas()["reverted"] == 1
    event = AuditEvent.objects.get(action="quota.drift_reverted")
    assert event.before == {"requests.nvidia.com/gpu": "99"}
    assert event.after == {"requests.nvidia.com/gpu": "3"}
    run_operation(only_op().pk)
    assert hard(core) == {"requests.nvidia.com/gpu": "3"}
    core.delete_namespaced_resource_quota(QUOTA, "vision")
    assert reconcile_quotas()["recreated"] == 1
    run_operation(only_op().pk)
    assert hard(core) == {"requests.nvidia.com/gpu": "3"}
    assert AuditEvent.objects.filter(action="quota.recreated").count() == 1


def test_apply_waits_for_the_quota_controller_to_confirm_status_hard(setup, sim, settings):
    """Admission enforces status.hard; until the controller copies spec.hard there, the
    apply is not done: it fails as transient and succeeds on a later attempt."""
    settings.QUOTA_CONFIRM_SECONDS = 0.5
    sim.faults.update(quota_controller_paused=True)
    req = approve(setup, amount=4)
    op = only_op()
    assert run_operation(op.pk) == "pending"
    op.refresh_from_db()
    assert "status.hard not yet updated" in op.last_error
    req.refresh_from_db()
    assert req.status == "applying"
    sim.faults.reset()
    with time_machine.travel(op.next_attempt_at + timedelta(seconds=1)):
        assert run_operation(op.pk) == "succeeded"
    quota = setup["core"].read_namespaced_resource_quota(QUOTA, "vision")
    assert quota.status.hard == {"requests.nvidia.com/gpu": "4"}


def test_the_applying_task_hands_over_to_short_confirm_tasks(setup, sim, settings):
    """Without a wait of its own (QUOTA_CONFIRM_INLINE_SECONDS = 0, as where the watcher
    keeps the cluster current) run_operation applies spec.hard, reads the quota once more
    and returns; a controller slower than that leaves it to confirm tasks that re-read
    status.hard until it matches."""
    settings.QUOTA_CONFIRM_INLINE_SECONDS = 0
    sim.faults.update(quota_controller_paused=True)
    req = approve(setup, amount=2)
    op = only_op()
    assert run_operation(op.pk) == CONFIRMING
    op.refresh_from_db()
    assert op.status == "running" and op.applied_hard == {"requests.nvidia.com/gpu": 2}
    assert hard(setup["core"]) == {"requests.nvidia.com/gpu": "2"}  # spec is applied
    req.refresh_from_db()
    assert req.status == "applying"  # not enforced until status.hard says so
    sim.faults.reset()
    results = []
    for _ in range(100):  # what the chain of confirm tasks does, here in this process
        results.append(confirm_operation(op.pk, 1))
        if results[-1] != CONFIRMING:
            break
        time.sleep(0.05)
    assert results[-1] == "succeeded"
    req.refresh_from_db()
    assert req.status == "applied"
    assert confirm_operation(op.pk, 1) == "skipped"  # a duplicate message changes nothing
    assert OperationAttempt.objects.get(operation=op).ok


def test_the_applying_task_watches_for_status_hard_and_hands_over_a_slow_controller(
    setup, sim, settings
):
    """The applying task watches its quota for QUOTA_CONFIRM_INLINE_SECONDS: a live quota
    controller confirms within it (the task succeeds itself); a paused one does not, and
    the watch ends at its deadline and hands over to confirm tasks."""
    settings.QUOTA_CONFIRM_INLINE_SECONDS = 2.0
    approve(setup, amount=1)
    assert run_operation(only_op().pk) == "succeeded"
    settings.QUOTA_CONFIRM_INLINE_SECONDS = 0.5
    sim.faults.update(quota_controller_paused=True)
    approve(setup, amount=2)
    op = Operation.objects.get(status="pending")
    began = time.monotonic()
    assert run_operation(op.pk) == CONFIRMING
    assert time.monotonic() - began >= 0.5  # it watched for its whole window
    assert hard(setup["core"]) == {"requests.nvidia.com/gpu": "3"}
    sim.faults.reset()
    assert wait_for(lambda: confirm_operation(op.pk, 1) == "succeeded", timeout=10)


def test_a_confirm_that_waits_too_long_fails_the_attempt_as_transient(setup, sim, settings):
    settings.QUOTA_CONFIRM_INLINE_SECONDS = 0
    settings.QUOTA_CONFIRM_SECONDS = 0.3
    sim.faults.update(quota_controller_paused=True)
    approve(setup, amount=2)
    op = only_op()
    assert run_operation(op.pk) == CONFIRMING
    assert confirm_operation(op.pk, 1) == CONFIRMING
    time.sleep(0.35)
    assert confirm_operation(op.pk, 1) == "pending"
    op.refresh_from_db()
    assert op.status == "pending" and "status.hard not yet updated" in op.last_error
    assert confirm_operation(op.pk, 1) == "skipped"  # that attempt is over
