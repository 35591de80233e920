"""The outbox through real Celery workers: approval to enforced quota, a worker killed
mid-apply, and two admins racing for the last GPUs."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from kubernetes.client.exceptions import ApiException

from quotas import services
from quotas.apply import redispatch_due
from quotas.models import Grant, Operation, QuotaRequest
from quotas.services import RequestData
from tests.conftest import kill, wait_for
from tests.inventory.test_sync import pod_body
from tests.quotas.builders import make_user

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
GPU = "nvidia.com/gpu"
WHY = "fine-tuning run for the benchmark paper"


def submit(s, amount: int) -> QuotaRequest:
    data = RequestData(team=s["team"], namespace=s["ns"], resource=GPU, amount=amount,
                       justification=WHY)  # fmt: skip
    return services.submit(s["alice"], data)


def quota_hard(core) -> dict | None:
    try:
        return dict(core.read_namespaced_resource_quota("gpu-portal-quota", "vision").spec.hard)
    except ApiException:
        return None


def test_approval_reaches_the_cluster_through_a_worker(setup, start_worker):
    start_worker()
    req = services.approve(submit(setup, 5), setup["admin"])  # commits: on_commit dispatches
    wait_for(lambda: QuotaRequest.objects.get(pk=req.pk).status == "applied")
    assert quota_hard(setup["core"]) == {"requests.nvidia.com/gpu": "5"}
    with pytest.raises(ApiException) as err:
        setup["core"].create_namespaced_pod("vision", pod_body("big", "gpu-0", 6))
    assert err.value.status == 403 and "exceeded quota" in err.value.body


def test_a_worker_killed_mid_apply_loses_nothing(setup, sim, start_worker):
    # The API server answers slowly, so the worker is inside the apply when it dies.
    sim.faults.update(latency_ms=4000, path_regex="resourcequotas")
    first = start_worker(QUOTA_OPERATION_LEASE_SECONDS=2)
    req = services.approve(submit(setup, 3), setup["admin"])
    op = Operation.objects.get()
    wait_for(lambda: Operation.objects.get(pk=op.pk).status == "running")
    kill(first)
    sim.faults.reset()
    start_worker(QUOTA_OPERATION_LEASE_SECONDS=2)
    # Beat's re-dispatcher, run here on its schedule: reclaims the expired lease.
    wait_for(lambda: redispatch_due() >= 0 and Operation.objects.get(pk=op.pk).status
             == "succeeded", timeout=40, interval=1)  # fmt: skip
    assert QuotaRequest.objects.get(pk=req.pk).status == "applied"
    assert quota_hard(setup["core"]) == {"requests.nvidia.com/gpu": "3"}
    assert Operation.objects.get(pk=op.pk).attempts == 2


def test_two_admins_racing_for_the_last_gpus_exactly_one_wins(setup):
    first, second = submit(setup, 9), submit(setup, 9)  # 16 allocatable: only one fits
    admin2 = make_user("root2", staff=True)
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def decide(req, admin, key):
        try:
            barrier.wait()
            services.approve(req, admin)
            outcomes[key] = "approved"
        except services.CapacityError as err:
            outcomes[key] = "refused: " + err.message_dict["amount"][0]
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=(first, setup["admin"], "a")),
        threading.Thread(target=decide, args=(second, admin2, "b")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(v.split(":")[0] for v in outcomes.values()) == ["approved", "refused"]
    refusal = next(v for v in outcomes.values() if v.startswith("refused"))
    assert "Only 7 nvidia.com/gpu free" in refusal
    assert sum(Grant.objects.values_list("amount", flat=True)) == 9
