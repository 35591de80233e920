"""Pods reach the inventory through a list-then-watch between full syncs (issue #23,
inventory/podwatch.py and inventory/watch.py), on the real API server over HTTP: a change is
in the portal within 2 s, an ended pod leaves its run, a version too old gets the server's
410 and a watch that breaks relists and resumes."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import GpuPod, NamespaceUsage, NodeResource, PodRun
from inventory.podwatch import apply_pod_event
from inventory.sync import sync_cluster
from inventory.watch import Progress, _Follower, watch_pods
from tests.conftest import wait_for
from tests.inventory.test_sync import node_body, pod_body
from tests.kubesim import create_namespace

GPU = "nvidia.com/gpu"


def requested(node: str) -> int:
    return NodeResource.objects.get(node__name=node, resource=GPU).requested


def watching(sim, n: int = 1) -> bool:
    return sim.stats().get("watches", 0) >= n


@pytest.fixture
def pod_watch(sim, sim_api, sim_cluster):
    sim_api.create_node(node_body("gpu-0"))
    create_namespace(sim_api, "lab")
    assert sync_cluster(sim_cluster).status == "succeeded"
    stop = threading.Event()
    thread = threading.Thread(target=watch_pods, args=(sim_cluster, stop),
                              kwargs={"timeout_s": 2, "backoff_s": 0.2})  # fmt: skip
    thread.start()
    wait_for(lambda: watching(sim), timeout=15)
    yield sim_api
    stop.set()
    thread.join(15)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_a_pod_is_in_the_portal_within_two_seconds_and_its_end_is_recorded(pod_watch):
    core = pod_watch
    began = time.monotonic()
    core.create_namespaced_pod("lab", pod_body("train", "gpu-0", 4))
    wait_for(lambda: GpuPod.objects.filter(name="train").exists(), timeout=2, interval=0.02)
    assert time.monotonic() - began < 2
    wait_for(lambda: requested("gpu-0") == 4, timeout=2, interval=0.02)
    usage = NamespaceUsage.objects.get(namespace="lab", resource=GPU)
    assert (usage.requested, usage.pods) == (4, 1)
    # kwok starts it: the watch brings the phase and the start time
    wait_for(
        lambda: GpuPod.objects.filter(
            name="train", phase="Running", started_at__isnull=False
        ).exists(),
        timeout=5,
    )
    core.delete_namespaced_pod("train", "lab", grace_period_seconds=0)
    wait_for(lambda: not GpuPod.objects.filter(name="train").exists(), timeout=5)
    assert requested("gpu-0") == 0
    assert not NamespaceUsage.objects.filter(namespace="lab").exists()
    run = PodRun.objects.get(name="train")
    assert (run.gpus, run.node_name) == (4, "gpu-0")


@pytest.mark.django_db(transaction=True)
def test_a_watch_that_breaks_relists_and_resumes(sim, pod_watch):
    core = pod_watch
    # the pod watch requests fail for a while (the stream the server ends every 2 s is not
    # resumed): the watcher backs off and relists once they answer again
    sim.faults.update(error_rate=1.0, error_code=503, path_regex=r"^/api/v1/pods$")
    wait_for(lambda: not watching(sim), timeout=10)
    core.create_namespaced_pod("lab", pod_body("during", "gpu-0", 2))
    sim.faults.reset()
    wait_for(lambda: GpuPod.objects.filter(name="during").exists(), timeout=15)  # the relist
    wait_for(lambda: watching(sim), timeout=15)
    core.create_namespaced_pod("lab", pod_body("after", "gpu-0", 1))
    wait_for(lambda: GpuPod.objects.filter(name="after").exists(), timeout=2, interval=0.02)
    wait_for(lambda: requested("gpu-0") == 3, timeout=2, interval=0.02)


@pytest.mark.django_db(transaction=True)
def test_a_410_gone_makes_the_watcher_relist_at_once(sim, pod_watch):
    """A watch whose version is too old is answered 410 Gone. The real server's watch cache
    serves a recent window even after etcd compacts (no 410 within a test's minutes), so
    the proxy in front of it answers the pod requests 410 ``Expired``; the watcher relists
    (a full sync, trigger ``watch``) without backing off, and once the list answers it
    resumes watching."""
    from inventory.models import SyncRun

    core = pod_watch
    relists = SyncRun.objects.filter(trigger="watch").count()
    sim.faults.update(fail_after=1, error_code=410, path_regex=r"^/api/v1/pods$")
    wait_for(lambda: SyncRun.objects.filter(trigger="watch", status="failed").exists(), timeout=10)
    core.create_namespaced_pod("lab", pod_body("meanwhile", "gpu-0", 1))
    sim.faults.reset()
    wait_for(lambda: GpuPod.objects.filter(name="meanwhile").exists(), timeout=15)
    assert SyncRun.objects.filter(trigger="watch").count() > relists + 1
    wait_for(lambda: watching(sim), timeout=15)
    core.create_namespaced_pod("lab", pod_body("later", "gpu-0", 1))
    wait_for(lambda: GpuPod.objects.filter(name="later").exists(), timeout=2, interval=0.02)


@pytest.mark.django_db(transaction=True)
def test_a_sync_while_the_watch_runs_loses_nothing(sim, sim_api, sim_cluster):
    """A pod created while a full sync pages through its list is not in that list (its
    snapshot is older) but its event reaches the watch during the sync. The event waits for
    the sync, the stream restarts from the sync's version, and the pod and its node's
    figure are right once the sync is done (without the wait, the sync's figure from its
    older snapshot would overwrite the event's)."""
    from inventory.models import SyncRun
    from inventory.watch import watch_cluster

    sim_api.create_node(node_body("gpu-0"))
    create_namespace(sim_api, "lab")
    for i in range(4):
        sim_api.create_namespaced_pod("lab", pod_body(f"old-{i}", "gpu-0", 1))
    stop = threading.Event()
    thread = threading.Thread(target=watch_cluster, args=(sim_cluster, stop),
                              kwargs={"timeout_s": 5, "backoff_s": 0.2})  # fmt: skip
    thread.start()
    try:
        wait_for(lambda: watching(sim, 2) and requested("gpu-0") == 4, timeout=15)
        relists = SyncRun.objects.filter(trigger="watch").count()

        def during(stage: str, done: int, total) -> None:
            if stage == "pods" and done == 1:  # after the first page: not in this list
                sim_api.create_namespaced_pod("lab", pod_body("new", "gpu-0", 2))

        run = sync_cluster(sim_cluster, page_size=1, trigger="manual", progress=during)
        assert run.status == "succeeded" and run.pods_seen == 4
        wait_for(lambda: GpuPod.objects.filter(name="new").exists(), timeout=2, interval=0.02)
        wait_for(lambda: requested("gpu-0") == 6, timeout=2, interval=0.02)
        # the watch took the manual sync's version: no relist of its own
        assert SyncRun.objects.filter(trigger="watch").count() == relists
        sim_api.create_namespaced_pod("lab", pod_body("after", "gpu-0", 1))
        wait_for(lambda: requested("gpu-0") == 7, timeout=2, interval=0.02)
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_the_watcher_marks_the_data_current_and_relists_every_resync_interval(
    sim, sim_api, sim_cluster, settings
):
    from inventory.models import Cluster, SyncRun
    from inventory.tasks import clusters_to_sync
    from inventory.watch import watch_cluster

    settings.INVENTORY_RESYNC_INTERVAL = 3
    sim_api.create_node(node_body("gpu-0"))
    stop = threading.Event()
    thread = threading.Thread(target=watch_cluster, args=(sim_cluster, stop),
                              kwargs={"timeout_s": 2, "backoff_s": 0.2})  # fmt: skip
    thread.start()
    try:
        current = wait_for(lambda: Cluster.objects.get(pk=sim_cluster.pk).is_watched, timeout=15)
        assert current and sim_cluster.pk not in clusters_to_sync()
        listed = SyncRun.objects.filter(cluster=sim_cluster, trigger="watch", status="succeeded")
        wait_for(lambda: listed.count() >= 3, timeout=20)
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()
    # no watch since: once the data is older than INVENTORY_STALE_AFTER the beat syncs it
    Cluster.objects.filter(pk=sim_cluster.pk).update(
        watched_at=timezone.now() - settings.INVENTORY_STALE_AFTER - timedelta(seconds=1)
    )
    assert sim_cluster.pk in clusters_to_sync()


@pytest.mark.django_db
def test_an_event_applied_twice_writes_once(sim, sim_api, sim_cluster):
    sim_api.create_node(node_body("gpu-0"))
    create_namespace(sim_api, "lab")
    sync_cluster(sim_cluster)
    sim_api.create_namespaced_pod("lab", pod_body("p", "gpu-0", 2))
    raw = json.loads(sim_api.read_namespaced_pod("p", "lab", _preload_content=False).data)
    assert apply_pod_event(sim_cluster, "ADDED", raw) > 0
    assert apply_pod_event(sim_cluster, "MODIFIED", raw) == 0
    assert requested("gpu-0") == 2
    cpu = dict(raw, metadata={**raw["metadata"], "name": "cpu"})
    cpu["spec"] = {**raw["spec"], "containers": [{"name": "m", "image": "x"}]}
    assert apply_pod_event(sim_cluster, "ADDED", cpu) == 0  # not a GPU pod: nothing
    assert apply_pod_event(sim_cluster, "DELETED", raw) > 0
    assert not GpuPod.objects.filter(name="p").exists() and requested("gpu-0") == 0


# -- the same on the simulator, where the watch cache's window and bookmark pace are set ----


@pytest.fixture
def small_sim(tmp_path, db):
    from inventory.models import Cluster
    from tests import kubesim

    fleet = {"nodes": [{"name": "gpu-0", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}}],
             "namespaces": [{"name": "lab"}]}  # fmt: skip
    sim = kubesim.start_simulator(fleet, tmp_path, history_size=20, bookmark_interval_s=0.3)
    cluster = Cluster.objects.create(slug="small", name="Small", kubeconfig_path=str(
        sim.kubeconfig_path), auth_method=Cluster.AuthMethod.KUBECONFIG)  # fmt: skip
    yield sim, cluster
    sim.stop()


def sim_pod(name: str, gpus: int = 1) -> dict:
    body = pod_body(name, "gpu-0", gpus)
    body["metadata"]["namespace"] = "lab"
    return body


def follower(cluster, run) -> _Follower:
    """The pod watch of ``cluster`` positioned at ``run``'s list, as the watcher holds it."""
    f = _Follower(cluster, "pods", threading.Event(), 2, 0.2, Progress(), run.finished_at)
    f.epoch, f.version = run.pk, run.pods_version
    return f


@pytest.mark.django_db(transaction=True)
def test_on_the_simulator_a_watch_resumes_where_it_was_and_a_lost_window_is_410(small_sim):
    from inventory.kube import KubeError

    sim, cluster = small_sim
    run = sync_cluster(cluster)
    start = run.pods_version
    assert run.status == "succeeded" and start
    # pods that ask for no GPU: nothing written, but the version moves past them
    for i in range(3):
        cpu = sim_pod(f"cpu-{i}")
        cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
        sim.create("pods", cpu)
    last = sim.get("pods", "cpu-2", "lab")["metadata"]["resourceVersion"]
    resumed = follower(cluster, run)
    resumed._stream()
    assert int(resumed.version) >= int(last) > int(start)
    assert not GpuPod.objects.filter(cluster=cluster).exists()
    # more pod changes than the watch cache keeps: a watch from the old version is 410 Gone
    for i in range(25):
        cpu = sim_pod(f"more-{i}")
        cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
        sim.create("pods", cpu)
    with pytest.raises(KubeError) as gone:
        follower(cluster, run)._stream()
    assert gone.value.expired


@pytest.mark.django_db(transaction=True)
def test_on_the_simulator_a_quiet_watch_keeps_the_cluster_current_by_its_bookmarks(small_sim):
    """Nothing changes: the bookmarks (every 0.3 s here, every minute on a real server) are
    all the stream brings, and they keep the data current."""
    _, cluster = small_sim
    run = sync_cluster(cluster)
    f = follower(cluster, run)
    f._stream()  # 2 s of a quiet cluster: bookmarks only
    assert int(f.version) >= int(run.pods_version)
    cluster.refresh_from_db()
    assert cluster.watched_at > run.finished_at and cluster.is_watched
    first = cluster.watched_at
    f._stream()
    cluster.refresh_from_db()
    assert cluster.watched_at > first


@pytest.mark.django_db(transaction=True)
def test_on_the_simulator_the_watcher_lists_then_brings_pods_in(small_sim):
    from inventory.models import SyncRun

    sim, cluster = small_sim
    stop = threading.Event()
    thread = threading.Thread(target=watch_pods, args=(cluster, stop),
                              kwargs={"timeout_s": 1, "backoff_s": 0.2})  # fmt: skip
    thread.start()
    try:
        listed = SyncRun.objects.filter(cluster=cluster, trigger="watch", status="succeeded")
        wait_for(listed.exists, timeout=10)
        # created after the list: the watch from its version brings it, whenever it starts
        sim.create("pods", sim_pod("a", 2))
        wait_for(lambda: GpuPod.objects.filter(name="a").exists(), timeout=2, interval=0.02)
        wait_for(lambda: requested("gpu-0") == 2, timeout=2, interval=0.02)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
