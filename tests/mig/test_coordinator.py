"""The MIG coordinator end to end against the simulated cluster, its GPU Operator and its
mig-manager (NVIDIA/gpu-operator v26.7.0, NVIDIA/mig-parted; tests/mig/migsim.py).

Runs are driven synchronously with ``coordinator.advance`` (as the Celery task would, one
step per call) except in the crash test, which uses real workers and kills one. The GPU
Operator protocol itself (ClusterPolicy, mount delay, relabel, stuck policy) is in
tests/mig/test_operator_protocol.py.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from inventory.models import NodeResource
from inventory.sync import sync_cluster
from mig import coordinator, services
from mig.models import MigRequest, MigStep
from quotas.apply import run_operation
from quotas.models import AuditEvent, Grant, Operation
from tests.conftest import kill, wait_for
from tests.mig import migsim
from tests.mig.migsim import CONFIG
from tests.mig.migsim import approve as _approve
from tests.mig.migsim import gpu_pod as _gpu_pod
from tests.mig.migsim import node as _node
from tests.mig.migsim import request as _request
from tests.mig.migsim import run as _run
from tests.mig.migsim import steps as _steps
from tests.quotas.builders import make_namespace, make_team, make_user


def _start_sim(tmp_path, step_s: float):
    return migsim.start(tmp_path, migsim.fleet(), step_s=step_s)


@pytest.fixture
def mig_sim(tmp_path):
    """Two MIG-capable A100 nodes (mixed, all-disabled) and a fast mig-manager."""
    sim = _start_sim(tmp_path, 0.05)
    yield sim
    sim.stop()


@pytest.fixture
def core(mig_sim):
    api = migsim.admin_core(mig_sim)
    yield api
    api.api_client.close()


@pytest.fixture
def world(mig_sim, settings):
    return migsim.make_world(mig_sim, settings)


pytestmark = pytest.mark.django_db


def test_success_switches_capacity_and_grants_mig_quota(world, core, mig_sim):
    w = world
    _gpu_pod(core, "old-train", "a100-00")
    sync_cluster(w.cluster)
    req = _request(w)
    proposals = services.propose_nodes(req)
    assert [p.node.name for p in proposals] == ["a100-01", "a100-00"]  # idle first
    assert [pod.name for pod in proposals[1].pods] == ["old-train"]
    req = _run(_approve(w, req))

    assert req.status == MigRequest.Status.SUCCEEDED, req.error
    assert set(_steps(req).values()) == {"done"}
    assert req.config_name == CONFIG and req.previous_config == "all-disabled"
    node = core.read_node("a100-00")
    assert node.metadata.labels["nvidia.com/mig.config"] == CONFIG
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
    assert not node.spec.unschedulable
    assert node.status.capacity["nvidia.com/mig-3g.40gb"] == "4"
    assert node.status.capacity["nvidia.com/gpu"] == "6"
    assert core.list_namespaced_pod("ml-vision").items == []  # evicted
    # The ClusterPolicy's ConfigMap kept the configs the portal does not own.
    assert set(migsim.configs(core)) == {"all-disabled", "site-custom", CONFIG}
    # Inventory resynced, then the MIG slices granted and the quota applied.
    res = NodeResource.objects.get(node__name="a100-00", resource="nvidia.com/mig-3g.40gb")
    assert res.capacity == 4
    assert req.granted == {"nvidia.com/mig-3g.40gb": 4}
    grant = Grant.objects.get(namespace=w.ns)
    assert (grant.resource, grant.amount, grant.ends_at) == ("nvidia.com/mig-3g.40gb", 4, None)
    op = Operation.objects.get(namespace=w.ns, reason="mig")
    assert run_operation(op.pk) == "succeeded"
    quota = core.read_namespaced_resource_quota("gpu-portal-quota", "ml-vision")
    assert quota.spec.hard["requests.nvidia.com/mig-3g.40gb"] == "4"
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"mig.submitted", "mig.approved", "mig.granted", "mig.succeeded"} <= actions


def test_node_already_in_config_is_not_disrupted(world, core):
    w = world
    first = _run(_approve(w, _request(w)))
    assert first.status == "succeeded"
    sync_cluster(w.cluster)
    req = _request(w)
    assert services.propose_nodes(req)[0].in_config
    req = _run(_approve(w, req))
    assert req.status == "succeeded"
    assert _steps(req)["cordon"] == _steps(req)["drain"] == "skipped"
    assert Grant.objects.filter(namespace=w.ns).count() == 2


def test_mig_manager_failure_uncordons_alerts_and_can_be_reverted(world, core, mig_sim, on_commit):
    w = world
    mig_sim.faults.update(mig_fail=True)
    # the portal sees the pending that precedes this failure
    mig_sim.emulator.options = replace(mig_sim.emulator.options, mig_step_s=0.3)
    with on_commit(execute=True):
        req = _run(_approve(w, _request(w)))
    assert req.status == MigRequest.Status.FAILED
    assert "failed" in req.error and "uncordoned" in req.error
    assert _steps(req)["wait_state"] == "failed"
    assert _steps(req)["grant"] == "skipped"
    assert not core.read_node("a100-00").spec.unschedulable
    assert req.previous_config == "all-disabled" and req.can_revert
    assert not Grant.objects.filter(namespace=w.ns).exists()
    assert AuditEvent.objects.filter(action="mig.failed").exists()
    assert len(mail.outbox) == 1 and "a100-00" in mail.outbox[0].subject
    assert mail.outbox[0].to == ["ada@example.com"]

    revert = _run(services.revert(req, w.admin))
    assert revert.status == "succeeded" and revert.kind == "revert"
    labels = core.read_node("a100-00").metadata.labels
    assert labels["nvidia.com/mig.config"] == "all-disabled"
    assert labels["nvidia.com/mig.config.state"] == "success"
    with pytest.raises(services.TransitionError):
        services.revert(req, w.admin)


def test_eviction_blocked_by_pdb_fails_after_drain_timeout(world, core, mig_sim, settings):
    from kubernetes import client, config

    w = world
    settings.MIG_DRAIN_TIMEOUT_SECONDS = 0.5
    _gpu_pod(core, "serve-0", "a100-00", labels={"app": "serve"})
    api_client = config.new_client_from_config(config_file=str(mig_sim.admin_kubeconfig_path))
    client.PolicyV1Api(api_client).create_namespaced_pod_disruption_budget("ml-vision", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "serve"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}},
    })  # fmt: skip
    api_client.close()
    req = _run(_approve(w, _request(w)))
    assert req.status == "failed"
    assert "PodDisruptionBudget" in req.error and "ml-vision/serve-0" in req.error
    assert _steps(req)["drain"] == "failed" and _steps(req)["set_label"] == "skipped"
    assert core.read_namespaced_pod("serve-0", "ml-vision").metadata.name == "serve-0"
    node = core.read_node("a100-00")
    assert not node.spec.unschedulable
    assert node.metadata.labels["nvidia.com/mig.config"] == "all-disabled"
    assert not req.can_revert  # the config label was never touched


def test_wait_policy_waits_for_the_pods_to_finish(world, core, settings):
    w = world
    _gpu_pod(core, "train", "a100-00")
    req = _approve(w, _request(w), policy="wait")
    for _ in range(3):
        coordinator.advance(req.pk)
    assert req.steps.get(name="drain").status == "running"
    assert "train" in req.steps.get(name="drain").detail
    core.delete_namespaced_pod("train", "ml-vision")
    req = _run(req)
    assert req.status == "succeeded", req.error
    assert req.steps.get(name="drain").detail == "no GPU pods on the node"


def test_wait_policy_times_out(world, core, settings):
    w = world
    settings.MIG_DRAIN_TIMEOUT_SECONDS = 0.3
    _gpu_pod(core, "train", "a100-00")
    req = _run(_approve(w, _request(w), policy="wait"))
    assert req.status == "failed" and "still on the node" in req.error
    assert core.read_namespaced_pod("train", "ml-vision")  # never evicted


def test_two_requests_for_one_node_never_run_together(world, core):
    w = world
    first = _approve(w, _request(w))
    second = _request(w)
    with pytest.raises(ValidationError) as exc:
        _approve(w, second)
    assert "Another MIG run is active" in str(exc.value)
    assert "a100-00" not in [p.node.name for p in services.propose_nodes(second)]
    # The database refuses it even when the check is bypassed.
    with pytest.raises(IntegrityError), transaction.atomic():
        MigRequest.objects.filter(pk=second.pk).update(
            status="approved", node=_node(w), drain_policy="evict", config_name=CONFIG
        )
    # A run held by one worker is not advanced by another.
    MigRequest.objects.filter(pk=first.pk).update(lease_until=timezone.now() + timedelta(minutes=1))
    assert coordinator.advance(first.pk) == "busy"
    MigRequest.objects.filter(pk=first.pk).update(lease_until=None)
    assert _run(first).status == "succeeded"
    # Once the first run ended, the node takes the second.
    assert _run(_approve(w, second)).status == "succeeded"


def test_redispatch_picks_up_only_overdue_unheld_runs(world, settings):
    import redis

    w = world
    settings.MIG_REDISPATCH_GRACE_SECONDS = 0
    broker = redis.Redis.from_url(settings.REDIS_URL)
    req = _approve(w, _request(w))  # no worker here: the message waits in the queue
    queued = broker.llen("celery")
    assert coordinator.redispatch_due() == 1
    assert broker.llen("celery") == queued + 1
    MigRequest.objects.filter(pk=req.pk).update(lease_until=timezone.now() + timedelta(minutes=1))
    assert coordinator.redispatch_due() == 0  # a held run is left alone


@pytest.mark.django_db(transaction=True)
def test_worker_killed_between_steps_second_worker_finishes(tmp_path, start_worker, settings):
    from inventory.models import Cluster

    sim = _start_sim(tmp_path, 0.6)  # slow mig-manager: time to kill mid-run
    try:
        cluster = Cluster.objects.create(
            slug="sim", name="Simulated", auth_method=Cluster.AuthMethod.KUBECONFIG,
            kubeconfig_path=str(sim.kubeconfig_path),
        )  # fmt: skip
        sync_cluster(cluster)
        admin = make_user("ada", staff=True)
        member = make_user("mo")
        team = make_team("vision", members=[member])
        w = type("W", (), {"cluster": cluster, "admin": admin, "member": member, "team": team,
                           "ns": make_namespace(team, cluster, "ml-vision")})  # fmt: skip
        env = {"MIG_POLL_SECONDS": "0.2", "MIG_LEASE_SECONDS": "2",
               "MIG_CONFIG_MOUNT_SECONDS": "0.3"}  # fmt: skip
        first = start_worker(**env)
        req = _approve(w, _request(w))  # dispatched on commit to the first worker
        wait_for(lambda: req.steps.filter(name="set_label", status="done").exists(), 20)
        kill(first)
        req.refresh_from_db()
        assert req.status == MigRequest.Status.RUNNING
        second = start_worker(**env)
        settings.MIG_REDISPATCH_GRACE_SECONDS = 0

        def finished() -> bool:
            coordinator.redispatch_due()
            return MigRequest.objects.get(pk=req.pk).status in MigRequest.TERMINAL

        wait_for(finished, 30, interval=0.5)
        req.refresh_from_db()
        assert req.status == "succeeded", req.error
        assert set(req.steps.values_list("status", flat=True)) == {"done"}
        assert Grant.objects.get(namespace=w.ns).amount == 4
        steps = {s.name: s for s in req.steps.all()}
        assert all(s.started_at and s.finished_at for s in steps.values())
        assert MigStep.objects.filter(request=req, attempts=0).count() == 0
        assert b"mig.tasks.advance_run" in second.log_path.read_bytes()
    finally:
        sim.stop()


def test_approval_refuses_to_convert_gpus_that_grants_count_on(world):
    from quotas.capacity import allocatable
    from tests.quotas.builders import make_grant

    w = world
    total = allocatable(w.cluster, "nvidia.com/gpu")
    grant = make_grant(w.ns, total - 1)  # whole GPUs promised to the team
    with pytest.raises(ValidationError) as err:
        _approve(w, _request(w, gpus=2))
    message = err.value.message_dict["node"][0]
    assert f"leaves {total - 2} nvidia.com/gpu" in message and f"the {total - 1} that" in message
    grant.amount = total - 2
    grant.save()
    assert _approve(w, _request(w, gpus=2)).status == "approved"


def test_relayout_refuses_to_shrink_a_mig_pool_that_grants_count_on(world):
    w = world
    first = _run(_approve(w, _request(w)))  # a100-00 GPUs 0-1 -> 3g.40gb x2, granted 4
    assert first.status == "succeeded" and first.granted == {"nvidia.com/mig-3g.40gb": 4}
    again = _request(w, layout={"1g.10gb": 7})
    with pytest.raises(ValidationError) as err:
        _approve(w, again)
    assert "leaves 0 nvidia.com/mig-3g.40gb" in err.value.message_dict["node"][0]
    Grant.objects.filter(resource="nvidia.com/mig-3g.40gb").update(ended_at=timezone.now())
    assert _approve(w, again).status == "approved"
