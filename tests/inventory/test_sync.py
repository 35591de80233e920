"""Inventory sync through the official client against the simulated cluster (real HTTP).

The cluster is changed only through the Kubernetes API (create/patch/delete) or the
simulator's fault switches; the portal's code runs unmodified.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inventory.kube import KubeGateway
from inventory.models import Cluster, GpuPod, NamespaceUsage, Node, NodeResource, SyncRun
from inventory.sync import sync_cluster
from tests.conftest import wait_for
from tests.kubesim import create_namespace

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"


def node_body(
    name: str,
    product: str = "NVIDIA-A100-SXM4-80GB",
    gpus: int = 8,
    alloc=None,
    labels=None,
    extra_resources=None,
) -> dict:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    capacity.update(extra_resources or {})
    allocatable = dict(capacity)
    if alloc is not None:
        allocatable[GPU] = str(alloc)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/cuda.driver-version.full": "550.107.02",
                **(labels or {}),
            },
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_body(name: str, node: str | None, gpus: int = 1, resource: str = GPU) -> dict:
    spec = {
        "containers": [
            {
                "name": "main",
                "image": "cuda",
                "resources": {"requests": {resource: str(gpus)}, "limits": {resource: str(gpus)}},
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def fleet(sim_api):
    """Three GPU nodes, a CPU node, GPU pods in two namespaces plus a CPU pod."""
    core = sim_api
    for i in range(3):
        core.create_node(node_body(f"gpu-{i}"))
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            # a kubelet registers its node with these labels (and kwok skips a node with none)
            "metadata": {"name": "cpu-0", "labels": {"kubernetes.io/hostname": "cpu-0"}},
            "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}},
        }
    )
    for ns in ("ml-vision", "genomics"):
        create_namespace(core, ns)
    core.create_namespaced_pod("ml-vision", pod_body("train-a", "gpu-0", 4))
    core.create_namespaced_pod("ml-vision", pod_body("train-b", "gpu-1", 2))
    core.create_namespaced_pod("genomics", pod_body("align", "gpu-1", 1))
    # pending: no node has 16 GPUs, so kube-scheduler leaves it unscheduled
    core.create_namespaced_pod("genomics", pod_body("queued", None, 16))
    cpu = pod_body("web", "cpu-0")
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    core.create_namespaced_pod("genomics", cpu)
    # Their kubelet (kwok) starts the bound pods a moment later: wait, so that a test's two
    # syncs see the same cluster.
    wait_for(
        lambda: all(
            p.status.phase == "Running"
            for p in core.list_pod_for_all_namespaces().items
            if p.spec.node_name
        )
    )
    # ... and the node lifecycle controller lifts the not-ready taint kwok's Ready earns
    # (a sync between the two would see the nodes change under it)
    wait_for(
        lambda: (
            not any(
                t.key == "node.kubernetes.io/not-ready"
                for n in core.list_node().items
                for t in n.spec.taints or []
            )
        )
    )
    return core


def requested(node_name: str) -> int:
    return NodeResource.objects.get(node__name=node_name, resource=GPU).requested


def test_first_sync_mirrors_nodes_pods_and_usage(sim_cluster, fleet):
    run = sync_cluster(sim_cluster, page_size=2)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert (run.nodes_seen, run.pods_seen, run.gpu_pods_seen) == (4, 5, 4)
    assert run.pages >= 5  # 4 nodes + 5 pods at 2 per page
    assert set(Node.objects.values_list("name", flat=True)) == {"gpu-0", "gpu-1", "gpu-2", "cpu-0"}
    assert Node.objects.get(name="gpu-0").gpu_product == "NVIDIA-A100-SXM4-80GB"
    assert (requested("gpu-0"), requested("gpu-1"), requested("gpu-2")) == (4, 3, 0)
    usage = {(u.namespace, u.resource): (u.requested, u.pods) for u in NamespaceUsage.objects.all()}
    assert usage == {("ml-vision", GPU): (6, 2), ("genomics", GPU): (17, 2)}
    pending = GpuPod.objects.get(name="queued")
    assert pending.node is None and pending.phase == "Pending"
    sim_cluster.refresh_from_db()
    assert sim_cluster.sync_status == Cluster.SyncStatus.OK and not sim_cluster.is_stale


def test_second_sync_without_changes_writes_nothing(sim_cluster, fleet):
    sync_cluster(sim_cluster, page_size=2)
    with CaptureQueriesContext(connection) as ctx:
        run = sync_cluster(sim_cluster, page_size=2)
    assert run.status == "succeeded" and run.rows_written == 0
    writes = [
        q["sql"]
        for q in ctx.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))
        and "inventory_syncrun" not in q["sql"]
        and "inventory_cluster" not in q["sql"]
    ]
    assert writes == []


def _pods_listed(cluster) -> list[dict]:
    with KubeGateway(cluster) as gw:
        return gw.list_pods()


def test_changes_are_picked_up(sim_cluster, fleet):
    sync_cluster(sim_cluster)
    core = fleet
    core.create_node(node_body("gpu-new", product="NVIDIA-H100-80GB-HBM3"))
    core.delete_node("gpu-2")
    core.patch_node("gpu-0", {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}})
    core.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    core.patch_node_status("gpu-1", {"status": {"allocatable": {GPU: "6"}}})
    core.patch_namespaced_pod_status("train-a", "ml-vision", {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("align", "genomics")
    # A deleted running pod is Terminating, and still holds its GPUs, until its kubelet has
    # stopped it; the sync sees it until then.
    assert core.read_namespaced_pod("align", "genomics").metadata.deletion_timestamp
    assert "align" in {p["metadata"]["name"] for p in _pods_listed(sim_cluster)}
    wait_for(lambda: "align" not in {p["metadata"]["name"] for p in _pods_listed(sim_cluster)})

    run = sync_cluster(sim_cluster)
    assert run.status == "succeeded", run.error
    assert run.nodes_gone == 1
    gone = Node.objects.get(name="gpu-2")
    assert gone.gone_at is not None  # marked, not deleted
    assert Node.objects.present().filter(name="gpu-new").exists()
    assert Node.objects.get(name="gpu-0").mig_config == "all-1g.10gb"
    gpu1 = Node.objects.get(name="gpu-1")
    assert gpu1.unschedulable
    assert NodeResource.objects.get(node=gpu1, resource=GPU).allocatable == 6
    assert set(GpuPod.objects.values_list("name", flat=True)) == {"train-b", "queued"}
    assert (requested("gpu-0"), requested("gpu-1")) == (0, 2)
    usage = {(u.namespace): u.requested for u in NamespaceUsage.objects.all()}
    assert usage == {"ml-vision": 2, "genomics": 16}

    # A node that comes back is present again.
    core.create_node(node_body("gpu-2"))
    sync_cluster(sim_cluster)
    assert Node.objects.get(name="gpu-2").gone_at is None


def test_api_errors_mid_sync_mark_cluster_stale_and_keep_data(sim, sim_cluster, fleet):
    assert sync_cluster(sim_cluster, page_size=2).status == "succeeded"
    fleet.delete_node("gpu-2")
    sim.faults.update(error_rate=1.0, error_code=500, path_regex="/api/v1/pods")
    run = sync_cluster(sim_cluster, page_size=2)
    assert run.status == SyncRun.Status.FAILED
    assert "500" in run.error
    sim_cluster.refresh_from_db()
    assert sim_cluster.sync_status == Cluster.SyncStatus.FAILED and sim_cluster.is_stale
    assert sim_cluster.last_error
    # The failed sync saw the node list but not the pods: nothing may be concluded gone.
    assert Node.objects.get(name="gpu-2").gone_at is None
    assert GpuPod.objects.count() == 4
    sim.faults.reset()
    assert sync_cluster(sim_cluster, page_size=2).status == "succeeded"
    assert Node.objects.get(name="gpu-2").gone_at is not None


def test_unreachable_cluster_fails_cleanly(sim, sim_cluster, fleet):
    sim.faults.update(refuse_connections=True)
    run = sync_cluster(sim_cluster)
    assert run.status == "failed" and "reach" in run.error
    assert Node.objects.count() == 0


def test_expired_continue_token_restarts_the_list(sim, sim_cluster, fleet):
    sim.faults.update(expire_continue=True, expire_continue_count=1)
    run = sync_cluster(sim_cluster, page_size=2)
    assert run.status == "succeeded", run.error
    assert run.list_restarts == 1
    assert Node.objects.count() == 4


def test_always_expiring_continue_token_gives_up(sim, sim_cluster, fleet):
    sim.faults.update(expire_continue=True)
    run = sync_cluster(sim_cluster, page_size=2)
    assert run.status == "failed" and "410" in run.error


def test_mig_resources_are_tracked(sim_cluster, sim_api):
    sim_api.create_node(
        node_body(
            "mig-0",
            gpus=0,
            labels={"nvidia.com/mig.strategy": "mixed"},
            extra_resources={"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "2"},
        )
    )
    create_namespace(sim_api, "a")
    sim_api.create_namespaced_pod("a", pod_body("m", "mig-0", 3, "nvidia.com/mig-1g.10gb"))
    assert sync_cluster(sim_cluster).status == "succeeded"
    rows = {
        r.resource: (r.capacity, r.requested)
        for r in NodeResource.objects.filter(node__name="mig-0")
    }
    assert rows == {
        GPU: (0, 0),
        "nvidia.com/mig-1g.10gb": (14, 3),
        "nvidia.com/mig-3g.40gb": (2, 0),
    }


def test_bad_credentials_fail_permanently(db, tmp_path):
    from tests.factories import make_cluster

    cluster = make_cluster("broken", kubeconfig_path=str(tmp_path / "missing"))
    run = sync_cluster(cluster)
    assert run.status == "failed" and "credentials" in run.error


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_writes_go_through_the_writer_thread(sim_cluster, fleet):
    """Production path: no outer transaction, so batches commit on the writer's connection."""
    run = sync_cluster(sim_cluster, page_size=2)
    assert run.status == "succeeded", run.error
    assert run.rows_created > 0
    assert GpuPod.objects.count() == 4 and Node.objects.count() == 4
    assert (requested("gpu-0"), requested("gpu-1")) == (4, 3)
    assert sync_cluster(sim_cluster, page_size=2).rows_written == 0


def test_a_pending_pod_keeps_the_gpu_class_labels_it_asks_for(sim_api, sim_cluster):
    from inventory.models import GpuPod

    sim_api.create_node(node_body("gpu-0"))
    create_namespace(sim_api, "ml")
    body = pod_body("wants-h100", None, 2)
    body["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                    "kubernetes.io/os": "linux"}  # fmt: skip
    sim_api.create_namespaced_pod("ml", body)
    sim_api.create_namespaced_pod("ml", pod_body("plain", None, 1))
    assert sync_cluster(sim_cluster).status == "succeeded"
    pods = dict(GpuPod.objects.values_list("name", "gpu_selector"))
    assert pods == {"wants-h100": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                    "plain": {}}  # fmt: skip
