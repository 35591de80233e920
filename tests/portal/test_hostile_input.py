"""Every input answers 4xx with a message, never 5xx (issue #11 section 2).

Each finding of the hostile-input review as a request through the real stack (Django,
DRF, PostgreSQL): deeply nested JSON, offsets PostgreSQL cannot store, NUL and lone
surrogates, a month past year 9999, bodies over the size limit, NUL in URLs.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from quotas.models import AuditEvent
from telemetry import tokens
from tests.conftest import api_for
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team

pytestmark = pytest.mark.django_db

DEEP = ("[" * 1000 + "]" * 1000).encode()  # about 2 KB
DEEP_OBJECT = ('{"a":' * 1000 + "1" + "}" * 1000).encode()
AGENT_URL = "/api/v1/agent/reports/"


@pytest.fixture
def world(researcher):
    cluster = make_cluster("lab")
    team = make_team("vision", members=[researcher])
    make_namespace(team, cluster, "ml-vision")
    AuditEvent.objects.create(actor_name="system", action="team.created", object_type="team")
    return cluster


def _json_error(r, status: int) -> dict:
    assert r.status_code == status, (r.status_code, r.content[:300])
    assert r["Content-Type"].startswith("application/json"), r["Content-Type"]
    body = r.json()
    assert body["detail"], body
    return body


# -- deeply nested JSON ----------------------------------------------------------------------


@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["arrays", "objects"])
def test_deep_json_is_a_400_for_anonymous_clients(anon_api, body):
    r = anon_api.post("/api/v1/auth/token/", body, content_type="application/json")
    assert "nested too deeply" in _json_error(r, 400)["detail"]


@pytest.mark.parametrize(
    "url",
    ["/api/v1/quota-requests/", "/api/v1/mig-layouts/validate/", "/api/v1/label-sets/"],
)
def test_deep_json_is_a_400_on_member_endpoints(world, researcher, url):
    r = api_for(researcher).post(url, DEEP_OBJECT, content_type="application/json")
    assert r.status_code in (400, 403), r.content[:300]
    if r.status_code == 400:
        assert "nested too deeply" in r.json()["detail"]


def test_json_just_under_the_depth_limit_still_parses(anon_api, settings):
    body = '{"username": "x", "password": "y", "extra": ' + "[" * 30 + "]" * 30 + "}"
    r = anon_api.post("/api/v1/auth/token/", body, content_type="application/json")
    assert r.status_code in (400, 401, 403), r.content  # refused credentials, parsed body
    assert "nested" not in r.content.decode()


# -- time-zone offsets PostgreSQL cannot store -------------------------------------------------


@pytest.mark.parametrize("offset", ["+16:00", "-23:59"])
def test_filter_offsets_postgresql_cannot_store_are_read_in_utc(world, admin_user, offset):
    """Valid RFC 3339 (up to +-23:59): the instant, converted to UTC (it was a 500, then a
    400 for valid input; #24 finding 9)."""
    api = api_for(admin_user)
    stamp = "2026-01-01T00:00:00" + offset
    r = api.get("/api/v1/audit-events/", {"since": stamp})
    assert r.status_code == 200 and r.json()["count"] == 1  # the world's event, made now
    r = api.get("/api/v1/audit-events/", {"until": stamp})
    assert r.status_code == 200 and r.json()["count"] == 0
    assert api.get("/api/v1/quota-requests/", {"created_after": stamp}).status_code == 200


def test_an_offset_with_seconds_is_a_400(world, admin_user):
    r = api_for(admin_user).get("/api/v1/audit-events/", {"since": "2026-01-01T00:00:00+15:59:59"})
    assert "since" in _json_error(r, 400)


def test_filter_offset_in_range_still_filters(world, admin_user):
    r = api_for(admin_user).get("/api/v1/audit-events/", {"since": "2000-01-01T00:00:00+14:00"})
    assert r.status_code == 200 and r.json()["count"] == 1


def test_csv_export_with_a_bad_offset_is_a_400_not_an_empty_file(world, admin_user):
    r = api_for(admin_user).get(
        "/api/v1/audit-events/export/", {"since": "2026-01-01T00:00:00+15:59:59"}
    )
    assert r.status_code == 400, (r.status_code, getattr(r, "content", b"")[:200])
    assert "since" in r.json()


def test_audit_page_csv_with_a_bad_filter_is_a_400_not_an_empty_file(world, admin_user):
    client = Client()
    client.force_login(admin_user)
    r = client.get("/audit/export.csv", {"since": "2026-13-45"})
    assert r.status_code == 400
    assert "since" in r.content.decode()
    ok = client.get("/audit/export.csv", {"since": "2000-01-01"})
    assert ok.status_code == 200 and b"team.created" in b"".join(ok)


# -- NUL and lone surrogates -------------------------------------------------------------------


@pytest.fixture
def agent():
    node = make_node(make_cluster("agents"), "a100-00")
    make_pod(node, "b", namespace="a")  # the reports' process runs in it
    _, raw = tokens.issue(node)
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def _report(**over) -> dict:
    from django.utils import timezone

    body = {
        "node": "a100-00",
        "timestamp": timezone.now().isoformat(),
        "driver_version": "550.107.02",
        "gpus": [{"index": 0, "name": "NVIDIA A100", "processes": [{"pid": 1, "pod": "a/b"}]}],
    }
    body.update(over)
    return body


@pytest.mark.parametrize(
    "override",
    [
        {"driver_version": "550\u0000"},
        {"agent_version": "\ud800"},
        {"gpus": [{"index": 0, "name": "A100\u0000"}]},
        {"gpus": [{"index": 0, "uuid": "GPU-\udfff"}]},
        {"gpus": [{"index": 0, "processes": [{"pid": 1, "pod": "ns/\u0000"}]}]},
        {"gpus": [{"index": 0, "unsupported": ["power\u0000"]}]},
        {"gpus": [{"index": 0, "mig_devices": [{"index": 0, "profile": "1g\ud83d"}]}]},
    ],
    ids=["nul", "surrogate", "gpu-name", "gpu-uuid", "pod", "unsupported", "mig-profile"],
)
def test_ingest_refuses_unstorable_text_with_a_400(agent, override):
    body = json.dumps(_report(**override))  # ensure_ascii: \u0000 and \ud800 escapes
    r = agent.post(AGENT_URL, body, content_type="application/json")
    body = _json_error(r, 400)
    assert any("NUL" in str(v) or "surrogate" in str(v) for v in body.values()), body


def test_ingest_refuses_deep_json_with_a_400(agent):
    r = agent.post(AGENT_URL, DEEP, content_type="application/json")
    assert "nested too deeply" in str(_json_error(r, 400))


def test_ingest_still_accepts_a_good_report(agent):
    r = agent.post(AGENT_URL, json.dumps(_report()), content_type="application/json")
    assert r.status_code == 202, r.content


@pytest.mark.parametrize("value", ["ok\u0000", "\ud800"], ids=["nul", "surrogate"])
def test_nul_and_surrogates_in_json_keys_and_values_are_a_400(world, researcher, value):
    api = api_for(researcher)
    body = json.dumps({"team": "vision", "namespace": "ml-vision", "justification": value})
    r = api.post("/api/v1/quota-requests/", body, content_type="application/json")
    _json_error(r, 400)
    body = json.dumps({"product": "A100", "layout": {value: 1}})
    r = api.post("/api/v1/mig-layouts/validate/", body, content_type="application/json")
    _json_error(r, 400)


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/teams/%00/",
        "/api/v1/clusters/x%00y/",
        "/api/v1/quota-requests/?team=%00",
        "/api/v1/gpu-classes/?cluster=%00",
        "/api/v1/mig-profiles/?product=%00",
        "/api/v1/showback/?month=%00",
    ],
)
def test_nul_in_urls_is_a_400(world, researcher, url):
    r = api_for(researcher).get(url)
    assert "NUL" in _json_error(r, 400)["detail"]


def test_nul_in_page_urls_is_a_400_too(world, researcher):
    client = Client()
    client.force_login(researcher)
    for url in ("/nodes/?q=%00", "/requests/?namespace=%00", "/mig/requests/?status=%00"):
        r = client.get(url)
        assert r.status_code == 400, (url, r.status_code)


def test_nul_in_a_form_field_is_a_form_error(world, researcher):
    client = Client()
    client.force_login(researcher)
    r = client.get("/audit/", {"actor": "rob\x00"})
    assert r.status_code == 400


# -- showback months ---------------------------------------------------------------------------


@pytest.mark.parametrize("month", ["9999-12", "0000-01", "1999-12"])
def test_showback_month_out_of_range_is_a_400(world, researcher, month):
    r = api_for(researcher).get("/api/v1/showback/", {"month": month})
    assert r.status_code == 400, r.content[:200]
    assert "month" in r.json()
    client = Client()
    client.force_login(researcher)
    assert client.get("/telemetry/showback/", {"month": month}).status_code == 404


# -- bodies over the size limit ----------------------------------------------------------------


def test_json_body_over_the_limit_is_a_json_413(anon_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    body = json.dumps({"username": "x" * 2000, "password": "y"})
    r = anon_api.post("/api/v1/auth/token/", body, content_type="application/json")
    assert "at most 1024 bytes" in _json_error(r, 413)["detail"]


def test_form_body_over_the_limit_is_a_json_413(anon_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    r = anon_api.post("/api/v1/auth/token/", {"username": "x" * 2000, "password": "y"})
    _json_error(r, 413)


def test_body_over_the_limit_without_content_length_is_a_json_413(researcher, settings):
    """A chunked body (no Content-Length) is caught by the parser, not the middleware."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    from rest_framework.test import APIRequestFactory, force_authenticate

    from quotas.api import QuotaRequestViewSet

    request = APIRequestFactory().post(
        "/api/v1/quota-requests/", json.dumps({"justification": "x" * 4000}),
        content_type="application/json",
    )  # fmt: skip
    request.META.pop("CONTENT_LENGTH")
    request.META["HTTP_TRANSFER_ENCODING"] = "chunked"
    force_authenticate(request, researcher)
    r = QuotaRequestViewSet.as_view({"post": "create"})(request)
    assert r.status_code in (400, 413), r.data  # DRF reads nothing without a length
    if r.status_code == 413:
        assert "bytes" in r.data["detail"]


def test_oversized_body_on_a_page_is_not_a_server_error(researcher, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    client = Client()
    client.force_login(researcher)
    r = client.post("/account/", {"x": "y" * 4000})
    assert 400 <= r.status_code < 500


# -- page forms -------------------------------------------------------------------------------


def test_a_request_form_date_beyond_the_storable_offset_is_a_form_error(world, researcher):
    """The page form's own date-time field: an offset PostgreSQL cannot store is read as
    the instant in UTC; one with seconds is a field error, not a 500 (the same rule as the
    API's filters, portal/fields.py)."""
    from quotas.forms import UTCDateTimeField

    field = UTCDateTimeField()
    assert field.clean("2026-12-24T10:00").year == 2026
    late = field.clean("2026-12-24T10:00:00+16:30")
    assert late.utcoffset().total_seconds() == 0 and (late.day, late.hour) == (23, 17)
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        field.clean("2026-12-24T10:00:00+15:59:59")


def test_a_deep_confirmation_body_is_a_form_error(world, admin_user):
    from quotas.models import TeamNamespace

    ns = TeamNamespace.objects.get(name="ml-vision")
    client = Client()
    client.force_login(admin_user)
    deep = "[" * 40 + "]" * 40  # deeper than API_JSON_MAX_DEPTH
    r = client.post(f"/namespaces/{ns.pk}/confirm-lowering/", {"expected": deep, "note": ""})
    assert r.status_code == 200
    assert "The confirmation form was malformed" in str(r.context["form"].non_field_errors())


# -- loose parsing (#24 finding 8) -------------------------------------------------------------


@pytest.fixture
def gpu_world(world):
    make_node(world, "a100-1", resources={"nvidia.com/gpu": (8, 8, 0)})
    return world


def _request_body(**over) -> dict:
    body = {"team": "vision", "namespace": "ml-vision", "resource": "nvidia.com/gpu",
            "amount": 2, "justification": "Training the detector for the paper."}  # fmt: skip
    return body | over


@pytest.mark.parametrize("amount", ["٣", "\uff13", "1_0", " ٣ "])
def test_numbers_in_other_scripts_digits_or_with_underscores_are_a_400(
    gpu_world, researcher, client, amount
):
    """int("٣") is 3: DRF and Django forms stored "٣" as 3."""
    from quotas.models import QuotaRequest

    api = api_for(researcher)
    body = _json_error(api.post("/api/v1/quota-requests/", _request_body(amount=amount),
                                format="json"), 400)  # fmt: skip
    assert "ASCII digits" in body["detail"]
    assert "ASCII digits" in _json_error(api.get("/api/v1/quota-requests/", {"page": amount}),
                                         400)["detail"]  # fmt: skip
    client.force_login(researcher)
    page = client.post("/requests/new/", {"amount": amount, "justification": "x"})
    assert page.status_code == 400 and "ASCII digits" in page.content.decode()
    assert not QuotaRequest.objects.exists()
    # Digits inside prose are prose.
    assert api.post("/api/v1/quota-requests/", _request_body(
        justification="Three runs (٣) of the detector for the paper."), format="json"
    ).status_code == 201  # fmt: skip


def test_duplicate_json_keys_are_a_400(gpu_world, researcher, agent):
    from quotas.models import QuotaRequest

    raw = json.dumps(_request_body())[:-1] + ', "amount": 9}'
    api = api_for(researcher)
    body = _json_error(api.post("/api/v1/quota-requests/", raw, content_type="application/json"),
                       400)  # fmt: skip
    assert "Duplicate key 'amount'" in body["detail"]
    assert not QuotaRequest.objects.exists()
    report = json.dumps(_report())[:-1] + ', "node": "a100-00"}'
    r = agent.post(AGENT_URL, report, content_type="application/json")
    assert r.status_code == 400 and "Duplicate key 'node'" in r.json()["body"][0]


def test_a_request_starts_within_the_horizon(gpu_world, researcher, settings):
    api = api_for(researcher)
    r = api.post("/api/v1/quota-requests/", _request_body(starts_at="2099-01-01T00:00:00Z"),
                 format="json")  # fmt: skip
    body = _json_error(r, 400)
    assert body["starts_at"] == ["At most 365 days ahead: file the request closer to the time."]


# -- schema precision (#24 finding 9) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"page_size": "AAA"}, "page_size"), ({"page_size": "0"}, "page_size"),
        ({"page_size": "501"}, "page_size"), ({"page_size": "0.5"}, "page_size"),
        ({"page": "0"}, "page"), ({"sync_enabled": "AAA"}, "sync_enabled"),
        ({"sync_enabled": "2"}, "sync_enabled"), ({"since": ""}, "since"),
    ],
)  # fmt: skip
def test_parameters_that_were_silently_ignored_are_a_400(world, researcher, query, field):
    url = "/api/v1/clusters/" if field == "sync_enabled" else "/api/v1/audit-events/"
    body = _json_error(api_for(researcher).get(url, query), 400)
    assert field in body, body
    assert api_for(researcher).get(url, {"page_size": "500", "page": "1"}).status_code == 200


def test_every_405_names_the_allowed_methods(agent):
    r = agent.generic("TRACE", AGENT_URL)
    assert r.status_code == 405 and r["Allow"] == "POST"


def test_the_schema_declares_the_pagination_limits(researcher):
    schema = api_for(researcher).get("/api/schema/", {"format": "json"}).json()
    params = {
        p["name"]: p["schema"]
        for p in schema["paths"]["/api/v1/quota-requests/"]["get"]["parameters"]
    }
    assert params["page"]["minimum"] == 1
    assert (params["page_size"]["minimum"], params["page_size"]["maximum"]) == (1, 500)
