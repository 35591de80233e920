"""Quota pages: my teams, request forms, request detail, approvals, capacity, audit,
notification preferences. Personas: a member (``researcher``), a manager, a member of
another team, and an admin; every object is checked for scoping.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from inventory.models import NamespaceUsage
from quotas import services
from quotas.models import (
    AuditEvent,
    Grant,
    Membership,
    NotificationOptOut,
    Operation,
    OperationAttempt,
    QuotaRequest,
    TeamNamespace,
)
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_team, make_user

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
WHY = "Training the vision model for the spring paper."


# -- factories (teams, users and grants: tests/quotas/builders.py) --------------------


def make_request(ns: TeamNamespace, user, amount: int = 2, **kw) -> QuotaRequest:
    data = services.RequestData(
        team=ns.team, namespace=ns, resource=GPU, amount=amount, justification=WHY, **kw
    )
    return services.submit(user, data)


@pytest.fixture
def world(researcher, admin_user):
    """Cluster with 16 GPUs; team vision (researcher member, maria manager) and team
    nlp (olga); a 4-GPU permanent grant for vision and 3 GPUs used by its pods."""
    cluster = make_cluster("gpu-a")
    make_node(cluster, "n1", gpus=8)
    make_node(cluster, "n2", gpus=8)
    manager = make_user("maria")
    outsider = make_user("olga")
    vision = make_team("vision", members=[researcher], managers=[manager])
    nlp = make_team("nlp", members=[outsider])
    ns = TeamNamespace.objects.create(team=vision, cluster=cluster, name="ml-vision")
    other_ns = TeamNamespace.objects.create(team=nlp, cluster=cluster, name="ml-nlp")
    grant = make_grant(ns, 4)
    other_grant = make_grant(other_ns, 2, days=10)
    NamespaceUsage.objects.create(cluster=cluster, namespace="ml-vision", resource=GPU, requested=3)
    return {
        "cluster": cluster, "ns": ns, "other_ns": other_ns, "grant": grant,
        "other_grant": other_grant, "manager": manager, "outsider": outsider,
        "vision": vision, "nlp": nlp,
    }  # fmt: skip


def login(client, user):
    client.force_login(user)
    return client


def form_data(ns: TeamNamespace, **kw) -> dict:
    data = {
        "team": str(ns.team_id), "namespace": str(ns.pk), "resource": GPU, "amount": "2",
        "duration": "permanent", "starts_at": "", "ends_at": "", "justification": WHY,
    }  # fmt: skip
    data.update(kw)
    return data


# -- login and navigation -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["quotas:teams", "quotas:requests", "quotas:request-new", "quotas:queue",
             "quotas:capacity", "quotas:audit", "quotas:audit-export", "quotas:notifications"],
)  # fmt: skip
def test_pages_require_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_nav_shows_quota_links_by_role(client, world, researcher, admin_user):
    html = login(client, researcher).get(reverse("quotas:teams")).content.decode()
    assert reverse("quotas:teams") in html
    assert reverse("quotas:queue") not in html
    html = login(client, admin_user).get(reverse("quotas:teams")).content.decode()
    for name in ("quotas:queue", "quotas:capacity", "quotas:audit"):
        assert reverse(name) in html


# -- my teams --------------------------------------------------------------------------------


def test_team_page_shows_granted_used_and_limit(client, world, researcher):
    make_grant(world["ns"], 2, days=5)  # active, temporary: counts and can be renewed
    make_grant(world["ns"], 1, start_in=timedelta(days=3))  # upcoming: does not count
    response = login(client, researcher).get(reverse("quotas:teams"))
    assert response.status_code == 200
    rows = response.context["rows"]
    assert [r["team"].slug for r in rows] == ["vision"]  # not the other team
    (view,) = rows[0]["namespaces"]
    (gpu,) = view.resources
    assert (gpu.resource, gpu.granted, gpu.used, gpu.limit) == (GPU, 6, 3, 16)
    assert len(view.active) == 2 and len(view.upcoming) == 1
    html = response.content.decode()
    assert "ml-vision" in html and "ml-nlp" not in html
    assert "<dd data-granted>6</dd>" in html
    assert "<dd data-used>3</dd>" in html
    assert "<dd data-limit>16</dd>" in html
    # Once the portal has read its ResourceQuota back, status.used is the figure shown.
    world["ns"].quota_status = {"hard": {}, "used": {"requests.nvidia.com/gpu": "5"}}
    world["ns"].save()
    rows = client.get(reverse("quotas:teams")).context["rows"]
    assert rows[0]["namespaces"][0].resources[0].used == 5
    # Request pre-filled with the namespace; renew on the temporary grant only; a plain
    # member may not release.
    assert f"?namespace={world['ns'].pk}" in html
    assert html.count("/renew/") == 1
    assert "/release/" not in html


def test_team_page_manager_sees_release(client, world):
    html = login(client, world["manager"]).get(reverse("quotas:teams")).content.decode()
    assert reverse("quotas:grant-release", args=[world["grant"].pk]) in html


def test_team_page_empty_state(client, db):
    html = login(client, make_user("newbie")).get(reverse("quotas:teams")).content.decode()
    assert "not in a team yet" in html
    assert "Ask a portal admin" in html


# -- new request -------------------------------------------------------------------------------


def test_new_request_form_is_scoped_and_prefilled(client, world, researcher):
    response = login(client, researcher).get(
        reverse("quotas:request-new"), {"namespace": world["ns"].pk}
    )
    form = response.context["form"]
    assert list(form.fields["team"].queryset) == [world["vision"]]
    assert list(form.fields["namespace"].queryset) == [world["ns"]]
    assert form.fields["resource"].choices == [(GPU, GPU)]
    assert form["namespace"].value() == world["ns"].pk
    # Another team's namespace is never pre-filled: the member's only one is.
    other = client.get(reverse("quotas:request-new"), {"namespace": world["other_ns"].pk})
    assert other.context["form"]["namespace"].value() == world["ns"].pk


def test_admin_sees_all_teams_marked_on_behalf(client, world, admin_user):
    form = login(client, admin_user).get(reverse("quotas:request-new")).context["form"]
    labels = [label for _, label in form.fields["team"].choices]
    assert "Nlp (on behalf)" in labels and "Vision (on behalf)" in labels


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"amount": "99"}, "amount", "More than the 16"),
        ({"justification": "gpus"}, "justification", "at least 10 characters"),
        ({"duration": "window", "starts_at": "2999-01-02T10:00", "ends_at": "2999-01-01T10:00"},
         "ends_at", "after the start"),
        ({"duration": "window"}, "ends_at", "Give an end"),
        ({"amount": "0"}, "amount", "greater than or equal to 1"),
    ],
)  # fmt: skip
def test_bad_input_shows_field_errors_and_stores_nothing(
    client, world, researcher, overrides, field, message
):
    response = login(client, researcher).post(
        reverse("quotas:request-new"), form_data(world["ns"], **overrides)
    )
    assert response.status_code == 200
    form = response.context["form"]
    assert message in " ".join(form.errors[field])
    html = response.content.decode()
    assert f'id="id_{field}_error"' in html
    assert 'aria-invalid="true"' in html
    assert not QuotaRequest.objects.exists()


def test_namespace_of_another_team_is_refused(client, world, researcher):
    data = form_data(world["ns"], namespace=str(world["other_ns"].pk))
    response = login(client, researcher).post(reverse("quotas:request-new"), data)
    assert response.status_code == 200
    assert "namespace" in response.context["form"].errors
    assert not QuotaRequest.objects.exists()


def test_valid_submission_creates_pending_request(client, world, researcher):
    end = timezone.now() + timedelta(days=7)
    data = form_data(world["ns"], duration="window", ends_at=end.strftime("%Y-%m-%dT%H:%M"))
    response = login(client, researcher).post(reverse("quotas:request-new"), data)
    req = QuotaRequest.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("quotas:request", args=[req.pk])
    assert req.status == QuotaRequest.Status.PENDING
    assert req.requested_by == researcher and not req.on_behalf
    # The form's time is read as UTC.
    assert req.ends_at == end.replace(second=0, microsecond=0)
    assert client.get(response["Location"]).status_code == 200


# -- renew and release -----------------------------------------------------------------


def test_outsider_gets_404_for_other_teams_objects(client, world, researcher):
    other_req = make_request(world["other_ns"], world["outsider"])
    login(client, researcher)
    for url in (
        reverse("quotas:request", args=[other_req.pk]),
        reverse("quotas:request-cancel", args=[other_req.pk]),
        reverse("quotas:grant-renew", args=[world["other_grant"].pk]),
        reverse("quotas:grant-release", args=[world["other_grant"].pk]),
    ):
        assert client.get(url).status_code == 404, url
        assert client.post(url, {"justification": WHY}).status_code == 404, url
    assert QuotaRequest.objects.count() == 1


def test_renew_creates_renewal_request(client, world, researcher):
    grant = make_grant(world["ns"], 2, days=5)
    new_end = (grant.ends_at + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    login(client, researcher)
    page = client.get(reverse("quotas:grant-renew", args=[grant.pk]))
    assert page.status_code == 200
    response = client.post(
        reverse("quotas:grant-renew", args=[grant.pk]), {"ends_at": new_end, "justification": WHY}
    )
    req = QuotaRequest.objects.get()
    assert response.status_code == 302
    assert (req.kind, req.target_grant, req.status) == ("renewal", grant, "pending")


def test_release_confirms_then_ends_grant(client, world, researcher):
    grant = world["grant"]
    # A plain member may not release; the manager may, after a confirmation page.
    assert (
        login(client, researcher).get(reverse("quotas:grant-release", args=[grant.pk])).status_code
        == 403
    )
    login(client, world["manager"])
    page = client.get(reverse("quotas:grant-release", args=[grant.pk]))
    assert page.status_code == 200 and "Release" in page.content.decode()
    grant.refresh_from_db()
    assert grant.ended_at is None  # GET changed nothing
    response = client.post(
        reverse("quotas:grant-release", args=[grant.pk]), {"justification": "Project finished."}
    )
    assert response.status_code == 302
    grant.refresh_from_db()
    assert grant.end_reason == "released"
    req = QuotaRequest.objects.get(kind="release")
    assert req.status == QuotaRequest.Status.APPROVED and req.target_grant == grant


# -- request list and detail -----------------------------------------------------------------


def test_request_list_is_scoped_filtered_and_paginated(client, world, researcher, admin_user):
    mine = [make_request(world["ns"], researcher, amount=1) for _ in range(3)]
    make_request(world["other_ns"], world["outsider"])
    services.cancel(mine[0], researcher)
    login(client, researcher)
    page = client.get(reverse("quotas:requests")).context["page"]
    assert {r.pk for r in page.object_list} == {r.pk for r in mine}
    page = client.get(reverse("quotas:requests"), {"status": "cancelled"}).context["page"]
    assert [r.pk for r in page.object_list] == [mine[0].pk]
    page = client.get(reverse("quotas:requests"), {"team": "nlp"}).context["page"]
    assert list(page.object_list) == []
    login(client, admin_user)
    page = client.get(reverse("quotas:requests"), {"team": "nlp"}).context["page"]
    assert page.paginator.count == 1


def test_request_list_searches_filters_by_cluster_and_exports_csv(
    client, world, researcher, admin_user
):
    import csv
    import io

    other = make_cluster("gpu-b")
    make_node(other, "b1", gpus=8)
    ns_b = TeamNamespace.objects.create(team=world["vision"], cluster=other, name="ml-vision-b")
    on_a = make_request(world["ns"], researcher, amount=1)
    on_b = make_request(ns_b, researcher, amount=2)
    login(client, researcher)
    page = client.get(reverse("quotas:requests"), {"cluster": "gpu-b"}).context["page"]
    assert [r.pk for r in page.object_list] == [on_b.pk]
    page = client.get(reverse("quotas:requests"), {"q": "vision-b"}).context["page"]
    assert [r.pk for r in page.object_list] == [on_b.pk]
    html = client.get(reverse("quotas:requests")).content.decode()
    assert '<th scope="col">GPU class</th>' in html and "any class" in html
    resp = client.get(reverse("quotas:request-export"), {"cluster": "gpu-a"})
    assert resp["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(resp.content.decode())))
    assert [(r["id"], r["cluster"], r["namespace"], r["amount"]) for r in rows] == [
        (str(on_a.pk), "gpu-a", "ml-vision", "1")
    ]
    assert client.get(reverse("quotas:request-export"), {"q": "x" * 101}).status_code == 400
    # another team's requests are in neither
    make_request(world["other_ns"], world["outsider"])
    body = client.get(reverse("quotas:request-export")).content.decode()
    assert "ml-nlp" not in body


def test_timeline_shows_events_and_attempts(client, world, researcher, admin_user):
    req = make_request(world["ns"], researcher)
    services.approve(req, admin_user, note="go ahead")
    op = Operation.objects.get(requests=req)
    OperationAttempt.objects.create(
        operation=op, number=1, finished_at=timezone.now(), ok=False, error="connection refused"
    )
    OperationAttempt.objects.create(operation=op, number=2, finished_at=timezone.now(), ok=True)
    response = login(client, researcher).get(reverse("quotas:request", args=[req.pk]))
    kinds = [item["kind"] for item in response.context["timeline"]]
    assert kinds == ["event", "event", "attempt", "attempt"]
    html = response.content.decode()
    assert "go ahead" in html
    assert "Apply attempt 1" in html and "connection refused" in html
    assert "Apply attempt 2" in html and "quota applied" in html
    assert "alice-admin" in html
    # Members see no decision forms.
    assert reverse("quotas:request-approve", args=[req.pk]) not in html


def test_cancel_needs_post_and_confirms(client, world, researcher):
    req = make_request(world["ns"], researcher)
    login(client, researcher)
    url = reverse("quotas:request-cancel", args=[req.pk])
    page = client.get(url)
    assert page.status_code == 200 and "Cancel this request?" in page.content.decode()
    req.refresh_from_db()
    assert req.status == "pending"
    response = client.post(url)
    assert response.status_code == 302
    req.refresh_from_db()
    assert req.status == "cancelled"
    # Cancelling again says so instead of failing.
    again = client.post(url, follow=True)
    assert "already cancelled" in again.content.decode()


def test_member_who_did_not_file_cannot_cancel(client, world, researcher):
    colleague = make_user("cara")
    Membership.objects.create(team=world["vision"], user=colleague)
    req = make_request(world["ns"], researcher)
    login(client, colleague)
    assert client.get(reverse("quotas:request-cancel", args=[req.pk])).status_code == 403
    assert client.post(reverse("quotas:request-cancel", args=[req.pk])).status_code == 403
    login(client, world["manager"])
    assert client.post(reverse("quotas:request-cancel", args=[req.pk])).status_code == 302


# -- admin only ------------------------------------------------------------------------------


def test_researcher_gets_403_on_admin_pages_and_actions(client, world, researcher):
    req = make_request(world["ns"], researcher)
    login(client, researcher)
    assert client.get(reverse("quotas:queue")).status_code == 403
    assert client.get(reverse("quotas:capacity")).status_code == 403
    assert client.post(reverse("quotas:request-approve", args=[req.pk])).status_code == 403
    assert (
        client.post(reverse("quotas:request-reject", args=[req.pk]), {"reason": "no"}).status_code
        == 403
    )
    req.refresh_from_db()
    assert req.status == "pending"
    assert client.get(reverse("quotas:request-approve", args=[req.pk])).status_code == 405


def test_admin_approves_from_queue(client, world, researcher, admin_user):
    req = make_request(world["ns"], researcher, amount=5)
    login(client, admin_user)
    queue = client.get(reverse("quotas:queue"))
    (row,) = queue.context["rows"]
    # 16 GPUs; 4 + 2 reserved by the two grants: 10 free, 5 left after approving.
    assert (row["room"].limit, row["room"].reserved, row["room"].free, row["after"]) == (
        16, 6, 10, 5,
    )  # fmt: skip
    assert (row["granted"], row["used"]) == (4, 3)
    response = client.post(
        reverse("quotas:request-approve", args=[req.pk]),
        {"amount": "3", "note": "3 for now", "next": reverse("quotas:queue")},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("quotas:queue")
    req.refresh_from_db()
    assert req.status == QuotaRequest.Status.APPROVED
    assert req.grant.amount == 3 and req.decided_by == admin_user
    assert Operation.objects.filter(requests=req).exists()  # the apply is queued
    # Approving again: "already decided", no second grant.
    again = client.post(reverse("quotas:request-approve", args=[req.pk]), follow=True)
    assert "already decided" in again.content.decode()
    assert Grant.objects.filter(request__isnull=False).count() == 1


def test_queue_headroom_matches_capacity_module(client, world, researcher, admin_user):
    from quotas.capacity import headroom

    make_grant(world["ns"], 5, days=2, start_in=timedelta(days=1))
    start = timezone.now() + timedelta(hours=1)
    reqs = [
        make_request(world["ns"], researcher, amount=1, starts_at=start, ends_at=start + d)
        for d in (timedelta(hours=2), timedelta(days=5))
    ] + [make_request(world["ns"], researcher, amount=1)]
    rows = login(client, admin_user).get(reverse("quotas:queue")).context["rows"]
    for row, req in zip(rows, reqs, strict=True):
        expected = headroom(world["cluster"], GPU, req.starts_at, req.ends_at)
        assert row["room"] == expected


def test_reject_needs_a_reason(client, world, researcher, admin_user):
    req = make_request(world["ns"], researcher)
    login(client, admin_user)
    response = client.post(reverse("quotas:request-reject", args=[req.pk]), {"reason": "  "})
    assert response.status_code == 200
    assert response.context["reject_form"].errors["reason"]
    req.refresh_from_db()
    assert req.status == "pending"
    response = client.post(
        reverse("quotas:request-reject", args=[req.pk]), {"reason": "Use the shared pool."}
    )
    assert response.status_code == 302
    req.refresh_from_db()
    assert (req.status, req.decision_note) == ("rejected", "Use the shared pool.")


def test_capacity_refusal_is_shown(client, world, researcher, admin_user):
    req = make_request(world["ns"], researcher, amount=8)
    make_grant(world["other_ns"], 6)  # 4 + 2 + 6 reserved: 4 free, 8 asked
    login(client, admin_user)
    detail = client.get(reverse("quotas:request", args=[req.pk]))
    assert detail.context["after"] == -4
    assert "over capacity" in detail.content.decode()
    response = client.post(reverse("quotas:request-approve", args=[req.pk]), {})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Only 4 nvidia.com/gpu free" in html
    assert 'id="amount-' in html and 'aria-invalid="true"' in html
    req.refresh_from_db()
    assert req.status == "pending" and req.grant is None


def test_queue_query_count_does_not_grow(client, world, researcher, admin_user):
    other_cluster = make_cluster("gpu-b")
    make_node(other_cluster, "b1", gpus=4)
    ns_b = TeamNamespace.objects.create(team=world["vision"], cluster=other_cluster, name="vb")
    login(client, admin_user)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(reverse("quotas:queue"))
        assert response.status_code == 200
        return len(ctx.captured_queries)

    for i in range(3):
        make_request(world["ns"] if i % 2 else ns_b, researcher, amount=1)
    three = count()
    for i in range(7):
        make_request(world["ns"] if i % 2 else ns_b, researcher, amount=1)
        make_grant(world["ns"], 1, days=i + 1)
    assert len(client.get(reverse("quotas:queue")).context["rows"]) == 10
    assert count() == three


def test_capacity_page(client, world, admin_user):
    make_grant(world["ns"], 12, days=3)  # 4 + 2 + 12 = 18 > 16 for three days
    response = login(client, admin_user).get(reverse("quotas:capacity"))
    assert response.status_code == 200
    (section,) = response.context["sections"]
    (chart,) = section["charts"]
    assert chart["room"].limit == 16 and chart["room"].allocatable == 16
    assert len(chart["days"]) == 28
    assert [d["reserved"] for d in chart["days"][:4]] == [18, 18, 18, 6]
    assert chart["days"][0]["over"] and not chart["days"][5]["over"]
    html = response.content.decode()
    assert "Numbers per day" in html and "2 over the limit" in html


# -- audit ---------------------------------------------------------------------------------


def test_audit_is_scoped_and_filtered(client, world, researcher, admin_user):
    mine = make_request(world["ns"], researcher)
    theirs = make_request(world["other_ns"], world["outsider"])
    login(client, researcher)
    events = client.get(reverse("quotas:audit")).context["page"].object_list
    assert {e.object_id for e in events} == {str(mine.pk)}
    assert str(theirs.pk) not in client.get(reverse("quotas:audit")).content.decode()
    login(client, admin_user)
    events = client.get(reverse("quotas:audit"), {"team": "nlp"}).context["page"].object_list
    assert {e.object_id for e in events} == {str(theirs.pk)}
    events = client.get(reverse("quotas:audit"), {"actor": "olga"}).context["page"].object_list
    assert {e.actor_name for e in events} == {"olga"}
    today = timezone.now().date()
    later = (today + timedelta(days=1)).isoformat()
    assert not client.get(reverse("quotas:audit"), {"since": later}).context["page"].object_list
    response = client.get(reverse("quotas:audit"), {"since": later, "until": today.isoformat()})
    assert response.context["form"].errors["until"]


def test_audit_names_its_objects_not_ids(client, world, researcher, admin_user):
    from quotas import services

    req = make_request(world["ns"], researcher, amount=3)
    services.set_baseline(world["ns"], "nvidia.com/gpu", 2, admin_user)
    html = login(client, admin_user).get(reverse("quotas:audit")).content.decode()
    ns = f"{world['ns'].cluster.slug}/{world['ns'].name}"
    assert f"<span data-object-name>+3 nvidia.com/gpu for {ns}</span>" in html
    assert f"<span data-object-name>+2 nvidia.com/gpu for {ns}</span>" in html  # the grant
    assert str(req.pk)[:8] not in html.replace(f"/requests/{req.pk}/", "")


def test_audit_csv_export_honours_scope_and_filters(client, world, researcher):
    mine = make_request(world["ns"], researcher)
    make_request(world["other_ns"], world["outsider"])
    AuditEvent.objects.create(
        actor_name="rob", action="note.added", object_type="team", object_id="x",
        team=world["vision"], note="=HYPERLINK(evil)",
    )  # fmt: skip
    login(client, researcher)
    page = client.get(reverse("quotas:audit"), {"action": "request.submitted"})
    assert "export.csv?action=request.submitted" in page.content.decode()
    response = client.get(reverse("quotas:audit-export"), {"action": "request.submitted"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:3] == ["at", "actor", "action"]
    assert [(r[2], r[4]) for r in rows[1:]] == [("request.submitted", str(mine.pk))]
    rows = list(
        csv.reader(io.StringIO(client.get(reverse("quotas:audit-export")).content.decode()))
    )
    assert {r[5] for r in rows[1:]} == {"vision"}
    assert "'=HYPERLINK(evil)" in {r[8] for r in rows[1:]}


# -- notifications ---------------------------------------------------------------------------


def test_notification_preferences_save(client, researcher):
    login(client, researcher)
    form = client.get(reverse("quotas:notifications")).context["form"]
    assert "new_request" not in form.fields  # admins only
    assert all(form[name].value() for name in form.fields)  # all on by default
    keep = {"approved", "rejected", "failed"}
    response = client.post(reverse("quotas:notifications"), {k: "on" for k in keep})
    assert response.status_code == 302
    off = set(NotificationOptOut.objects.filter(user=researcher).values_list("kind", flat=True))
    assert off == {"applied", "expiring", "starting", "expired", "reclaim", "comment"}
    form = client.get(reverse("quotas:notifications")).context["form"]
    assert {name for name in form.fields if form[name].value()} == keep
    client.post(reverse("quotas:notifications"), {k: "on" for k in form.fields})
    assert not NotificationOptOut.objects.filter(user=researcher).exists()


def test_a_single_team_and_namespace_are_preselected(client, db):
    user = make_user("solo")
    team = make_team("solo", members=[user])
    ns = TeamNamespace.objects.create(team=team, cluster=make_cluster("c1"), name="solo")
    form = login(client, user).get(reverse("quotas:request-new")).context["form"]
    assert (form.initial["team"], form.initial["namespace"]) == (team.pk, ns.pk)


def test_an_admin_approves_a_permanent_request_for_a_limited_time(
    client, world, researcher, admin_user
):
    req = make_request(world["ns"], researcher, amount=2)  # permanent
    login(client, admin_user)
    html = client.get(reverse("quotas:queue")).content.decode()
    assert f'id="ends-{req.pk}"' in html and "empty: permanent, as asked" in html
    end = (timezone.now() + timedelta(days=7)).replace(second=0, microsecond=0)
    response = client.post(
        reverse("quotas:request-approve", args=[req.pk]),
        {"ends_at": end.strftime("%Y-%m-%dT%H:%M"), "next": reverse("quotas:queue")},
        follow=True,
    )
    req.refresh_from_db()
    assert req.status == QuotaRequest.Status.APPROVED and req.grant.ends_at == end
    assert "(asked permanently)" in response.content.decode()


def test_a_renewal_is_approved_for_its_amount_only(client, world, researcher, admin_user):
    grant = make_grant(world["ns"], 2, days=5)
    renewal = make_request(
        world["ns"], researcher, amount=2, kind=QuotaRequest.Kind.RENEWAL, target_grant=grant,
        ends_at=grant.ends_at + timedelta(days=3),
    )  # fmt: skip
    login(client, admin_user)
    html = client.get(reverse("quotas:request", args=[renewal.pk])).content.decode()
    assert "data-fixed-amount" in html and f'id="amount-{renewal.pk}"' not in html
    assert "a renewal extends the grant as it is" in html
    response = client.post(  # a hand-made POST with less is refused, and says why
        reverse("quotas:request-approve", args=[renewal.pk]), {"amount": "1"}, follow=True
    )
    assert "A renewal extends the grant of 2 as it is" in response.content.decode()
    renewal.refresh_from_db()
    assert renewal.status == QuotaRequest.Status.PENDING
