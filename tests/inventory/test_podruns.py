"""Allocated GPU-hours from the inventory's pod records (inventory/podruns.py): the sync
records a started GPU pod's span when it ends, against the cluster of tests/conftest.py
(the real control plane where it was built), and the figures follow the definition."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from inventory import podruns
from inventory.models import GpuClass, GpuPod, PodRun
from inventory.sync import sync_cluster
from tests.conftest import wait_for
from tests.factories import make_cluster, make_node, make_pod
from tests.inventory.test_sync import fleet, pod_body  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"


def _pod_gone(core, ns: str, name: str) -> bool:
    return name not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}


def test_a_pod_that_ends_leaves_a_run_with_its_span(sim_cluster, fleet):  # noqa: F811
    core = fleet
    first = sync_cluster(sim_cluster)
    sim_cluster.refresh_from_db()
    first_success = sim_cluster.last_success_at
    assert first.started_at <= sim_cluster.pods_recorded_since <= first.finished_at
    assert not PodRun.objects.exists()
    started = {
        p.metadata.name: p.status.start_time
        for p in core.list_pod_for_all_namespaces().items
        if p.status.start_time
    }
    # One finishes, one is deleted; the pending one never started and leaves nothing.
    core.patch_namespaced_pod_status("train-a", "ml-vision", {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("align", "genomics")
    core.delete_namespaced_pod("queued", "genomics")
    wait_for(lambda: _pod_gone(core, "genomics", "align") and _pod_gone(core, "genomics", "queued"))

    second = sync_cluster(sim_cluster)
    assert second.status == "succeeded", second.error
    runs = {r.name: r for r in PodRun.objects.all()}
    assert set(runs) == {"train-a", "align"}
    gpu0_class = GpuClass.objects.get(cluster=sim_cluster, nodes__name="gpu-0")
    a = runs["train-a"]
    assert (a.namespace, a.node_name, a.gpus, a.gpu_class_id) == (
        "ml-vision", "gpu-0", 4.0, gpu0_class.pk,
    )  # fmt: skip
    assert a.started_at == started["train-a"]
    # It ran until the last complete sync that saw it (the first), not until the second
    # noticed it gone: a sync that stopped for a day would count that day otherwise.
    assert a.ended_at == first_success
    assert (runs["align"].gpus, runs["align"].started_at) == (1.0, started["align"])
    assert set(GpuPod.objects.values_list("name", flat=True)) == {"train-b"}

    # Allocated GPU-hours: the ended runs' spans plus the pod still running, to now.
    now = timezone.now()
    begin = min(started.values()) - timedelta(hours=1)
    cells = podruns.allocated_hours([sim_cluster.pk], begin, now)
    by_ns: dict = {}
    for (cluster_id, ns, _), hours in cells.items():
        assert cluster_id == sim_cluster.pk
        by_ns[ns] = by_ns.get(ns, 0.0) + hours

    def hours(start, end):
        return (end - start).total_seconds() / 3600

    expect_ml = 4 * hours(started["train-a"], a.ended_at) + 2 * hours(started["train-b"], now)
    expect_gen = 1 * hours(started["align"], runs["align"].ended_at)
    assert by_ns == {"ml-vision": pytest.approx(expect_ml), "genomics": pytest.approx(expect_gen)}

    # A third sync with nothing changed records nothing again.
    sync_cluster(sim_cluster)
    assert PodRun.objects.count() == 2


def test_a_pod_replaced_under_the_same_name_ends_the_first_run(sim_cluster, fleet):  # noqa: F811
    core = fleet
    sync_cluster(sim_cluster)
    old_uid = core.read_namespaced_pod("train-b", "ml-vision").metadata.uid
    core.delete_namespaced_pod("train-b", "ml-vision", grace_period_seconds=0)
    wait_for(lambda: _pod_gone(core, "ml-vision", "train-b"))
    core.create_namespaced_pod("ml-vision", pod_body("train-b", "gpu-2", 2))
    wait_for(lambda: core.read_namespaced_pod("train-b", "ml-vision").status.phase == "Running")

    sync_cluster(sim_cluster)
    [run] = PodRun.objects.all()
    assert (run.name, run.uid, run.node_name, run.gpus) == ("train-b", old_uid, "gpu-1", 2.0)
    pod = GpuPod.objects.get(name="train-b")
    assert pod.uid != old_uid and pod.node.name == "gpu-2"


def test_time_sliced_replicas_count_as_their_share_of_a_gpu(db):
    cluster = make_cluster()
    shared = make_node(cluster, "ts-0", product="NVIDIA-A10G-SHARED", gpu_replicas=4)
    whole = make_node(cluster, "a-0")
    now = timezone.now()
    make_pod(shared, "notebook", gpus=2, started_at=now - timedelta(hours=3))
    make_pod(whole, "train", gpus=1, started_at=now - timedelta(hours=30))
    make_pod(whole, "mig-only", requests={"nvidia.com/mig-1g.10gb": 1},
             started_at=now - timedelta(hours=3))  # fmt: skip
    make_pod(whole, "waiting", gpus=8, phase="Pending", started_at=None)
    cells = podruns.allocated_hours([cluster.pk], now - timedelta(hours=24), now)
    # 2 replicas of 4 = half a GPU for 3 h; one GPU for the 24 h of the window.
    assert sum(cells.values()) == pytest.approx(0.5 * 3 + 1 * 24, rel=1e-4)


def test_a_run_is_recorded_once(sim_cluster, fleet):  # noqa: F811
    """Recording and deleting are one statement per chunk: a pod whose row is gone (a sync
    that repeats the work) records nothing twice."""
    sync_cluster(sim_cluster)
    pods = list(GpuPod.objects.filter(started_at__isnull=False).values_list("id", flat=True))
    podruns.delete_ended(pods, timezone.now())
    podruns.delete_ended(pods, timezone.now())  # the rows are gone: nothing
    assert PodRun.objects.count() == len(pods) == 3


def test_old_runs_are_pruned(db):
    from inventory.tasks import prune_pod_runs

    cluster = make_cluster()
    now = timezone.now()
    for days in (10, 500):
        end = now - timedelta(days=days)
        PodRun.objects.create(cluster=cluster, namespace="x", name=f"p{days}", gpus=1,
                              started_at=end - timedelta(hours=1), ended_at=end)  # fmt: skip
    assert prune_pod_runs() == 1
    assert list(PodRun.objects.values_list("name", flat=True)) == ["p10"]
