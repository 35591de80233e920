"""Quota REST API: create with every validation rule, decisions and their permissions,
scoping object by object, filters, CSV export, query counts and the schema.

Personas: ``rob`` (member of vision), ``mia`` (manager of vision), ``max`` (another member
of vision), ``olga`` (member of nlp, the other team) and ``alice-admin`` (portal admin).
Approvals queue their apply on commit; with the ``db`` fixture commits never happen, so
no worker is needed.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotas import audit
from quotas.models import AuditEvent, Operation, OperationAttempt, QuotaRequest
from tests.conftest import api_for
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
WHY = "Training the detector for the spring paper."


@pytest.fixture
def world(db, researcher, admin_user):
    prod = make_cluster("prod")
    make_node(prod, "a100-1", resources={GPU: (8, 8, 0)})
    make_node(prod, "a100-2", resources={GPU: (8, 8, 0)})
    mia, max_, olga = make_user("mia"), make_user("max"), make_user("olga")
    vision = make_team("vision", members=[researcher, max_], managers=[mia])
    nlp = make_team("nlp", members=[olga])
    w = type("World", (), {})()
    w.prod, w.vision, w.nlp = prod, vision, nlp
    w.rob, w.mia, w.max, w.olga, w.admin = researcher, mia, max_, olga, admin_user
    w.vision_ns = make_namespace(vision, prod, "vision-train")
    w.nlp_ns = make_namespace(nlp, prod, "nlp-main")
    return w


@pytest.fixture
def rob(world):
    return api_for(world.rob)


@pytest.fixture
def olga(world):
    return api_for(world.olga)


@pytest.fixture
def admin(world):
    return api_for(world.admin)


def body(**kw) -> dict:
    data = {
        "team": "vision",
        "namespace": "vision-train",
        "resource": GPU,
        "amount": 4,
        "justification": WHY,
    }
    data.update(kw)
    return {k: v for k, v in data.items() if v is not None}


def file_request(client, **kw) -> dict:
    r = client.post("/api/v1/quota-requests/", body(**kw), format="json")
    assert r.status_code == 201, r.json()
    return r.json()


# -- create -----------------------------------------------------------------------------


def test_member_files_a_request(world, rob):
    start = timezone.now() + timedelta(days=1)
    data = file_request(
        rob, starts_at=start.isoformat(), ends_at=(start + timedelta(days=7)).isoformat()
    )
    assert data["status"] == "pending" and data["kind"] == "new"
    assert data["team"] == "vision" and data["amount"] == 4 and data["resource"] == GPU
    assert data["namespace"] == {
        "id": str(world.vision_ns.pk),
        "cluster": "prod",
        "name": "vision-train",
    }
    assert data["requested_by"] == "rob" and data["on_behalf"] is False
    assert data["decided_by"] is None and data["grant"] is None
    assert [e["to_status"] for e in data["events"]] == ["pending"]
    req = QuotaRequest.objects.get(pk=data["id"])
    assert req.ends_at - req.starts_at == timedelta(days=7)


def test_namespace_by_id_and_permanent_by_default(world, rob):
    data = file_request(rob, namespace=str(world.vision_ns.pk))
    assert data["namespace"]["name"] == "vision-train" and data["ends_at"] is None


NOW = timezone.now  # evaluated per test through the lambdas below


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"amount": 0}, "amount", "A positive whole number."),
        ({"amount": -3}, "amount", "A positive whole number."),
        ({"amount": 1.5}, "amount", "A valid integer is required."),
        ({"amount": "four"}, "amount", "A valid integer is required."),
        ({"amount": 17}, "amount", "More than the 16 nvidia.com/gpu allocatable on prod."),
        ({"resource": "cpu"}, "resource", "Only nvidia.com/gpu and nvidia.com/mig-*"),
        (
            {"resource": "nvidia.com/mig-1g.10gb"},
            "resource",
            "Cluster prod does not advertise nvidia.com/mig-1g.10gb.",
        ),
        ({"namespace": "nlp-main"}, "namespace", "No namespace 'nlp-main'"),
        ({"namespace": "nowhere"}, "namespace", "No namespace 'nowhere'"),
        (
            {"starts_at": lambda: NOW() + timedelta(days=2), "ends_at": lambda: NOW()},
            "ends_at",
            "The end must be after the start.",
        ),
        ({"starts_at": lambda: NOW() - timedelta(hours=1)}, "starts_at", "in the past"),
        ({"ends_at": lambda: NOW() + timedelta(days=91)}, "ends_at", "At most 90 days"),
        ({"justification": None}, "justification", "at least 10 characters"),
        ({"justification": "   why    "}, "justification", "at least 10 characters"),
        ({"justification": "x" * 2001}, "justification", "At most 2000 characters."),
        # another team's slug and a made-up one look alike (issue #11 section 3)
        ({"team": "nlp", "namespace": "nlp-main"}, "team", "No team 'nlp' among your teams."),
        ({"team": "nope"}, "team", "No team 'nope' among your teams."),
        ({"kind": "grow"}, "kind", "not a valid choice"),
        ({"resource": None}, "resource", "This field is required."),
    ],
)
def test_create_rules_give_4xx_with_the_field_message(world, rob, change, field, message):
    change = {k: (v().isoformat() if callable(v) else v) for k, v in change.items()}
    r = rob.post("/api/v1/quota-requests/", body(**change), format="json")
    # A team or namespace you cannot see is one that does not exist to you: 404, with its
    # message per field (portal.validation.NOT_FOUND).
    assert r.status_code == (404 if message.startswith(("No team", "No namespace")) else 400)
    data = r.json()
    assert data["detail"] and field in data["detail"]
    assert any(message in m for m in data[field]), data
    assert not QuotaRequest.objects.exists()


def test_max_duration_comes_from_settings(world, rob, settings):
    settings.QUOTA_MAX_DURATION_DAYS = 10
    late = (timezone.now() + timedelta(days=11)).isoformat()
    r = rob.post("/api/v1/quota-requests/", body(ends_at=late), format="json")
    assert r.status_code == 400 and "At most 10 days" in r.json()["ends_at"][0]
    ok = (timezone.now() + timedelta(days=9)).isoformat()
    assert rob.post("/api/v1/quota-requests/", body(ends_at=ok), format="json").status_code == 201


def test_namespace_of_another_of_my_teams_is_refused_by_the_rules(world, rob):
    audio_ns = make_namespace(make_team("audio", members=[world.rob]), world.prod)
    r = rob.post("/api/v1/quota-requests/", body(namespace=str(audio_ns.pk)), format="json")
    assert r.status_code == 400
    assert "does not belong to team" in r.json()["namespace"][0]


def test_namespace_name_on_two_clusters_needs_the_cluster(world, rob):
    edge = make_cluster("edge")
    make_node(edge, "l40s-1", product="NVIDIA-L40S", resources={GPU: (4, 4, 0)})
    make_namespace(world.vision, edge, "vision-train")
    r = rob.post("/api/v1/quota-requests/", body(amount=2), format="json")
    assert r.status_code == 400
    assert "several clusters (edge, prod)" in r.json()["cluster"][0]
    data = file_request(rob, amount=2, cluster="edge")
    assert data["namespace"]["cluster"] == "edge"


def test_unauthenticated_is_401(world, anon_api):
    assert anon_api.get("/api/v1/quota-requests/").status_code == 401
    assert anon_api.post("/api/v1/quota-requests/", body(), format="json").status_code == 401


def test_admin_files_on_behalf_of_a_team(world, admin):
    data = file_request(admin, team="nlp", namespace="nlp-main")
    assert data["on_behalf"] is True and data["requested_by"] == "alice-admin"
    assert "on behalf" in data["events"][0]["note"]


def test_manager_releases_with_only_the_grant(world, rob):
    grant = make_grant(world.vision_ns, 2, days=20)
    release = {"team": "vision", "kind": "release", "target_grant": str(grant.pk)}
    r = rob.post("/api/v1/quota-requests/", {**release, "justification": WHY}, format="json")
    assert r.status_code == 400 and "manager" in r.json()["target_grant"][0]
    r = api_for(world.mia).post(
        "/api/v1/quota-requests/", {**release, "justification": WHY}, format="json"
    )
    assert r.status_code == 201, r.json()
    assert r.json()["status"] == "approved" and r.json()["amount"] == 2
    assert r.json()["namespace"]["name"] == "vision-train"
    grant.refresh_from_db()
    assert grant.end_reason == "released"


def test_renewal_must_end_after_the_grant(world, rob):
    grant = make_grant(world.vision_ns, 2, days=20)
    r = rob.post(
        "/api/v1/quota-requests/",
        {"team": "vision", "kind": "renewal", "target_grant": str(grant.pk), "justification": WHY},
        format="json",
    )
    assert r.status_code == 400 and "A renewal must end after" in r.json()["ends_at"][0]


def test_another_teams_grant_is_unknown_as_a_target(world, rob):
    grant = make_grant(world.nlp_ns, 2, days=20)
    r = rob.post(
        "/api/v1/quota-requests/",
        {"team": "vision", "kind": "release", "target_grant": str(grant.pk), "justification": WHY},
        format="json",
    )
    assert r.status_code == 400 and r.json()["target_grant"] == ["No such grant."]


# -- decisions --------------------------------------------------------------------------


def test_researcher_cannot_approve_or_reject(world, rob):
    req = file_request(rob)
    for verb, payload in (("approve", {}), ("reject", {"reason": "no"})):
        r = rob.post(f"/api/v1/quota-requests/{req['id']}/{verb}/", payload, format="json")
        assert r.status_code == 403 and "Only portal admins" in r.json()["detail"]
    assert QuotaRequest.objects.get(pk=req["id"]).status == "pending"


def test_admin_approves_once_then_409(world, rob, admin):
    req = file_request(rob)
    r = admin.post(f"/api/v1/quota-requests/{req['id']}/approve/", {"note": "ok"}, format="json")
    assert r.status_code == 200
    data = r.json()
    assert data["status"] == "approved" and data["decided_by"] == "alice-admin"
    assert data["grant"] and data["decision_note"] == "ok"
    assert [e["to_status"] for e in data["events"]] == ["pending", "approved"]
    assert Operation.objects.filter(requests=req["id"]).count() == 1
    again = admin.post(f"/api/v1/quota-requests/{req['id']}/approve/", {}, format="json")
    assert again.status_code == 409 and "already approved" in again.json()["detail"]
    assert (
        admin.post(f"/api/v1/quota-requests/{req['id']}/cancel/", {}, format="json").status_code
        == 409
    )


def test_admin_approves_a_smaller_amount(world, rob, admin):
    req = file_request(rob, amount=6)
    r = admin.post(f"/api/v1/quota-requests/{req['id']}/approve/", {"amount": 2}, format="json")
    assert r.status_code == 200 and "approved 2" in r.json()["decision_note"]
    grant = admin.get(f"/api/v1/grants/{r.json()['grant']}/").json()
    assert grant["amount"] == 2 and grant["state"] == "active" and grant["team"] == "vision"
    too_many = file_request(rob, amount=2)
    r = admin.post(
        f"/api/v1/quota-requests/{too_many['id']}/approve/", {"amount": 3}, format="json"
    )
    # a valid amount, more than this request asked: its state refuses it (409)
    assert r.status_code == 409 and r.json()["amount"] == ["Approve between 1 and 2."]


def test_approving_beyond_capacity_is_400_with_the_reason(world, rob, admin):
    make_grant(world.nlp_ns, 14)
    req = file_request(rob, amount=4)
    r = admin.post(f"/api/v1/quota-requests/{req['id']}/approve/", {}, format="json")
    assert r.status_code == 400
    assert r.json()["amount"][0].startswith("Only 2 nvidia.com/gpu free on prod")
    assert QuotaRequest.objects.get(pk=req["id"]).status == "pending"


def test_reject_needs_a_reason(world, rob, admin):
    req = file_request(rob)
    url = f"/api/v1/quota-requests/{req['id']}/reject/"
    for body in ({"reason": "  "}, {"reason": ""}, {}):
        r = admin.post(url, body, format="json")
        assert r.status_code == 400 and r.json()["reason"] == ["Say why the request is rejected."]
    r = admin.post(url, {"reason": "The cluster is reserved for the course."}, format="json")
    assert r.status_code == 200 and r.json()["status"] == "rejected"
    assert r.json()["decision_note"] == "The cluster is reserved for the course."


def test_who_may_cancel(world, rob):
    req = file_request(rob)
    url = f"/api/v1/quota-requests/{req['id']}/cancel/"
    r = api_for(world.max).post(url, {}, format="json")  # a member, not the requester
    assert r.status_code == 403 and "requester, a team manager" in r.json()["detail"]
    r = api_for(world.mia).post(url, {"note": "we got a grant elsewhere"}, format="json")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    last = r.json()["events"][-1]
    assert (last["actor"], last["note"]) == ("mia", "we got a grant elsewhere")
    assert rob.post(url, {}, format="json").status_code == 409
    own = file_request(rob)
    r = rob.post(f"/api/v1/quota-requests/{own['id']}/cancel/", {}, format="json")
    assert r.status_code == 200


# -- scoping ----------------------------------------------------------------------------


@pytest.fixture
def vision_objects(world, rob, admin):
    """One object of each kind belonging to vision only."""
    req = file_request(rob)
    approved = file_request(rob, amount=1)
    admin.post(f"/api/v1/quota-requests/{approved['id']}/approve/", {}, format="json")
    approved = QuotaRequest.objects.get(pk=approved["id"])
    op = Operation.objects.get(requests=approved)
    event = AuditEvent.objects.filter(team=world.vision).first()
    return {"request": req["id"], "grant": approved.grant_id, "operation": op.pk, "event": event.pk}


def _object_endpoints(objs: dict) -> list[tuple[str, str, dict | None]]:
    r = objs["request"]
    return [
        ("get", "/api/v1/teams/vision/", None),
        ("get", f"/api/v1/quota-requests/{r}/", None),
        ("post", f"/api/v1/quota-requests/{r}/approve/", {}),
        ("post", f"/api/v1/quota-requests/{r}/reject/", {"reason": "because"}),
        ("post", f"/api/v1/quota-requests/{r}/cancel/", {}),
        ("get", f"/api/v1/grants/{objs['grant']}/", None),
        ("get", f"/api/v1/operations/{objs['operation']}/", None),
        ("get", f"/api/v1/audit-events/{objs['event']}/", None),
    ]


def test_another_teams_member_gets_404_on_every_object(world, olga, rob, vision_objects):
    for method, url, payload in _object_endpoints(vision_objects):
        r = getattr(olga, method)(url, payload, format="json")
        if url.endswith(("/approve/", "/reject/")):  # admins only: 403 before any lookup
            assert r.status_code == 403, (url, r.status_code)
            continue
        assert r.status_code == 404, (url, r.status_code)
        assert r.json() == {"detail": "Not found."}
        if method == "get":
            assert rob.get(url).status_code == 200, url
    assert QuotaRequest.objects.get(pk=vision_objects["request"]).status == "pending"


@pytest.mark.parametrize(
    "path", ["teams", "quota-requests", "grants", "operations", "audit-events"]
)
def test_lists_hold_only_my_teams_objects(world, olga, admin, vision_objects, path):
    file_request(api_for(world.olga), team="nlp", namespace="nlp-main", amount=1)
    admin.post(
        f"/api/v1/quota-requests/{QuotaRequest.objects.get(team=world.nlp).pk}/approve/",
        {},
        format="json",
    )
    audit.record(world.admin, "cluster.changed", world.prod)  # no team: admins only
    mine = olga.get(f"/api/v1/{path}/").json()["results"]
    everything = admin.get(f"/api/v1/{path}/").json()["results"]
    assert mine and len(everything) > len(mine)
    assert {row.get("slug") or row.get("team") for row in mine} == {"nlp"}


def test_team_shows_members_namespaces_and_my_role(world, rob, admin):
    data = rob.get("/api/v1/teams/vision/").json()
    assert data["my_role"] == "member" and data["slug"] == "vision"
    assert {(m["username"], m["role"]) for m in data["members"]} == {
        ("rob", "member"),
        ("max", "member"),
        ("mia", "manager"),
    }
    assert [{k: ns[k] for k in ("id", "cluster", "name")} for ns in data["namespaces"]] == [
        {"id": str(world.vision_ns.pk), "cluster": "prod", "name": "vision-train"}
    ]
    assert data["namespaces"][0]["foreign_quotas"] == []
    assert data["namespaces"][0]["needs_confirmation"] == {}
    assert api_for(world.mia).get("/api/v1/teams/vision/").json()["my_role"] == "manager"
    assert admin.get("/api/v1/teams/vision/").json()["my_role"] is None


# -- filters ----------------------------------------------------------------------------


def test_request_filters(world, rob, admin):
    a = file_request(rob, amount=1)
    b = file_request(rob, amount=2)
    file_request(admin, team="nlp", namespace="nlp-main", amount=3)
    admin.post(f"/api/v1/quota-requests/{b['id']}/reject/", {"reason": "no"}, format="json")

    def ids(client, **params):
        r = client.get("/api/v1/quota-requests/", params)
        assert r.status_code == 200, r.json()
        return {row["id"] for row in r.json()["results"]}

    assert ids(rob, status="pending") == {a["id"]}
    assert ids(rob, status="rejected") == {b["id"]}
    assert ids(admin, team="vision") == {a["id"], b["id"]}
    assert ids(rob, team="nlp") == set()
    assert ids(admin, namespace="nlp-main") | ids(admin, namespace=str(world.vision_ns.pk)) == (
        ids(admin)
    )
    assert ids(rob, resource=GPU, kind="new") == {a["id"], b["id"]}
    later = (timezone.now() + timedelta(minutes=5)).isoformat()
    assert ids(rob, created_before=later) == {a["id"], b["id"]}
    assert ids(rob, created_after=later) == set()
    r = rob.get("/api/v1/quota-requests/", {"status": "granted"})
    assert r.status_code == 400 and r.json()["status"]


def test_grant_state_filter(world, rob):
    active = make_grant(world.vision_ns, 1)
    upcoming = make_grant(world.vision_ns, 1, start_in=timedelta(days=3), days=5)
    released = make_grant(world.vision_ns, 1, ended_at=timezone.now(), end_reason="released")
    make_grant(world.nlp_ns, 1)

    def ids(**params):
        return {g["id"] for g in rob.get("/api/v1/grants/", params).json()["results"]}

    assert ids(state="active") == {str(active.pk)}
    assert ids(state="upcoming") == {str(upcoming.pk)}
    assert ids(state="ended") == {str(released.pk)}
    assert ids(namespace="vision-train", team="vision") == {
        str(active.pk),
        str(upcoming.pk),
        str(released.pk),
    }
    assert rob.get("/api/v1/grants/", {"state": "soon"}).status_code == 400


def test_operation_shows_attempts_and_filters(world, admin):
    op = Operation.objects.create(namespace=world.vision_ns, reason="approval", attempts=1)
    OperationAttempt.objects.create(operation=op, number=1, error="connection refused")
    Operation.objects.create(namespace=world.nlp_ns, reason="drift", status="succeeded")
    r = admin.get("/api/v1/operations/", {"team": "vision", "status": "pending"})
    [row] = r.json()["results"]
    assert row["id"] == str(op.pk) and row["namespace"]["name"] == "vision-train"
    assert row["attempt_log"][0]["error"] == "connection refused" and row["requests"] == []


def test_audit_filters_and_csv_export_are_scoped(world, rob, olga, admin):
    file_request(rob)
    file_request(olga, team="nlp", namespace="nlp-main", amount=1)
    audit.record(world.admin, "cluster.changed", world.prod, note="=cmd|' /C calc'!A0")

    r = olga.get("/api/v1/audit-events/export/")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    assert r["Content-Disposition"] == 'attachment; filename="audit-events.csv"'
    rows = list(csv.DictReader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert rows and {row["team"] for row in rows} == {"nlp"}
    assert {row["actor"] for row in rows} == {"olga"}

    r = admin.get("/api/v1/audit-events/export/", {"actor": "alice-admin"})
    [row] = list(csv.DictReader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert row["action"] == "cluster.changed" and row["note"].startswith("'=")

    def actions(client, **params):
        r = client.get("/api/v1/audit-events/", params)
        assert r.status_code == 200, r.json()
        return [e["action"] for e in r.json()["results"]]

    assert actions(rob, action="request.") == ["request.submitted"]
    assert actions(admin, team="nlp", actor="olga") == ["request.submitted"]
    assert actions(admin, since=(timezone.now() + timedelta(minutes=1)).isoformat()) == []
    assert len(actions(admin, until=(timezone.now() + timedelta(minutes=1)).isoformat())) == 3
    assert admin.get("/api/v1/audit-events/export/", {"since": "yesterday"}).status_code == 400


# -- query counts and schema ------------------------------------------------------------


def _populate(world, n: int) -> None:
    """n requests (some decided), grants, operations with attempts, audit events."""
    users = [world.rob, world.mia]
    for i in range(n):
        ns = world.vision_ns
        grant = make_grant(ns, 1, days=10)
        req = QuotaRequest.objects.create(
            team=world.vision, namespace=ns, resource=GPU, amount=1,
            starts_at=timezone.now(), justification=WHY, requested_by=users[i % 2],
            decided_by=world.admin if i % 2 else None, grant=grant if i % 2 else None,
        )  # fmt: skip
        op = Operation.objects.create(namespace=ns, reason="approval")
        op.requests.add(req)
        OperationAttempt.objects.create(operation=op, number=1)
        audit.record(users[i % 2], "request.submitted", req, team=world.vision)


@pytest.mark.parametrize(
    "path", ["teams", "quota-requests", "grants", "operations", "audit-events"]
)
@pytest.mark.parametrize("persona", ["rob", "admin"])
def test_list_query_count_does_not_grow_with_rows(world, path, persona):
    client = api_for(getattr(world, persona))

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(f"/api/v1/{path}/").status_code == 200
        return len(ctx.captured_queries)

    _populate(world, 3)
    count()  # warm-up: the first call also records the token's last use
    small = count()
    _populate(world, 12)
    for i in range(12):
        make_namespace(make_team(f"extra-{i}", members=[world.rob, world.mia]), world.prod)
    assert count() == small


def test_schema_has_every_quota_path(world, rob):
    r = rob.get("/api/schema/", {"format": "json"})
    assert r.status_code == 200
    paths = set(r.json()["paths"])
    for path in [
        "/api/v1/teams/", "/api/v1/teams/{slug}/",
        "/api/v1/quota-requests/", "/api/v1/quota-requests/{id}/",
        "/api/v1/quota-requests/{id}/approve/", "/api/v1/quota-requests/{id}/reject/",
        "/api/v1/quota-requests/{id}/cancel/",
        "/api/v1/grants/", "/api/v1/grants/{id}/",
        "/api/v1/operations/", "/api/v1/operations/{id}/",
        "/api/v1/audit-events/", "/api/v1/audit-events/{id}/", "/api/v1/audit-events/export/",
    ]:  # fmt: skip
        assert path in paths, path
    create = r.json()["paths"]["/api/v1/quota-requests/"]["post"]
    assert "201" in create["responses"] and "400" in create["responses"]


def test_admin_sets_replaces_and_removes_a_baseline(world, admin, rob, olga):
    url = "/api/v1/teams/vision/baseline/"
    r = admin.post(url, {"namespace": "vision-train", "resource": GPU, "amount": 4}, format="json")
    assert r.status_code == 200 and r.json()["amount"] == 4 and r.json()["kind"] == "baseline"
    r = admin.post(url, {"namespace": "vision-train", "resource": GPU, "amount": 6}, format="json")
    assert r.json()["amount"] == 6
    active = [g for g in rob.get("/api/v1/grants/", {"state": "active"}).json()["results"]]
    assert [(g["kind"], g["amount"]) for g in active] == [("baseline", 6)]
    r = admin.post(url, {"namespace": "vision-train", "resource": GPU, "amount": 17}, format="json")
    assert r.status_code == 400 and "Only 16" in r.json()["amount"][0]
    r = admin.post(url, {"namespace": "nlp-main", "resource": GPU, "amount": 1}, format="json")
    assert r.status_code == 404 and "namespace" in r.json()  # another team's: not found
    r = admin.post(url, {"namespace": "vision-train", "resource": "nvidia.com/mig-7g.80gb",
                         "amount": 1}, format="json")  # fmt: skip
    assert r.status_code == 400 and "resource" in r.json()
    assert rob.post(url, {"namespace": "vision-train", "resource": GPU, "amount": 1},
                    format="json").status_code == 403  # fmt: skip
    assert olga.post(url, {}, format="json").status_code == 403  # admins only, checked first
    r = admin.post(url, {"namespace": "vision-train", "resource": GPU, "amount": 0}, format="json")
    assert r.status_code == 204
    assert rob.get("/api/v1/grants/", {"state": "active"}).json()["count"] == 0
    assert Operation.objects.filter(reason="baseline").count() == 3
