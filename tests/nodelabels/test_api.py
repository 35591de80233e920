"""/api/v1/label-sets/: admins manage, members read; validation errors are 400 per field."""

from __future__ import annotations

import pytest

from nodelabels.models import LabelOperation, LabelSet

from .conftest import A100, make_set, run_pending

pytestmark = pytest.mark.django_db
URL = "/api/v1/label-sets/"


def body(**over) -> dict:
    return {"cluster": "sim", "name": "gpu-type", "labels": {"example.org/gpu-type": "a100"},
            "gpu_product": A100, **over}  # fmt: skip


def test_admin_creates_and_everyone_reads(fleet, admin_api, researcher_api):
    resp = admin_api.post(URL, body(), format="json")
    assert resp.status_code == 201, resp.json()
    data = resp.json()
    assert data["cluster"] == "sim" and data["created_by"] == "alice-admin"
    assert [n["name"] for n in data["nodes"]] == ["gpu-a0", "gpu-a1"]
    assert {n["status"] for n in data["nodes"]} == {"pending"}
    run_pending()
    listing = researcher_api.get(URL).json()
    assert listing["count"] == 1
    assert {n["status"] for n in listing["results"][0]["nodes"]} == {"in sync"}
    one = researcher_api.get(f"{URL}{data['id']}/").json()
    assert one["labels"] == {"example.org/gpu-type": "a100"}


def test_validation_errors_are_400_per_field(fleet, admin_api):
    resp = admin_api.post(URL, body(labels={"nvidia.com/gpu.product": "x", "ok": "-bad"}),
                          format="json")  # fmt: skip
    assert resp.status_code == 400
    errors = resp.json()["labels"]
    assert any("reserved" in e for e in errors) and any("'ok'" in e for e in errors)
    resp = admin_api.post(URL, body(gpu_product="", node_names=[]), format="json")
    assert resp.status_code == 400 and "exactly one" in resp.json()["node_names"][0]
    assert admin_api.post(URL, body(), format="json").status_code == 201
    resp = admin_api.post(URL, body(), format="json")
    assert resp.status_code == 400 and "already has" in resp.json()["name"][0]
    resp = admin_api.post(URL, body(name="other", labels={"example.org/gpu-type": "b"}),
                          format="json")  # fmt: skip
    assert resp.status_code == 400
    assert "conflicts with label set gpu-type" in resp.json()["labels"][0]
    assert LabelSet.objects.count() == 1


def test_admin_updates_and_deletes(fleet, admin_api):
    created = admin_api.post(URL, body(), format="json").json()
    run_pending()
    resp = admin_api.patch(f"{URL}{created['id']}/", {"labels": {"example.org/gpu-type": "x"}},
                           format="json")  # fmt: skip
    assert resp.status_code == 200 and resp.json()["labels"] == {"example.org/gpu-type": "x"}
    assert LabelOperation.objects.filter(status="pending").count() == 2
    assert admin_api.delete(f"{URL}{created['id']}/").status_code == 204
    assert not LabelSet.objects.exists()


def test_researcher_cannot_write(fleet, admin_user, researcher_api):
    assert researcher_api.post(URL, body(), format="json").status_code == 403
    label_set = make_set(admin_user, fleet)
    url = f"{URL}{label_set.pk}/"
    assert researcher_api.patch(url, {"enabled": False}, format="json").status_code == 403
    assert researcher_api.delete(url).status_code == 403
    assert LabelSet.objects.get().enabled


def test_anonymous_is_refused(anon_api):
    assert anon_api.get(URL).status_code in (401, 403)


def test_in_openapi_schema(admin_api):
    schema = admin_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert "/api/v1/label-sets/" in schema["paths"]
    assert "post" in schema["paths"]["/api/v1/label-sets/"]
    assert "LabelSet" in schema["components"]["schemas"]
