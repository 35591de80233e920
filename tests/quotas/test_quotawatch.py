"""Where the watcher keeps a cluster current, the applying task does not wait for the
quota controller: the watcher's ResourceQuota watch confirms the apply from the event that
carries the new status.hard (quotas/quotawatch.py), on the real API server."""

from __future__ import annotations

import threading

import pytest
from django.utils import timezone

from inventory.models import Cluster
from inventory.watch import watch_cluster
from quotas.apply import CONFIRMING, run_operation
from quotas.models import Operation
from quotas.quotawatch import confirm_from_event
from tests.conftest import wait_for
from tests.quotas.test_apply import approve, only_op

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def watcher(setup, sim_cluster):
    stop = threading.Event()
    thread = threading.Thread(target=watch_cluster, args=(sim_cluster, stop),
                              kwargs={"timeout_s": 5, "backoff_s": 0.2})  # fmt: skip
    thread.start()
    wait_for(lambda: Cluster.objects.get(pk=sim_cluster.pk).is_watched, timeout=20)
    yield setup
    stop.set()
    thread.join(20)
    assert not thread.is_alive()


def test_the_watcher_confirms_an_apply_the_task_did_not_wait_for(watcher, sim):
    # the controller paused: the task cannot confirm it, and does not wait to try
    sim.faults.update(quota_controller_paused=True)
    req = approve(watcher, amount=3)
    op = only_op()
    assert run_operation(op.pk) == CONFIRMING
    op.refresh_from_db()
    assert op.status == "running" and op.applied_hard == {"requests.nvidia.com/gpu": 3}
    sim.faults.reset()  # the controller writes status.hard: its event finishes the operation
    wait_for(lambda: Operation.objects.get(pk=op.pk).status == "succeeded", timeout=5,
             interval=0.02)  # fmt: skip
    req.refresh_from_db()
    assert req.status == "applied"
    watcher["ns"].refresh_from_db()
    assert watcher["ns"].quota_status["hard"] == {"requests.nvidia.com/gpu": "3"}


def test_an_event_confirms_only_the_status_the_operation_applied(setup, sim_cluster):
    approve(setup, amount=2)
    op = only_op()
    waiting = {"requests.nvidia.com/gpu": 2}
    Operation.objects.filter(pk=op.pk).update(status="running", attempts=1, applied_hard=waiting,
                                              started_at=timezone.now())  # fmt: skip
    op.attempt_log.create(number=1)
    quota = {"metadata": {"name": "gpu-portal-quota", "namespace": "vision"},
             "status": {"hard": {"requests.nvidia.com/gpu": "1"}}}  # fmt: skip
    assert confirm_from_event(sim_cluster, quota) == 0  # an older status: still waiting
    other = {**quota, "metadata": {"name": "someone-elses", "namespace": "vision"}}
    other["status"] = {"hard": {"requests.nvidia.com/gpu": "2"}}
    assert confirm_from_event(sim_cluster, other) == 0  # not the portal's quota
    quota["status"]["hard"]["requests.nvidia.com/gpu"] = "2"
    assert confirm_from_event(sim_cluster, quota) == 1
    assert confirm_from_event(sim_cluster, quota) == 0  # once
    assert Operation.objects.get(pk=op.pk).status == "succeeded"
