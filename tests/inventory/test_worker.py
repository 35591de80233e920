"""The beat task fans out syncs that a real Celery worker runs against the cluster."""

import pytest

from inventory.models import Cluster, Node, SyncRun
from inventory.tasks import sync_all_clusters
from tests.conftest import wait_for
from tests.inventory.test_sync import node_body

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_beat_task_syncs_every_enabled_cluster_through_a_worker(
    celery_worker, sim, sim_api, sim_cluster
):
    sim_api.create_node(node_body("gpu-0"))
    Cluster.objects.create(
        slug="disabled", name="Off", auth_method="kubeconfig",
        kubeconfig_path=str(sim.kubeconfig_path), sync_enabled=False,
    )  # fmt: skip
    sync_all_clusters.delay()
    run = wait_for(
        lambda: SyncRun.objects.filter(cluster=sim_cluster, finished_at__isnull=False).first()
    )
    assert run.status == "succeeded", run.error
    assert Node.objects.filter(cluster=sim_cluster, name="gpu-0").exists()
    assert not SyncRun.objects.filter(cluster__slug="disabled").exists()
    # the worker logs the outcome just after the run's row is finished: poll for it
    assert wait_for(lambda: b"sync of sim succeeded" in celery_worker.log_path.read_bytes(), 10)
