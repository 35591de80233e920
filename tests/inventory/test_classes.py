"""GPU classes derived from the inventory (inventory/classes.py) and their API
(``/api/v1/gpu-classes/``): one class per GFD ``nvidia.com/gpu.product``, time-sliced
products (``-SHARED``, ``nvidia.com/gpu.replicas``) their own; admin edits kept; a class
whose nodes are gone stays, marked empty; validation answers 4xx."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from inventory.classes import create_class, refresh
from inventory.models import GpuClass, Node
from quotas.models import AuditEvent, TeamNamespace
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_team

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
L40S = "NVIDIA-L40S-SHARED"
PRODUCT = "nvidia.com/gpu.product"


@pytest.fixture
def cluster(db):
    c = make_cluster("prod")
    make_node(c, "h1", product=H100)
    make_node(c, "h2", product=H100, labels={PRODUCT: H100, "nvidia.com/gpu.family": "hopper"})
    make_node(c, "l1", product=L40S, gpu_replicas=4, sharing_strategy="time-slicing",
              resources={GPU: (32, 32, 0)})  # fmt: skip
    make_node(c, "cpu", product="")
    refresh(c)
    return c


def test_one_class_per_product_time_sliced_ones_with_their_replicas(cluster):
    h100, l40s = GpuClass.objects.order_by("name")
    assert (h100.slug, h100.name, h100.selector) == (
        "nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", {PRODUCT: H100}
    )  # fmt: skip
    assert (h100.node_count, h100.gpus, h100.replicas, h100.resources) == (2, 16, 1, [GPU])
    assert h100.capacity_text() == "16 GPUs" and not h100.time_sliced
    assert (l40s.name, l40s.replicas, l40s.capacity_text()) == (
        "NVIDIA L40S (time-sliced x4)", 4, "32 replicas on 8 GPUs"
    )  # fmt: skip
    assert set(Node.objects.filter(gpu_class=h100).values_list("name", flat=True)) == {"h1", "h2"}
    assert Node.objects.get(name="cpu").gpu_class is None
    assert AuditEvent.objects.filter(action="gpu_class.derived").count() == 2


def test_admin_edits_are_kept_and_a_class_without_nodes_stays_marked_empty(cluster):
    h100 = GpuClass.objects.get(selector={PRODUCT: H100})
    h100.name, h100.weight = "H100 (fast)", "4.5"
    h100.save()
    ns = TeamNamespace.objects.create(team=make_team("vision"), cluster=cluster, name="v")
    make_grant(ns, 2, gpu_class=h100)
    Node.objects.filter(gpu_product=H100).update(gone_at=timezone.now())
    refresh(cluster)
    h100.refresh_from_db()
    assert (h100.name, str(h100.weight), h100.node_count, h100.resources) == (
        "H100 (fast)", "4.5000", 0, [GPU]
    )  # fmt: skip
    assert h100.empty and h100.empty_since is not None
    make_node(cluster, "h3", product=H100)  # back: same class, no longer empty
    refresh(cluster)
    h100.refresh_from_db()
    assert (h100.node_count, h100.empty_since) == (1, None)
    assert GpuClass.objects.filter(cluster=cluster).count() == 2


def test_an_admin_class_takes_its_nodes_and_admin_classes_do_not_overlap(cluster, admin_user):
    hopper = create_class(admin_user, cluster, slug="hopper", name="Hopper",
                          selector={"nvidia.com/gpu.family": "hopper"})  # fmt: skip
    assert list(hopper.nodes.values_list("name", flat=True)) == ["h2"]
    assert GpuClass.objects.get(selector={PRODUCT: H100}).node_count == 1
    with pytest.raises(ValidationError) as err:
        create_class(admin_user, cluster, slug="h100-all", name="All H100",
                     selector={PRODUCT: H100})  # fmt: skip
    assert "matches nodes of class Hopper" in err.value.message_dict["selector"][0]
    for bad in ({}, {"nvidia.com/gpu.product": 3}, {"bad key!": "x"}):
        with pytest.raises(ValidationError):
            create_class(admin_user, cluster, slug="bad", name="Bad", selector=bad)


def test_everyone_reads_classes_with_their_free_figure(cluster, researcher_api):
    body = researcher_api.get("/api/v1/gpu-classes/", {"cluster": "prod"}).json()
    l40s = next(c for c in body["results"] if c["slug"] == "nvidia-l40s-shared")
    assert (l40s["capacity_text"], l40s["time_sliced"], l40s["replicas"]) == (
        "32 replicas on 8 GPUs", True, 4
    )  # fmt: skip
    assert l40s["enforcement"] == "resourcequota: class not enforced by Kubernetes on this cluster"
    assert l40s["capacity"] == [{
        "resource": GPU, "unit": "replicas", "allocatable": 32, "requested": 0, "idle": 32,
        "limit": 32, "granted": 0, "held_beyond_grants": 0, "pool_free_to_grant": 48,
        "free_to_grant": 32}]  # fmt: skip
    assert researcher_api.get("/api/v1/gpu-classes/", {"cluster": "nope"}).status_code == 404
    r = researcher_api.post("/api/v1/gpu-classes/", {}, format="json")
    assert r.status_code == 403


def test_admins_write_classes_with_validation_never_a_500(cluster, admin_api):
    url = "/api/v1/gpu-classes/"
    ok = {"cluster": "prod", "slug": "hopper", "name": "Hopper",
          "selector": {"nvidia.com/gpu.family": "hopper"}, "weight": "2.5"}  # fmt: skip
    for change, field, status in [
        ({"weight": "-1"}, "weight", 400),
        ({"selector": {}}, "selector", 400),
        ({"selector": "hopper"}, "selector", 400),
        ({"cluster": "nope"}, "cluster", 404),  # a body naming no cluster
        ({"slug": "Not A Slug"}, "slug", 400),
        ({"slug": "nvidia-h100-80gb-hbm3"}, "non_field_errors", 409),  # taken on prod
    ]:
        r = admin_api.post(url, {**ok, **change}, format="json")
        assert r.status_code == status and field in r.json(), (change, r.content)
    r = admin_api.post(url, ok, format="json")
    assert r.status_code == 201, r.content
    assert (r.json()["derived"], r.json()["node_count"], r.json()["weight"]) == (False, 1, "2.5000")
    pk = r.json()["id"]
    r = admin_api.patch(f"{url}{pk}/", {"name": "Hopper GPUs", "slug": "other"}, format="json")
    assert r.status_code == 409 and "slug" in r.json()  # fixed once the class exists
    r = admin_api.patch(f"{url}{pk}/", {"name": "Hopper GPUs"}, format="json")
    assert r.status_code == 200 and r.json()["name"] == "Hopper GPUs"
    assert AuditEvent.objects.filter(action="gpu_class.changed", object_id=pk).exists()
    ns = TeamNamespace.objects.create(team=make_team("vision"), cluster=cluster, name="v")
    make_grant(ns, 1, gpu_class=GpuClass.objects.get(pk=pk))
    r = admin_api.delete(f"{url}{pk}/")
    assert r.status_code == 409 and "1 grant(s)" in r.json()["detail"]


def test_the_django_admin_edits_a_class_through_the_audited_path(cluster, client, admin_user):
    h100 = GpuClass.objects.get(selector={PRODUCT: H100})
    client.force_login(admin_user)
    url = f"/admin/inventory/gpuclass/{h100.pk}/change/"
    assert client.get("/admin/inventory/gpuclass/").status_code == 200
    assert client.get(url).status_code == 200
    form = {"name": "H100", "selector": json.dumps({PRODUCT: H100}), "weight": "-2"}
    r = client.post(url, form)
    assert r.status_code == 200 and "greater than or equal to 0" in r.content.decode()
    r = client.post(url, {**form, "weight": "3"})
    assert r.status_code == 302, r.content.decode()[:2000]
    h100.refresh_from_db()
    assert (h100.name, str(h100.weight)) == ("H100", "3.0000")
    assert AuditEvent.objects.filter(action="gpu_class.changed", object_id=str(h100.pk)).exists()
