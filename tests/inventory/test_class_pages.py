"""GPU classes as portal pages (``/gpu-classes/``, inventory/views_classes.py): everyone
reads them with the API's idle now and free to grant; admins define, edit and delete them
through the audited path, with errors on the form's fields and a confirmation first."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from inventory.classes import refresh
from inventory.models import GpuClass
from quotas.models import AuditEvent, TeamNamespace
from tests.conftest import api_for
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_team

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
PRODUCT = "nvidia.com/gpu.product"
LIST = "/gpu-classes/"


@pytest.fixture
def cluster(db):
    c = make_cluster("prod")
    make_node(c, "h1", product=H100)
    make_node(c, "h2", product=H100, labels={PRODUCT: H100, "nvidia.com/gpu.family": "hopper"})
    make_node(c, "l1", product="NVIDIA-L40S-SHARED", gpu_replicas=4,
              sharing_strategy="time-slicing", resources={GPU: (32, 32, 0)})  # fmt: skip
    refresh(c)
    return c


def _shown(html: str, kind: str) -> dict[str, int]:
    """``data-class-idle`` / ``data-class-free`` figures of the page, by cluster/class/resource."""
    return {k: int(v) for k, v in re.findall(rf'data-class-{kind}="([^"]+)">(\d+)<', html)}


def test_everyone_reads_the_classes_with_the_figures_the_api_gives(cluster, client, researcher):
    make_cluster("empty")
    client.force_login(researcher)
    page = client.get(LIST)
    html = page.content.decode()
    assert page.status_code == 200
    api = api_for(researcher).get("/api/v1/gpu-classes/").json()["results"]
    idle = {f"prod/{c['slug']}/{f['resource']}": f["idle"] for c in api for f in c["capacity"]}
    free = {f"prod/{c['slug']}/{f['resource']}": f["free_to_grant"]
            for c in api for f in c["capacity"]}  # fmt: skip
    assert len(idle) == 2
    assert _shown(html, "idle") == idle and _shown(html, "free") == free
    assert "NVIDIA L40S (time-sliced x4)" in html and "32 replicas on 8 GPUs" in html
    assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in html
    assert "Define a class" not in html and "/edit/" not in html  # researchers read only

    r = client.get(LIST, {"cluster": "empty"})
    assert r.status_code == 200 and "No GPU classes on Empty" in r.content.decode()
    r = client.get(LIST, {"cluster": "nope"})
    assert r.status_code == 404 and "No cluster is named" in r.content.decode()


def test_researchers_cannot_change_classes(cluster, client, researcher):
    h100 = GpuClass.objects.get(selector={PRODUCT: H100})
    client.force_login(researcher)
    assert client.get(reverse("inventory:class-new")).status_code == 403
    assert client.get(reverse("inventory:class-edit", args=[h100.pk])).status_code == 403
    assert client.post(reverse("inventory:class-delete", args=[h100.pk])).status_code == 403
    assert GpuClass.objects.filter(pk=h100.pk).exists()


def test_an_admin_defines_edits_and_deletes_a_class(cluster, client, admin_user):
    client.force_login(admin_user)
    new = reverse("inventory:class-new")
    form = {"cluster": "prod", "slug": "hopper", "name": "Hopper",
            "selector": "nvidia.com/gpu.family=hopper\n", "weight": "2.5"}  # fmt: skip
    for change, error in [
        ({"selector": "hopper"}, "Line 1: write a label as key=value."),
        ({"selector": ""}, "This field is required."),
        ({"selector": "bad key!=x"}, "Give node label matches"),
        ({"slug": "nvidia-h100-80gb-hbm3"}, "already exists"),  # derived on prod
        ({"weight": "-1"}, "greater than or equal to 0"),
        ({"cluster": "nope"}, "Select a valid choice"),
    ]:
        r = client.post(new, {**form, **change})
        assert r.status_code == 200 and error in r.content.decode(), change
    assert not GpuClass.objects.filter(slug="hopper").exists()

    r = client.post(new, form, follow=True)
    hopper = GpuClass.objects.get(slug="hopper")
    assert r.redirect_chain[-1][0] == f"{LIST}?cluster=prod"
    assert "Class Hopper defined on" in r.content.decode() and "1 node(s)" in r.content.decode()
    assert (hopper.derived, hopper.node_count, str(hopper.weight)) == (False, 1, "2.5000")
    assert AuditEvent.objects.filter(action="gpu_class.created", actor=admin_user).exists()
    overlap = {**form, "slug": "h100-all", "selector": f"{PRODUCT}={H100}"}
    assert "matches nodes of class Hopper" in client.post(new, overlap).content.decode()

    edit = reverse("inventory:class-edit", args=[hopper.pk])
    page = client.get(edit).content.decode()
    assert "nvidia.com/gpu.family=hopper" in page and 'name="slug"' not in page
    r = client.post(edit, {"name": "Hopper GPUs", "selector": "nvidia.com/gpu.family=hopper"})
    assert r.status_code == 302
    hopper.refresh_from_db()
    assert (hopper.name, hopper.weight) == ("Hopper GPUs", None)
    assert AuditEvent.objects.filter(action="gpu_class.changed", object_id=hopper.pk).exists()

    delete = reverse("inventory:class-delete", args=[hopper.pk])
    ns = TeamNamespace.objects.create(team=make_team("vision"), cluster=cluster, name="v")
    grant = make_grant(ns, 1, gpu_class=hopper)
    assert "Delete the class Hopper GPUs?" in client.get(delete).content.decode()
    r = client.post(delete, follow=True)
    assert "1 grant(s) and 0 request(s) name class hopper" in r.content.decode()
    assert GpuClass.objects.filter(pk=hopper.pk).exists()
    grant.delete()
    r = client.post(delete, follow=True)
    assert "Class Hopper GPUs deleted from" in r.content.decode()
    assert not GpuClass.objects.filter(pk=hopper.pk).exists()
    assert AuditEvent.objects.filter(action="gpu_class.deleted", object_id=hopper.pk).exists()
    assert GpuClass.objects.get(selector={PRODUCT: H100}).node_count == 2  # h2 is back
