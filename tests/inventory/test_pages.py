"""Server-rendered inventory pages: fleet, nodes, node detail, clusters, "Sync now"."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from inventory.models import Cluster, SyncRun
from tests.factories import make_cluster, make_node, make_pod

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
GPU = "nvidia.com/gpu"

pytestmark = pytest.mark.django_db


def synced(**kw) -> Cluster:
    now = timezone.now()
    return make_cluster(
        sync_status=Cluster.SyncStatus.OK, last_sync_at=now, last_success_at=now, **kw
    )


@pytest.fixture
def as_researcher(client, researcher):
    client.force_login(researcher)
    return client


@pytest.fixture
def as_admin(client, admin_user):
    client.force_login(admin_user)
    return client


def _count_queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries)


# ---- login --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("inventory:fleet", []),
        ("inventory:nodes", []),
        ("inventory:node", [uuid.uuid4()]),
        ("inventory:clusters", []),
        ("inventory:cluster", ["prod"]),
    ],
)
def test_pages_require_login(client, name, args):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


def test_login_page_renders(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b'name="csrfmiddlewaretoken"' in response.content
    assert b'<label for="id_username">' in response.content


# ---- fleet --------------------------------------------------------------------------------


def test_fleet_shows_per_product_numbers(as_researcher):
    cluster = synced(slug="prod", name="Prod")
    make_node(cluster, "a1", product=A100, resources={GPU: (8, 8, 4)})
    # One unhealthy GPU pair: allocatable 6 of 8.
    make_node(cluster, "a2", product=A100, resources={GPU: (8, 6, 2)})
    make_node(
        cluster,
        "a3-mig",
        product=A100,
        mig_capable=True,
        mig_strategy="mixed",
        mig_config="all-1g.10gb",
        resources={"nvidia.com/mig-1g.10gb": (56, 56, 3)},
    )
    make_node(
        cluster,
        "h1",
        product=H100 + "-SHARED",
        sharing_strategy="time-slicing",
        resources={GPU: (32, 32, 30)},
    )

    response = as_researcher.get(reverse("inventory:fleet"))

    assert response.status_code == 200
    a100, h100 = response.context["summaries"]
    assert (a100.product, a100.nodes, a100.gpus, a100.mig_enabled_nodes) == (A100, 3, 24, 1)
    assert (a100.gpu.capacity, a100.gpu.allocatable, a100.gpu.requested) == (16, 14, 6)
    assert (h100.product, h100.time_sliced_nodes) == (H100, 1)
    html = response.content.decode()
    assert "14 of 16 allocatable" in html
    assert "6 requested" in html
    assert "8 idle now" in html
    assert "2 unhealthy" in html
    assert "nvidia.com/mig-1g.10gb" in html
    # Fleet totals: 16 + 32 capacity, 6 + 30 requested.
    totals = response.context["totals"]
    assert (totals.gpu.capacity, totals.gpu.allocatable, totals.gpu.requested) == (48, 46, 36)
    assert "Stale" not in html
    assert "In sync" in html


def test_a_watched_cluster_shows_the_watch_and_its_data_age(as_researcher, settings):
    """Between full syncs the watcher keeps the data current (inventory/watch.py): the
    pages say so, and the data's age is the watch's, not the last full sync's."""
    now = timezone.now()
    full = now - timedelta(minutes=9)
    c = make_cluster(sync_status=Cluster.SyncStatus.OK, last_sync_at=full, last_success_at=full,
                     watched_at=now - timedelta(seconds=5))  # fmt: skip
    assert c.data_as_of == c.watched_at and c.is_watched and not c.is_stale
    html = as_researcher.get(reverse("inventory:fleet")).content.decode()
    assert "Watched" in html and "full sync 9\xa0minutes ago" in html
    assert "Stale" not in html
    detail = as_researcher.get(reverse("inventory:cluster", args=[c.slug])).content.decode()
    assert re.search(r"data from \d+\xa0seconds ago \(kept current by a watch since the last "
                     r"full sync\)", detail)  # fmt: skip
    # the watch stopped: 9 minutes old data is stale again, shown with the watch's time
    Cluster.objects.filter(pk=c.pk).update(watched_at=now - settings.INVENTORY_STALE_AFTER * 2)
    c.refresh_from_db()
    assert c.data_as_of == c.watched_at and not c.is_watched and c.is_stale
    html = as_researcher.get(reverse("inventory:fleet")).content.decode()
    assert "Stale" in html and "Watched" not in html
    # a watch older than the last full sync does not count
    Cluster.objects.filter(pk=c.pk).update(last_success_at=now, watched_at=full)
    c.refresh_from_db()
    assert c.data_as_of == now and not c.is_watched and not c.is_stale


def test_fleet_empty_without_clusters(as_researcher):
    response = as_researcher.get(reverse("inventory:fleet"))
    assert response.status_code == 200
    assert b"No clusters yet" in response.content
    assert b"Ask a portal administrator to configure a cluster" in response.content


def test_fleet_empty_state_for_staff_links_admin(as_admin):
    response = as_admin.get(reverse("inventory:fleet"))
    assert reverse("admin:inventory_cluster_add").encode() in response.content


def test_fleet_waiting_for_first_sync(as_researcher):
    make_cluster(slug="new")
    response = as_researcher.get(reverse("inventory:fleet"))
    assert b"No GPU nodes yet" in response.content
    assert b"Waiting for the first sync" in response.content


def test_fleet_stale_banner_when_last_sync_failed(as_researcher):
    good = timezone.now() - timedelta(hours=2)
    cluster = make_cluster(
        slug="prod",
        name="Prod",
        sync_status=Cluster.SyncStatus.FAILED,
        last_sync_at=timezone.now(),
        last_success_at=good,
        last_error="connection refused by api.prod:6443",
    )
    make_node(cluster, "a1")
    response = as_researcher.get(reverse("inventory:fleet"))
    html = response.content.decode()
    assert "Prod data is stale" in html
    assert "Showing data from " + timezone.localtime(good).strftime("%Y-%m-%d %H:%M") in html
    assert "last sync failed:" in html
    assert "connection refused by api.prod:6443" in html
    # The numbers from the last good sync are still shown.
    assert "8 of 8 allocatable" in html


def test_fleet_stale_banner_when_sync_overdue(as_researcher, settings):
    settings.INVENTORY_STALE_AFTER = timedelta(minutes=2)
    old = timezone.now() - timedelta(minutes=10)
    make_cluster(name="Lab", sync_status=Cluster.SyncStatus.OK, last_success_at=old)
    response = as_researcher.get(reverse("inventory:fleet"))
    assert b"Lab data is stale" in response.content
    assert b"no sync has finished since then" in response.content


def test_fleet_query_count_is_constant(as_researcher):
    cluster = synced()
    for i in range(3):
        make_node(
            cluster,
            f"small-{i}",
            mig_capable=True,
            resources={GPU: (8, 8, 1), "nvidia.com/mig-3g.40gb": (2, 2, 0)},
        )
    few = _count_queries(as_researcher, reverse("inventory:fleet"))
    other = synced()
    for i in range(27):
        make_node(other, f"big-{i}", product=H100 if i % 2 else A100)
    many = _count_queries(as_researcher, reverse("inventory:fleet"))
    assert few == many


# ---- node list ------------------------------------------------------------------------------


@pytest.fixture
def fleet():
    prod = synced(slug="prod", name="Prod")
    lab = synced(slug="lab", name="Lab")
    make_node(prod, "gpu-a100-1", product=A100, resources={GPU: (8, 8, 5)})
    make_node(prod, "gpu-a100-2", product=A100, unschedulable=True)
    make_node(lab, "gpu-h100-1", product=H100, resources={GPU: (8, 8, 8)})
    make_node(lab, "cpu-1", product="")
    make_node(lab, "gpu-gone", product=H100, gone_at=timezone.now())
    return prod, lab


def _names(response) -> list[str]:
    return [n.name for n in response.context["page"].object_list]


def test_node_list_lists_present_nodes(as_researcher, fleet):
    response = as_researcher.get(reverse("inventory:nodes"))
    assert response.status_code == 200
    assert _names(response) == ["cpu-1", "gpu-h100-1", "gpu-a100-1", "gpu-a100-2"]
    html = response.content.decode()
    assert "8 / 8" in html  # GPUs alloc / cap
    assert "Cordoned" in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("product=H100", ["gpu-h100-1"]),
        ("product=a100", ["gpu-a100-1", "gpu-a100-2"]),
        ("schedulable=false", ["gpu-a100-2"]),
        ("schedulable=true&cluster=prod", ["gpu-a100-1"]),
        ("q=cpu", ["cpu-1"]),
        ("q=HBM3", ["gpu-h100-1"]),
        ("include_gone=true&cluster=lab", ["cpu-1", "gpu-gone", "gpu-h100-1"]),
    ],
)
def test_node_list_filters(as_researcher, fleet, query, expected):
    response = as_researcher.get(reverse("inventory:nodes") + "?" + query)
    assert response.status_code == 200
    assert _names(response) == expected


def test_node_list_invalid_filter_shows_error(as_researcher, fleet):
    response = as_researcher.get(reverse("inventory:nodes") + "?mig_capable=maybe")
    assert response.status_code == 200
    html = response.content.decode()
    assert "The filter is not valid" in html
    assert _names(response) == []
    # A cluster slug no cluster has is a filter that matches no node (as on the API).
    response = as_researcher.get(reverse("inventory:nodes") + "?cluster=no-such-cluster")
    assert response.status_code == 200 and _names(response) == []


def test_node_list_paginates_and_keeps_filters(as_researcher):
    cluster = synced()
    for i in range(55):
        make_node(cluster, f"n-{i:03}", product=A100)
    make_node(cluster, "other", product=H100)

    first = as_researcher.get(reverse("inventory:nodes") + "?product=A100")
    assert len(_names(first)) == 50
    assert "product=A100&amp;page=2" in first.content.decode()
    assert "Page 1 of 2" in first.content.decode()

    second = as_researcher.get(reverse("inventory:nodes") + "?product=A100&page=2")
    assert _names(second) == [f"n-{i:03}" for i in range(50, 55)]
    # A page number past the end shows the last page rather than an error.
    assert as_researcher.get(reverse("inventory:nodes") + "?page=99").status_code == 200


def test_node_list_query_count_is_constant(as_researcher):
    cluster = synced()
    for i in range(3):
        make_node(cluster, f"few-{i}", driver_version="550.1")
    few = _count_queries(as_researcher, reverse("inventory:nodes"))
    for i in range(27):
        make_node(
            cluster,
            f"more-{i}",
            product=H100,
            driver_version="550.2" if i else "535.1",
            resources={GPU: (8, 7, 1), "nvidia.com/mig-1g.10gb": (7, 7, 0)},
        )
    many = _count_queries(as_researcher, reverse("inventory:nodes"))
    assert few == many
    assert many <= 9  # 8 + the header's unread-notifications COUNT (notices/)


# ---- node detail ----------------------------------------------------------------------------


@pytest.fixture
def sick_node():
    cluster = synced(slug="prod")
    for i in range(3):
        make_node(cluster, f"peer-{i}", driver_version="550.107.02")
    node = make_node(
        cluster,
        "gpu-sick",
        driver_version="535.54.03",
        unschedulable=True,
        mig_capable=True,
        mig_strategy="mixed",
        mig_config="all-balanced",
        mig_config_state="success",
        resources={GPU: (8, 7, 2), "nvidia.com/mig-3g.40gb": (2, 2, 1)},
        labels={
            "kubernetes.io/hostname": "gpu-sick",
            "nvidia.com/gpu.product": A100,
            "nvidia.com/mig.config": "all-balanced",
        },
    )
    make_pod(node, "train-resnet-7f9c", namespace="ml-vision", gpus=2)
    return node


def test_node_detail_shows_badges_and_resources(as_researcher, sick_node):
    response = as_researcher.get(reverse("inventory:node", args=[sick_node.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    codes = {b.code for b in response.context["node"].badges}
    assert codes == {"unhealthy-gpu", "driver-skew", "cordoned"}
    assert "Unhealthy GPU" in html
    assert "allocatable 7 &lt; capacity 8" in html
    assert "Driver skew" in html
    assert "most NVIDIA-A100-SXM4-80GB nodes run 550.107.02" in html
    assert "Cordoned" in html
    assert "7 of 8 allocatable" in html
    assert "nvidia.com/mig-3g.40gb" in html
    assert "all-balanced" in html
    # nvidia.com/ labels come first.
    assert html.index("nvidia.com/gpu.product") < html.index("kubernetes.io/hostname")


def test_node_detail_hides_pod_names_from_non_staff(as_researcher, sick_node):
    response = as_researcher.get(reverse("inventory:node", args=[sick_node.pk]))
    html = response.content.decode()
    assert "ml-vision" in html
    assert "train-resnet-7f9c" not in html
    assert "Pod names are shown to portal staff only" in html


def test_node_detail_shows_pod_names_to_staff(as_admin, sick_node):
    response = as_admin.get(reverse("inventory:node", args=[sick_node.pk]))
    assert "train-resnet-7f9c" in response.content.decode()


def test_node_detail_unknown_is_404(as_researcher):
    response = as_researcher.get(reverse("inventory:node", args=[uuid.uuid4()]))
    assert response.status_code == 404


def test_node_detail_query_count(as_researcher, sick_node, django_assert_max_num_queries):
    # session, user, node, resources, pods, usual drivers, portal labels, GPU telemetry,
    # the member's own namespaces (pod names, telemetry/visibility.py)
    with django_assert_max_num_queries(10):  # 9 + the header's unread COUNT (notices/)
        as_researcher.get(reverse("inventory:node", args=[sick_node.pk]))


# ---- clusters -------------------------------------------------------------------------------


def test_cluster_list_and_detail(as_researcher):
    cluster = make_cluster(
        slug="prod",
        name="Prod",
        sync_status=Cluster.SyncStatus.FAILED,
        last_sync_at=timezone.now(),
        last_error="Unauthorized (401): token expired",
        server_version="v1.31.2",
    )
    make_node(cluster, "a1")
    SyncRun.objects.create(
        cluster=cluster,
        status=SyncRun.Status.SUCCEEDED,
        duration_ms=1234,
        nodes_seen=812,
        gpu_pods_seen=97,
        rows_created=3,
        rows_updated=4,
        list_restarts=1,
        started_at=timezone.now() - timedelta(minutes=5),
    )
    SyncRun.objects.create(
        cluster=cluster,
        status=SyncRun.Status.FAILED,
        duration_ms=40,
        error="Unauthorized (401): token expired",
    )

    listing = as_researcher.get(reverse("inventory:clusters"))
    assert listing.status_code == 200
    assert "Prod" in listing.content.decode()
    assert "Failed" in listing.content.decode()

    response = as_researcher.get(reverse("inventory:cluster", args=["prod"]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "v1.31.2" in html
    assert "1,234 ms" in html
    assert "812" in html and "97" in html
    assert ">7<" in html  # rows written: 3 created + 4 updated
    assert "Unauthorized (401): token expired" in html
    assert [r.status for r in response.context["runs"]] == ["failed", "succeeded"]
    # No sync button for non-staff.
    assert "Sync now" not in html
    assert 'data-enforcement="resourcequota">ResourceQuota (class not enforced)' in html


def test_unknown_cluster_is_404(as_researcher):
    assert as_researcher.get(reverse("inventory:cluster", args=["nope"])).status_code == 404


def queued_tasks() -> list[dict]:
    """Task messages waiting in the (real, test) Redis broker's default queue."""
    import json

    import redis
    from django.conf import settings

    raw = redis.Redis.from_url(settings.REDIS_URL).lrange("celery", 0, -1)
    return [json.loads(m)["headers"] for m in raw]


@pytest.fixture
def empty_queue():
    import redis
    from django.conf import settings

    redis.Redis.from_url(settings.REDIS_URL).delete("celery")


def test_sync_now_is_staff_only_and_post_only(as_researcher, empty_queue):
    synced(slug="prod")
    url = reverse("inventory:cluster-sync", args=["prod"])
    assert as_researcher.get(url).status_code == 405
    assert as_researcher.post(url).status_code == 403
    assert queued_tasks() == []


def test_sync_now_enqueues_for_staff(as_admin, empty_queue):
    cluster = synced(slug="prod", name="Prod")

    page = as_admin.get(reverse("inventory:cluster", args=["prod"]))
    assert "Sync now" in page.content.decode()

    url = reverse("inventory:cluster-sync", args=["prod"])
    assert as_admin.get(url).status_code == 405
    response = as_admin.post(url, follow=True)
    assert response.redirect_chain == [(reverse("inventory:cluster", args=["prod"]), 302)]
    (task,) = queued_tasks()
    assert task["task"] == "inventory.tasks.sync_cluster_task"
    assert task["argsrepr"] == repr((str(cluster.pk), "manual"))
    assert "Sync of Prod queued" in response.content.decode()


def test_sync_now_requires_csrf(client, admin_user):
    from django.test import Client

    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(admin_user)
    synced(slug="prod")
    response = csrf_client.post(reverse("inventory:cluster-sync", args=["prod"]))
    assert response.status_code == 403
