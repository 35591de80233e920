"""/node-labels/ pages and the node page's portal-managed labels."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inventory.models import Node
from inventory.sync import sync_cluster
from nodelabels.models import LabelSet

from .conftest import A100, labels, make_set, run_pending

pytestmark = pytest.mark.django_db


def test_list_shows_sets_nodes_and_sync_state(fleet, sim_api, client, admin_user):
    make_set(admin_user, fleet)
    run_pending()
    sync_cluster(fleet)
    client.force_login(admin_user)
    page = client.get(reverse("nodelabels:list")).content.decode()
    assert "gpu-type" in page and "example.org/gpu-type=a100-80gb" in page
    assert "gpu-a0" in page and "2 in sync" in page
    assert reverse("nodelabels:new") in page
    assert 'href="/node-labels/"' in client.get("/").content.decode()  # staff nav entry
    sim_api.patch_node("gpu-a1", {"metadata": {"labels": {"example.org/gpu-type": None}}})
    sync_cluster(fleet)
    page = client.get(reverse("nodelabels:list")).content.decode()
    assert "1 drifted" in page and "1 in sync" in page


def test_list_query_count_does_not_grow_with_sets(fleet, client, admin_user):
    client.force_login(admin_user)
    make_set(admin_user, fleet, name="s0", labels={"example.org/s0": "x"})
    client.get(reverse("nodelabels:list"))
    with CaptureQueriesContext(connection) as one:
        assert client.get(reverse("nodelabels:list")).status_code == 200
    for i in range(1, 6):
        make_set(admin_user, fleet, name=f"s{i}", labels={f"example.org/s{i}": "x"},
                 node_names=["gpu-h0"])  # fmt: skip
    with CaptureQueriesContext(connection) as six:
        assert client.get(reverse("nodelabels:list")).status_code == 200
    assert len(six) == len(one)


def test_admin_creates_edits_and_deletes_through_pages(fleet, sim_api, client, admin_user):
    client.force_login(admin_user)
    assert client.get(reverse("nodelabels:new")).status_code == 200
    resp = client.post(reverse("nodelabels:new"), {
        "cluster": fleet.pk, "name": "gpu-type", "labels": "example.org/gpu-type=a100\n",
        "selector": "product", "gpu_product": A100, "enabled": "on",
    })  # fmt: skip
    assert resp.status_code == 302
    label_set = LabelSet.objects.get()
    assert (
        label_set.labels == {"example.org/gpu-type": "a100"} and label_set.created_by == admin_user
    )
    run_pending()
    assert labels(sim_api, "gpu-a0")["example.org/gpu-type"] == "a100"
    edit = reverse("nodelabels:edit", args=[label_set.pk])
    assert "example.org/gpu-type=a100" in client.get(edit).content.decode()
    resp = client.post(edit, {
        "name": "gpu-type", "labels": "example.org/gpu-type=a100\nexample.org/x=y",
        "selector": "names", "node_names": "gpu-h0", "enabled": "on",
    })  # fmt: skip
    assert resp.status_code == 302
    label_set.refresh_from_db()
    assert label_set.node_names == ["gpu-h0"] and label_set.gpu_product == ""
    delete = reverse("nodelabels:delete", args=[label_set.pk])
    assert "Delete label set gpu-type?" in client.get(delete).content.decode()
    assert LabelSet.objects.exists()  # GET only asks
    assert client.post(delete).status_code == 302
    assert not LabelSet.objects.exists()


def test_form_shows_field_errors(fleet, client, admin_user):
    client.force_login(admin_user)
    resp = client.post(reverse("nodelabels:new"), {
        "cluster": fleet.pk, "name": "x", "labels": "kubernetes.io/role=gpu\nno-equals-sign",
        "selector": "product", "gpu_product": A100,
    })  # fmt: skip
    assert resp.status_code == 200
    assert "write each label as key=value" in resp.content.decode()
    resp = client.post(reverse("nodelabels:new"), {
        "cluster": fleet.pk, "name": "x", "labels": "kubernetes.io/role=gpu",
        "selector": "product", "gpu_product": "",
    })  # fmt: skip
    page = resp.content.decode()
    assert "reserved" in page and "exactly one of the two" in page
    assert not LabelSet.objects.exists()


def test_researcher_cannot_manage(fleet, client, researcher, admin_user):
    label_set = make_set(admin_user, fleet)
    client.force_login(researcher)
    assert client.get(reverse("nodelabels:list")).status_code == 200
    assert client.get(reverse("nodelabels:new")).status_code == 403
    assert client.post(reverse("nodelabels:new"), {"name": "x"}).status_code == 403
    assert client.get(reverse("nodelabels:edit", args=[label_set.pk])).status_code == 403
    assert client.post(reverse("nodelabels:delete", args=[label_set.pk])).status_code == 403
    assert LabelSet.objects.count() == 1
    assert 'href="/node-labels/"' not in client.get("/").content.decode()


def test_node_page_shows_managed_labels(fleet, sim_api, client, admin_user, researcher):
    make_set(admin_user, fleet)
    node = Node.objects.get(name="gpu-a0")
    client.force_login(researcher)
    page = client.get(reverse("inventory:node", args=[node.pk])).content.decode()
    assert "Portal-managed labels" in page and "example.org/gpu-type" in page and "pending" in page
    run_pending()
    sync_cluster(fleet)
    page = client.get(reverse("inventory:node", args=[node.pk])).content.decode()
    assert ">set</span>" in page
    sim_api.patch_node("gpu-a0", {"metadata": {"labels": {"example.org/gpu-type": "h100"}}})
    sync_cluster(fleet)
    page = client.get(reverse("inventory:node", args=[node.pk])).content.decode()
    assert "changed by hand to <code>h100</code>" in page
    h100 = Node.objects.get(name="gpu-h0")
    page = client.get(reverse("inventory:node", args=[h100.pk])).content.decode()
    assert "No label set of the portal selects this node." in page
