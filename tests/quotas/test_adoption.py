"""Existing quotas adopted, never silently overridden (issue #9, section 3).

Against the simulated cluster over HTTP, with the portal as its ServiceAccount and the
RBAC of deploy/ (tests/kubesim.py). The namespace is arranged like the demo's ml-vision
(simcluster/fleets/demo.yaml): a hand-made ``gpu-quota`` with requests.nvidia.com/gpu: 16
and mig-1g.10gb: 14, pods using 6 GPUs and 4 MIG slices. Behaviour followed:
kubernetes ``pkg/quota/v1/evaluator/core/pods.go`` (only ``requests.<extended>`` keys
count; scoped quotas bind only matching pods) and the admission plugin
``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go`` (every
quota of the namespace is checked; lowering one evicts nothing).
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from inventory.sync import sync_cluster
from quotas import services
from quotas.apply import run_operation
from quotas.models import AuditEvent, ForeignQuota, Grant, Operation, QuotaRequest
from quotas.services import RequestData
from quotas.tasks import process_grant_windows, reconcile_quotas
from tests.conftest import api_for
from tests.inventory.test_sync import node_body, pod_body
from tests.kubesim import create_namespace
from tests.quotas.builders import make_grant, make_team, make_user

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
NS = "ml-vision"
PORTAL_QUOTA = "gpu-portal-quota"
WHY = "fine-tuning run for the benchmark paper"


def text(response) -> str:
    """The page's text with tags stripped and whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def pod_in(name: str, node: str, amount: int, resource: str = GPU, priority: str = "") -> dict:
    body = pod_body(name, node, amount, resource)
    if priority:
        body["spec"]["priorityClassName"] = priority
    return body


def wait_used(core, name: str, seconds: float = 10) -> None:
    """Until the quota controller has recorded status.used (it syncs asynchronously)."""
    deadline = time.monotonic() + seconds
    while not (core.read_namespaced_resource_quota(name, NS).status.used or {}):
        assert time.monotonic() < deadline, f"{name}: status.used never filled"
        time.sleep(0.05)


@pytest.fixture
def demo(sim_api, sim_cluster, client):
    """ml-vision as in the demo fleet: its pods, then the hand-made quotas."""
    core = sim_api
    core.create_node(node_body("a100-00"))
    core.create_node(node_body("a100-01"))
    core.create_node(node_body("a100-02", extra_resources={MIG: "14"}))
    create_namespace(core, NS)
    create_namespace(core, "robotics")
    core.create_namespaced_pod(NS, pod_in("resnet-train-0", "a100-00", 4))
    core.create_namespaced_pod(NS, pod_in("detr-finetune", "a100-00", 2))
    for i in range(4):
        core.create_namespaced_pod(NS, pod_in(f"yolo-mig-{i}", "a100-02", 1, MIG))
    hard = {f"requests.{GPU}": "16", f"requests.{MIG}": "14", f"limits.{GPU}": "8"}
    core.create_namespaced_resource_quota(
        NS, {"metadata": {"name": "gpu-quota"}, "spec": {"hard": hard}}
    )
    high = {"scopeName": "PriorityClass", "operator": "In", "values": ["high-priority"]}
    core.create_namespaced_resource_quota(NS, {
        "metadata": {"name": "gpu-high-priority"},
        "spec": {"hard": {f"requests.{GPU}": "4"}, "scopeSelector": {"matchExpressions": [high]}},
    })  # fmt: skip
    core.create_namespaced_resource_quota(
        NS, {"metadata": {"name": "objects"}, "spec": {"hard": {"count/pods": "100"}}}
    )
    assert sync_cluster(sim_cluster).status == "succeeded"
    wait_used(core, "gpu-quota")
    alice, admin = make_user("alice"), make_user("root", staff=True)
    admin.email = "root@example.com"
    admin.save()
    team = make_team("vision", members=[alice])
    return {"core": core, "cluster": sim_cluster, "alice": alice, "admin": admin, "team": team}


def onboard(client, demo, name=NS):
    client.force_login(demo["admin"])
    response = client.post(
        reverse("quotas:namespace-new"),
        {"team": demo["team"].pk, "cluster": demo["cluster"].pk, "name": name},
    )
    assert response.status_code == 302, text(response)
    return demo["team"].namespaces.get(name=name)


def ask(demo, ns, amount: int) -> QuotaRequest:
    data = RequestData(team=demo["team"], namespace=ns, resource=GPU, amount=amount,
                       justification=WHY)  # fmt: skip
    return services.submit(demo["alice"], data)


def run_pending() -> list[str]:
    return [run_operation(op.pk) for op in Operation.objects.filter(status="pending")]


def portal_hard(core) -> dict:
    return dict(core.read_namespaced_resource_quota(PORTAL_QUOTA, NS).spec.hard)


# -- onboarding and effective limits --------------------------------------------------


def test_onboarding_reads_foreign_quotas_with_counted_ignored_and_scoped_keys(client, demo):
    ns = onboard(client, demo)
    quotas = {fq.name: fq for fq in ForeignQuota.objects.filter(namespace=ns)}
    assert set(quotas) == {"gpu-quota", "gpu-high-priority"}  # count/pods only: not GPU
    plain = quotas["gpu-quota"]
    assert plain.hard == {f"requests.{GPU}": "16", f"requests.{MIG}": "14"}
    assert plain.ignored == {f"limits.{GPU}": "8"}  # accepted, never counted by quota
    assert plain.used == {f"requests.{GPU}": "6", f"requests.{MIG}": "4"}
    assert plain.decision == "undecided" and not plain.scoped
    scoped = quotas["gpu-high-priority"]
    assert scoped.scoped and scoped.scope_text() == "PriorityClass In high-priority"
    assert AuditEvent.objects.filter(action="namespace.onboarded").count() == 1
    assert AuditEvent.objects.filter(action="quota.foreign_found").count() == 2
    page = text(client.get(reverse("quotas:namespace", args=[ns.pk])))
    assert "ignored: quota counts extended resources only under requests." in page
    assert "binds only pods with PriorityClass In high-priority" in page


def test_onboarding_refuses_bad_input_and_outsiders(client, demo):
    client.force_login(demo["alice"])
    assert client.get(reverse("quotas:namespace-new")).status_code == 403
    client.force_login(demo["admin"])
    response = client.post(reverse("quotas:namespace-new"),
                           {"team": demo["team"].pk, "cluster": demo["cluster"].pk,
                            "name": "Not_A_Name"})  # fmt: skip
    assert response.status_code == 200 and "lower-case letters" in text(response)
    onboard(client, demo)
    api = api_for(demo["admin"])
    again = api.post("/api/v1/namespaces/", {"team": "vision", "cluster": "sim", "name": NS},
                     format="json")  # fmt: skip
    assert again.status_code == 400 and "already belongs to a team" in again.json()["name"][0]
    denied = api_for(demo["alice"]).post(
        "/api/v1/namespaces/", {"team": "vision", "cluster": "sim", "name": "robotics"},
        format="json",
    )  # fmt: skip
    assert denied.status_code == 403
    created = api.post("/api/v1/namespaces/", {"team": "vision", "cluster": "sim",
                                               "name": "robotics"}, format="json")  # fmt: skip
    assert created.status_code == 201 and created.json()["foreign_quotas"] == []


def test_effective_limit_is_the_foreign_minimum_on_team_page_api_and_queue(client, demo):
    ns = onboard(client, demo)
    make_grant(ns, 17, kind=Grant.Kind.BASELINE)
    expected = "granted 17, effective limit 16 (gpu-quota binds)"
    client.force_login(demo["alice"])
    assert expected in text(client.get(reverse("quotas:teams")))

    data = api_for(demo["alice"]).get("/api/v1/teams/vision/").json()
    rows = {r["resource"]: r for r in data["namespaces"][0]["effective_limits"]}
    assert rows[GPU]["text"] == expected
    assert (rows[GPU]["granted"], rows[GPU]["limit"], rows[GPU]["binding"]) == (17, 16, "gpu-quota")
    assert rows[GPU]["outside"] == [{"quota": "gpu-quota", "limit": 16}]
    assert rows[GPU]["scoped"] == [{"quota": "gpu-high-priority", "limit": 4,
                                    "scopes": "PriorityClass In high-priority"}]  # fmt: skip
    assert (rows[MIG]["limit"], rows[MIG]["binding"]) == (0, PORTAL_QUOTA)  # 0 granted < 14
    same = api_for(demo["alice"]).get(f"/api/v1/namespaces/{ns.pk}/").json()
    assert same["effective_limits"] == data["namespaces"][0]["effective_limits"]

    req = ask(demo, ns, 2)
    client.force_login(demo["admin"])
    for url in (reverse("quotas:queue"), reverse("quotas:request", args=[req.pk])):
        page = text(client.get(url))
        assert expected in page
        assert ("Approving does not raise the real limit: granted would be 19, but gpu-quota "
                "keeps the effective limit at 16.") in page  # fmt: skip
    # Warned, not forbidden.
    assert services.approve(req, demo["admin"]).status == QuotaRequest.Status.APPROVED


# -- adopt, remove, keep ----------------------------------------------------------------


def test_adopt_makes_baselines_then_remove_deletes_the_quota_in_the_cluster(client, demo):
    core = demo["core"]
    ns = onboard(client, demo)
    fq = ForeignQuota.objects.get(namespace=ns, name="gpu-quota")
    response = client.post(reverse("quotas:foreign-adopt", args=[ns.pk, fq.pk]), {"note": "ok"})
    assert response.status_code == 302
    baselines = {g.resource: g.amount for g in Grant.objects.filter(namespace=ns, kind="baseline")}
    assert baselines == {GPU: 16, MIG: 14}
    fq.refresh_from_db()
    assert fq.decision == "adopted" and fq.decided_by == demo["admin"]
    event = AuditEvent.objects.get(action="quota.foreign_adopted")
    assert event.after["baselines"] == fq.hard and event.note == "ok"
    # Removal waits for the portal quota to enforce the adopted keys.
    early = client.post(reverse("quotas:foreign-remove", args=[ns.pk, fq.pk]), {})
    assert early.status_code == 200 and "does not enforce" in text(early)
    assert core.read_namespaced_resource_quota("gpu-quota", NS)  # still there
    assert set(run_pending()) == {"succeeded"}
    assert portal_hard(core) == {f"requests.{GPU}": "16", f"requests.{MIG}": "14"}
    page = text(client.get(reverse("quotas:foreign-remove", args=[ns.pk, fq.pk])))
    assert "Delete ResourceQuota gpu-quota from sim/ml-vision ?" in page
    done = client.post(reverse("quotas:foreign-remove", args=[ns.pk, fq.pk]), {"note": "tidy"})
    assert done.status_code == 302
    with pytest.raises(ApiException) as err:
        core.read_namespaced_resource_quota("gpu-quota", NS)
    assert err.value.status == 404
    fq.refresh_from_db()
    assert fq.decision == "removed" and fq.gone_at is not None
    assert AuditEvent.objects.filter(action="quota.foreign_removed", note="tidy").exists()
    # The portal's quota alone binds now: 16 GPUs, and a pod over it is refused by it.
    data = api_for(demo["alice"]).get(f"/api/v1/namespaces/{ns.pk}/").json()
    gpu = next(r for r in data["effective_limits"] if r["resource"] == GPU)
    assert gpu["text"] == f"granted 16, effective limit 16 ({PORTAL_QUOTA} binds)"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, pod_in("too-many", "a100-01", 11))
    assert err.value.status == 403 and f"exceeded quota: {PORTAL_QUOTA}" in err.value.body


def test_adopting_a_scoped_quota_is_refused_and_keep_is_recorded(client, demo):
    ns = onboard(client, demo)
    api = api_for(demo["admin"])
    url = f"/api/v1/namespaces/{ns.pk}/"
    scoped = api.post(url + "adopt/", {"quota": "gpu-high-priority"}, format="json")
    assert scoped.status_code == 400 and "binds only pods with" in scoped.json()["quota"][0]
    assert not Grant.objects.filter(namespace=ns).exists()
    unknown = api.post(url + "adopt/", {"quota": "nope"}, format="json")
    assert unknown.status_code == 404  # no such quota in the namespace
    member = api_for(demo["alice"]).post(url + "keep/", {"quota": "gpu-quota"}, format="json")
    assert member.status_code == 403
    kept = api.post(url + "keep/", {"quota": "gpu-quota", "note": "finance owns it"},
                    format="json")  # fmt: skip
    assert kept.status_code == 200
    fq = next(q for q in kept.json()["foreign_quotas"] if q["name"] == "gpu-quota")
    assert fq["decision"] == "kept" and fq["decision_note"] == "finance owns it"
    assert AuditEvent.objects.filter(action="quota.foreign_kept").count() == 1
    client.force_login(demo["alice"])
    page = text(client.get(reverse("quotas:namespace", args=[ns.pk])))
    assert "kept as an outside limit" in page
    assert "granted 0, effective limit 0 (gpu-portal-quota binds)" in page
    # Removing a kept quota is refused: only adopted ones may go.
    removal = api.post(url + "remove-quota/", {"quota": "gpu-quota"}, format="json")
    assert removal.status_code == 400 and "not adopted" in removal.json()["quota"][0]
    assert demo["core"].read_namespaced_resource_quota("gpu-quota", NS)


def test_drift_check_reads_foreign_quotas_of_every_namespace(client, demo):
    ns = onboard(client, demo)
    core = demo["core"]
    core.create_namespaced_resource_quota(
        NS, {"metadata": {"name": "late"}, "spec": {"hard": {f"requests.{GPU}": "3"}}}
    )
    core.delete_namespaced_resource_quota("gpu-high-priority", NS)
    assert reconcile_quotas()["checked"] == 1
    present = set(ForeignQuota.objects.filter(namespace=ns, gone_at__isnull=True)
                  .values_list("name", flat=True))  # fmt: skip
    assert present == {"gpu-quota", "late"}
    assert AuditEvent.objects.filter(action="quota.foreign_gone").count() == 1
    client.force_login(demo["alice"])
    assert "effective limit 0" in text(client.get(reverse("quotas:teams")))


# -- never below usage unconfirmed ------------------------------------------------------


def test_lowering_below_usage_waits_for_confirmation_listing_the_pods(
    client, demo, mailoutbox, on_commit
):
    core = demo["core"]
    ns = onboard(client, demo)
    ForeignQuota.objects.filter(namespace=ns).delete()  # only the portal's quota matters here
    core.delete_namespaced_resource_quota("gpu-quota", NS)
    make_grant(ns, 6, kind=Grant.Kind.BASELINE)
    req = ask(demo, ns, 2)
    client.force_login(demo["admin"])
    page = text(client.get(reverse("quotas:request", args=[req.pk])))
    assert f"requests.{MIG} would be 0 while pods use 4" in page  # shown before approving
    with on_commit(execute=True):
        services.approve(req, demo["admin"])
        op = Operation.objects.get(status="pending")
        assert run_operation(op.pk) == "confirm"
    op.refresh_from_db()
    assert op.lowering == {f"requests.{MIG}": {"hard": 0, "was": None, "used": 4}}
    with pytest.raises(ApiException):  # nothing was written
        core.read_namespaced_resource_quota(PORTAL_QUOTA, NS)
    assert any("needs your confirmation" in m.subject and m.to == ["root@example.com"]
               for m in mailoutbox)  # fmt: skip
    assert AuditEvent.objects.filter(action="quota.lowering_held").count() == 1
    req.refresh_from_db()
    assert req.status == "applying"
    for url in (reverse("quotas:request", args=[req.pk]), reverse("quotas:queue"),
                reverse("quotas:namespace", args=[ns.pk])):  # fmt: skip
        assert "confirmation" in text(client.get(url))
    metrics = client.get("/metrics").content.decode()
    assert 'portal_operations{status="confirm"} 1.0' in metrics
    assert run_operation(op.pk) == "skipped"  # held: never claimed by a worker or beat
    assert reconcile_quotas()["checked"] == 0  # drift leaves a held namespace alone

    confirm = client.get(reverse("quotas:lowering-confirm", args=[ns.pk]))
    assert [p.name for p in confirm.context["pods"]] == [f"yolo-mig-{i}" for i in range(4)]
    assert "resnet-train-0" not in text(confirm)  # it uses GPUs, which are not lowered
    stale = client.post(reverse("quotas:lowering-confirm", args=[ns.pk]),
                        {"expected": '{"requests.nvidia.com/mig-1g.10gb": 1}'})  # fmt: skip
    assert stale.status_code == 200 and Operation.objects.get(pk=op.pk).status == "confirm"
    client.force_login(demo["alice"])
    assert client.post(reverse("quotas:lowering-confirm", args=[ns.pk]), {}).status_code == 403
    client.force_login(demo["admin"])
    shown = {"expected": confirm.context["expected"], "note": "ok, MIG moves"}
    done = client.post(reverse("quotas:lowering-confirm", args=[ns.pk]), shown)
    assert done.status_code == 302
    event = AuditEvent.objects.get(action="quota.lowering_confirmed")
    assert event.actor == demo["admin"] and event.after == {f"requests.{MIG}": 0}
    assert run_operation(op.pk) == "succeeded"
    assert portal_hard(core) == {f"requests.{GPU}": "8", f"requests.{MIG}": "0"}
    req.refresh_from_db()
    assert req.status == "applied"
    # Re-applying the confirmed (now current) limit is no lowering: a raise goes through.
    make_grant(ns, 1)
    again = Operation.objects.create(namespace=ns, reason="drift")
    assert run_operation(again.pk) == "succeeded"


def test_expiry_below_usage_warns_and_does_not_apply_silently(client, demo, mailoutbox, on_commit):
    core = demo["core"]
    ns = onboard(client, demo)
    ForeignQuota.objects.filter(namespace=ns).delete()
    core.delete_namespaced_resource_quota("gpu-quota", NS)
    make_grant(ns, 4, MIG, kind=Grant.Kind.BASELINE)
    make_grant(ns, 2, kind=Grant.Kind.BASELINE)
    make_grant(ns, 4, days=1)  # 6 GPUs granted while pods use 6
    with on_commit(execute=True):
        assert process_grant_windows()["reminded"] == 1
    reminder = next(m for m in mailoutbox if "ends in 1 days" in m.subject)
    assert f"requests.{GPU} 2 while pods use 6" in reminder.body
    assert "only once an admin confirms it" in reminder.body
    assert run_operation(Operation.objects.create(namespace=ns, reason="baseline").pk) == (
        "succeeded"
    )
    assert portal_hard(core)[f"requests.{GPU}"] == "6"
    later = timezone.now() + timedelta(days=1, minutes=1)
    with time_machine.travel(later), on_commit(execute=True):
        assert process_grant_windows()["expired"] == 1
        op = Operation.objects.get(reason="expiry")
        assert run_operation(op.pk) == "confirm"
    assert portal_hard(core)[f"requests.{GPU}"] == "6"  # not lowered silently
    op.refresh_from_db()
    assert op.lowering == {f"requests.{GPU}": {"hard": 2, "was": 6, "used": 6}}
    assert "would be 2 while pods use 6" in op.last_error
    assert any("needs your confirmation" in m.subject for m in mailoutbox)
    expired = next(m for m in mailoutbox if "has ended" in m.subject)
    assert "only once an admin confirms it" in expired.body
    assert "below usage" in AuditEvent.objects.get(action="grant.expired").note
    client.force_login(demo["alice"])
    assert "waits for an admin's confirmation" in text(client.get(reverse("quotas:teams")))
    # The API shows and confirms the same.
    url = f"/api/v1/namespaces/{ns.pk}/"
    shown = api_for(demo["alice"]).get(url).json()["needs_confirmation"]
    assert shown == {f"requests.{GPU}": {"hard": 2, "was": 6, "used": 6}}
    api = api_for(demo["admin"])
    wrong = api.post(url + "confirm-lowering/", {"expected": {f"requests.{GPU}": 1}},
                     format="json")  # fmt: skip
    assert wrong.status_code == 409 and "changed since" in wrong.json()["expected"][0]
    member = api_for(demo["alice"]).post(url + "confirm-lowering/", {}, format="json")
    assert member.status_code == 403
    ok = api.post(url + "confirm-lowering/", {"expected": {f"requests.{GPU}": 2}}, format="json")
    assert ok.status_code == 200 and ok.json()["needs_confirmation"] == {}
    assert run_operation(op.pk) == "succeeded"
    assert portal_hard(core)[f"requests.{GPU}"] == "2"
    assert (
        api.post(url + "confirm-lowering/", {}, format="json").status_code == 409
    )  # nothing waits any more


def test_release_page_warns_before_lowering_below_usage(client, demo):
    ns = onboard(client, demo)
    grant = make_grant(ns, 6)
    manager = make_user("mia")
    demo["team"].memberships.create(user=manager, role="manager")
    client.force_login(manager)
    page = text(client.get(reverse("quotas:grant-release", args=[grant.pk])))
    assert f"requests.{GPU} would be 0 while pods use 6" in page


def test_team_and_namespace_lists_cost_the_same_queries_for_more_namespaces(db):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import make_cluster, make_node

    cluster = make_cluster("big")
    make_node(cluster, "n1", gpus=8)
    admin = make_user("boss", staff=True)
    api = api_for(admin)

    def add_team(i: int) -> None:
        team = make_team(f"t{i}")
        ns = team.namespaces.create(cluster=cluster, name=f"ns-{i}")
        ForeignQuota.objects.create(namespace=ns, name="gpu-quota", hard={f"requests.{GPU}": "2"})
        make_grant(ns, 1)

    def count(url: str) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert api.get(url).status_code == 200
        return len(ctx.captured_queries)

    add_team(0)
    api.get("/api/v1/teams/")  # the token's last use is written once, on the first call
    few = {url: count(url) for url in ("/api/v1/teams/", "/api/v1/namespaces/")}
    for i in range(1, 6):
        add_team(i)
    assert {url: count(url) for url in few} == few
    rows = api.get("/api/v1/namespaces/").json()["results"]
    assert {r["effective_limits"][0]["text"] for r in rows} == {
        f"granted 1, effective limit 1 ({PORTAL_QUOTA} binds)"
    }
