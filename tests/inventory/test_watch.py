"""Node changes reach the inventory through a watch between full syncs (real HTTP stream)."""

import json
import threading

import pytest

from inventory.models import Node, NodeResource
from inventory.sync import apply_node_changes, sync_cluster
from inventory.watch import watch_cluster
from tests.conftest import wait_for
from tests.inventory.test_sync import node_body

GPU = "nvidia.com/gpu"


def sim_stats(sim) -> dict:
    """The portal's requests through the cluster's proxy (tests/realcluster.py)."""
    return sim.stats()


@pytest.mark.django_db(transaction=True)
def test_a_watch_brings_label_cordon_allocatable_and_deletion_changes(sim, sim_api, sim_cluster):
    sim_api.create_node(node_body("gpu-0"))
    sim_api.create_node(node_body("gpu-1"))
    assert sync_cluster(sim_cluster).status == "succeeded"
    stop = threading.Event()
    thread = threading.Thread(target=watch_cluster, args=(sim_cluster, stop),
                              kwargs={"timeout_s": 2, "backoff_s": 0.2})  # fmt: skip
    thread.start()
    try:
        # The watch starts from the list's resourceVersion: change nodes only once the
        # watcher holds one, as changes before it belong to the next full sync.
        wait_for(lambda: sim_stats(sim).get("watches", 0) >= 1)
        sim_api.patch_node("gpu-0", {"metadata": {"labels": {"nvidia.com/mig.config": "x"}}})
        sim_api.patch_node("gpu-0", {"spec": {"unschedulable": True}})
        sim_api.patch_node_status("gpu-1", {"status": {"allocatable": {GPU: "5"}}})
        sim_api.create_node(node_body("gpu-2", product="NVIDIA-H200"))
        wait_for(lambda: Node.objects.get(name="gpu-0").unschedulable, timeout=10)
        assert Node.objects.get(name="gpu-0").mig_config == "x"
        wait_for(
            lambda: NodeResource.objects.get(node__name="gpu-1", resource=GPU).allocatable == 5,
            timeout=10,
        )
        wait_for(lambda: Node.objects.filter(name="gpu-2", gpu_product="NVIDIA-H200").exists())
        sim_api.delete_node("gpu-1")
        wait_for(lambda: Node.objects.get(name="gpu-1").gone_at is not None, timeout=10)
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()


@pytest.mark.django_db
def test_an_unchanged_node_from_a_watch_writes_nothing(sim, sim_api, sim_cluster):
    sim_api.create_node(node_body("gpu-0"))
    sync_cluster(sim_cluster)
    obj = json.loads(sim_api.read_node("gpu-0", _preload_content=False).data)  # raw, as watched
    # On the real control plane the node's controllers may have changed it since the sync
    # (a full run saw one write here): apply what was read once, then the same again.
    apply_node_changes(sim_cluster, [obj], [])
    assert apply_node_changes(sim_cluster, [obj], []) == 0
    obj["metadata"]["labels"]["team"] = "vision"
    assert apply_node_changes(sim_cluster, [obj], []) == 1
    assert Node.objects.get(name="gpu-0").labels["team"] == "vision"


@pytest.mark.django_db(transaction=True)
def test_watchers_follow_clusters_connected_disabled_and_edited(sim, sim_api, sim_cluster):
    """manage.py watch_inventory re-reads the cluster list: a cluster connected after it
    started is watched, a disabled one is not, an edited connection restarts its watch."""
    from inventory.models import Cluster
    from inventory.watch import Progress, Watchers

    sim_cluster.sync_enabled = False
    sim_cluster.save()
    stop, progress = threading.Event(), Progress()
    watchers = Watchers(stop, timeout_s=2, progress=progress)
    try:
        assert watchers.reconcile() == ([], []) and len(watchers) == 0
        Cluster.objects.filter(pk=sim_cluster.pk).update(sync_enabled=True)  # connected
        assert watchers.reconcile() == (["sim"], [])
        wait_for(lambda: sim_stats(sim).get("watches", 0) >= 1)
        sim_api.create_node(node_body("gpu-9"))
        wait_for(lambda: Node.objects.filter(name="gpu-9").exists(), timeout=10)
        assert watchers.reconcile() == ([], [])  # nothing changed: the thread stays
        Cluster.objects.filter(pk=sim_cluster.pk).update(kubeconfig_context="other")
        assert watchers.reconcile() == (["sim"], ["sim"])  # new credentials: a new thread
        Cluster.objects.filter(pk=sim_cluster.pk).update(sync_enabled=False)
        assert watchers.reconcile() == ([], ["sim"]) and len(watchers) == 0
        assert progress.stalest_age() == 0.0  # a stopped cluster never makes liveness stale
    finally:
        stop.set()
        watchers.close(15)
