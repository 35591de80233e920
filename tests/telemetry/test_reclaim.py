"""Idle grants reclaimed by policy (issue #25 section 2), with the agent as the telemetry
source, on the real control plane, through frozen time: warning, grace, "still needed",
lowering never below what pods hold, nothing done where telemetry is missing.
(tests/telemetry/test_prom_source.py runs the cycle with Prometheus as the source.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from inventory.sync import sync_cluster
from notices.models import Notification
from quotas import reclaim as rules
from quotas.apply import run_operation
from quotas.models import AuditEvent, Grant, GrantReclaim, Operation, ReclaimPolicy
from telemetry import reclaim, retention, summary
from telemetry.models import GpuState
from tests.conftest import wait_for
from tests.inventory.test_sync import node_body, pod_body
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

from .telebuilders import fill_5m, make_telemetry

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
QUOTA = "gpu-portal-quota"
T0 = timezone.now().replace(minute=20, second=0, microsecond=0)
WHY = "the rebuttal reruns for the paper start on Monday"


def hard(core) -> dict:
    return dict(core.read_namespaced_resource_quota(QUOTA, "vision").spec.hard)


def apply_pending() -> None:
    for op in Operation.objects.filter(status="pending"):
        run_operation(op.pk)


@pytest.fixture
def world(sim_api, sim_cluster):
    """``vision`` holds a 6-GPU grant for three days; its pod holds 2 GPUs of gpu-0, idle
    (every 5-minute point at 1 %); the agent reports gpu-0 (so the cluster is measured)."""
    core = sim_api
    core.create_node(node_body("gpu-0"))
    core.create_namespace({"metadata": {"name": "vision"}})
    assert sync_cluster(sim_cluster).status == "succeeded"
    alice, admin, manager = make_user("alice"), make_user("root", staff=True), make_user("mona")
    team = make_team("vision", members=[alice], managers=[manager])
    ns = make_namespace(team, sim_cluster, "vision")
    setup = {"core": core, "alice": alice, "admin": admin, "team": team, "ns": ns}
    with time_machine.travel(T0 - timedelta(days=3), tick=False):
        grant = make_grant(ns, 6, days=10)
    apply_pending()
    core.create_namespaced_pod("vision", pod_body("train", "gpu-0", gpus=2))
    wait_for(lambda: core.read_namespaced_pod("train", "vision").status.phase == "Running")
    assert sync_cluster(sim_cluster).status == "succeeded"
    node = sim_cluster.nodes.get(name="gpu-0")
    states = make_telemetry(node, 8)
    for g in states[:2]:
        g.processes = [{"pid": 7, "used_memory_mib": 900, "pod": "vision/train"}]
        g.save()
    for g in states:
        fill_5m(g, T0 - timedelta(days=3), T0 + timedelta(days=3), 1)
    retention.rollup_hours(T0 + timedelta(days=3), hours=24 * 6)  # closed hours: hourly points
    policy = ReclaimPolicy.objects.create(
        cluster=sim_cluster, enabled=True, idle_hours=12, grace_hours=24, hold_hours=48
    )
    return {**setup, "grant": grant, "policy": policy, "manager": manager, "states": states}


def run_at(when):
    with time_machine.travel(when, tick=False):
        summary.refresh(summary_cluster(), when, force=True)
        return reclaim.run(when)


def summary_cluster():
    return GpuState.objects.values_list("node__cluster_id", flat=True).first()


def test_warning_grace_and_lowering_to_what_pods_hold(
    world, client, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        counts = run_at(T0)
    assert counts["warned"] == 1
    r = GrantReclaim.objects.get()
    assert (r.status, r.granted, r.unused) == ("warned", 6, 4)  # 2 held by the pod
    assert r.basis["held_now"] == 2 and r.basis["busy_peak"] == 0
    assert r.grace_ends_at == T0 + timedelta(hours=24)
    notice = Notification.objects.get(recipient=world["alice"], event="reclaim")
    assert "4 idle nvidia.com/gpu" in notice.title
    assert any("still needed" in m.body for m in mailoutbox)
    # Nothing happens during the grace; a second pass does not warn twice.
    assert run_at(T0 + timedelta(hours=23)) == {
        "warned": 0, "lowered": 0, "withdrawn": 0, "waiting": 0
    }  # fmt: skip
    client.force_login(world["alice"])
    page = client.get(reverse("quotas:teams")).content.decode()
    assert f'id="reclaim-{r.pk}"' in page and "4 of the 6" in page
    assert "Still needed" not in page  # a member cannot answer; managers can

    assert run_at(T0 + timedelta(hours=25))["lowered"] == 1
    r.refresh_from_db()
    assert (r.status, r.lowered_by) == ("lowered", 4)
    world["grant"].refresh_from_db()
    assert world["grant"].end_reason == "reclaimed"
    rest = Grant.objects.get(ended_at__isnull=True)
    assert (rest.amount, rest.ends_at) == (2, world["grant"].ends_at)
    assert Operation.objects.filter(reason="reclaim", status="pending").exists()
    with time_machine.travel(T0 + timedelta(hours=25), tick=False):
        apply_pending()
    assert hard(world["core"]) == {"requests.nvidia.com/gpu": "2"}  # what kubectl shows
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"reclaim.warned", "grant.reclaimed", "reclaim.lowered"} <= actions
    assert Notification.objects.filter(event="reclaim", title__contains="went back").exists()
    # Nothing is left to take: the pod's 2 GPUs stay.
    assert run_at(T0 + timedelta(hours=26))["warned"] == 0


def test_still_needed_holds_the_grant_and_the_warning_comes_back_after_the_hold(world, client):
    run_at(T0)
    r = GrantReclaim.objects.get()
    with pytest.raises(PermissionError):
        rules.answer(r, world["alice"], WHY, T0 + timedelta(hours=1))  # a member
    with pytest.raises(ValidationError):
        rules.answer(r, world["manager"], "   ", T0 + timedelta(hours=1))
    client.force_login(world["manager"])
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        page = client.get(reverse("quotas:teams")).content.decode()
        assert "Still needed" in page
        response = client.post(reverse("quotas:reclaim-answer", args=[r.pk]), {"reason": WHY})
    assert response.status_code == 302
    r.refresh_from_db()
    assert (r.status, r.reason, r.answered_by) == ("held", WHY, world["manager"])
    assert r.held_until == T0 + timedelta(hours=2 + 48)
    assert AuditEvent.objects.filter(action="reclaim.still_needed", note=WHY).exists()
    # The grace ends: held, nothing lowered.
    assert run_at(T0 + timedelta(hours=30))["lowered"] == 0
    assert Grant.objects.get(ended_at__isnull=True).amount == 6
    # Admins see the answer.
    client.force_login(world["admin"])
    page = client.get(reverse("telemetry:reclaim")).content.decode()
    assert WHY in page and "still needed" in page
    # The hold ends and the GPUs are still idle: a new warning, with a new grace.
    counts = run_at(T0 + timedelta(hours=51))
    assert (counts["withdrawn"], counts["warned"]) == (1, 1)
    again = GrantReclaim.objects.get(status="warned")
    assert again.grace_ends_at == T0 + timedelta(hours=51 + 24)
    # Answering after the grace is a conflict.
    with pytest.raises(ValidationError) as err:
        rules.answer(again, world["manager"], WHY, T0 + timedelta(hours=80))
    assert "Too late" in str(err.value)


def test_busy_hours_protect_what_was_used_and_use_withdraws_the_warning(world):
    states = world["states"]
    # The pod ran on 4 GPUs (busy) until 14 hours before T0: outside a 12-hour window.
    run_at(T0)
    assert GrantReclaim.objects.get().unused == 4
    # In the grace the team works again: 2 GPUs busy at 60 % for the last hours.
    for g in states[:2]:
        g.processes = [{"pid": 7, "used_memory_mib": 900, "pod": "vision/train"}]
    from telemetry.models import GpuHistory5m

    GpuHistory5m.objects.filter(gpu__in=states[:2], bucket__gte=T0 + timedelta(hours=10)).update(
        util_sum=20 * 60, util_max=60
    )
    retention.rollup_hours(T0 + timedelta(days=3), hours=24 * 6)
    counts = run_at(T0 + timedelta(hours=25))
    # The busy hours' 2 GPUs are what the pod holds: still 4 unused, lowered.
    assert counts["lowered"] == 1
    assert Grant.objects.get(ended_at__isnull=True).amount == 2


def test_a_busy_peak_above_what_is_held_now_is_kept(world, sim_cluster):
    states = world["states"]
    from telemetry.models import GpuHistory5m

    # Earlier in the window the pod held 4 GPUs, busy at 80 %; now it holds 2.
    for g in states[2:4]:
        g.processes = [{"pid": 9, "used_memory_mib": 900, "pod": "vision/train"}]
        g.save()
    GpuHistory5m.objects.filter(
        gpu__in=states[:4], bucket__gte=T0 - timedelta(hours=8), bucket__lt=T0 - timedelta(hours=6)
    ).update(util_sum=20 * 80, util_max=80)
    retention.rollup_hours(T0 + timedelta(days=3), hours=24 * 6)
    with time_machine.travel(T0, tick=False):
        summary.refresh(sim_cluster.pk, T0, force=True)
    for g in states[2:4]:
        g.processes = []
        g.save()
    with time_machine.travel(T0, tick=False):
        found, _ = reclaim.findings(T0)
    [f] = found
    assert (f.basis["busy_peak"], f.basis["held_now"], f.unused) == (4, 2, 2)


def test_never_on_a_cluster_without_telemetry(world, sim_cluster, client):
    GpuState.objects.all().delete()
    from telemetry.models import NodeTelemetry

    NodeTelemetry.objects.all().delete()
    with time_machine.travel(T0, tick=False):
        assert reclaim.run(T0)["warned"] == 0
        [state] = reclaim.policy_states(T0)
    assert state["state"].startswith("not measured")
    client.force_login(world["admin"])
    with time_machine.travel(T0, tick=False):
        page = client.get(reverse("telemetry:reclaim")).content.decode()
    assert "not measured" in page


def test_missing_hours_neither_lower_nor_withdraw(world, sim_cluster):
    run_at(T0)
    r = GrantReclaim.objects.get()
    # Telemetry began late: its hourly rows cover less than the window (a new computation
    # from scratch, as after the rows were lost).
    from telemetry.models import ClusterSummary, UsageHour

    ClusterSummary.objects.all().delete()
    UsageHour.objects.all().delete()
    later = T0 + timedelta(hours=40)
    with time_machine.travel(later, tick=False):
        from django.test import override_settings

        with override_settings(TELEMETRY_USAGE_BACKFILL_HOURS=3):
            summary.refresh(sim_cluster.pk, later, force=True)
            counts = reclaim.run(later)
    assert counts == {"warned": 0, "lowered": 0, "withdrawn": 0, "waiting": 1}
    r.refresh_from_db()
    assert r.status == "warned"
    assert Grant.objects.get(ended_at__isnull=True).amount == 6


def test_policy_is_off_by_default_and_turning_it_off_withdraws(world, sim_cluster):
    assert ReclaimPolicy().enabled is False
    run_at(T0)
    r = GrantReclaim.objects.get()
    with pytest.raises(PermissionError):
        rules.set_policy(sim_cluster, None, world["alice"], enabled=False)
    rules.set_policy(sim_cluster, None, world["admin"], enabled=False)
    r.refresh_from_db()
    assert (r.status, r.note) == ("withdrawn", "the policy was turned off")
    assert run_at(T0 + timedelta(hours=30)) == {
        "warned": 0, "lowered": 0, "withdrawn": 0, "waiting": 0
    }  # fmt: skip
    assert AuditEvent.objects.filter(action="reclaim.policy_set").exists()


def test_a_gap_in_the_telemetry_stops_the_policy(world, sim_cluster):
    from telemetry.models import GpuHistory1h, GpuHistory5m

    # The agent of gpu-0 did not report for an hour of the window.
    gap = T0.replace(minute=0) - timedelta(hours=5)
    for model in (GpuHistory5m, GpuHistory1h):
        model.objects.filter(bucket__gte=gap, bucket__lt=gap + timedelta(hours=1)).delete()
    assert run_at(T0)["warned"] == 0
    with time_machine.travel(T0, tick=False):
        [state] = reclaim.policy_states(T0)
    assert state["state"].startswith(f"its telemetry has a gap at {gap:%Y-%m-%d %H:%M} UTC")
    # Once the window has moved past the gap, the policy judges again.
    assert run_at(T0 + timedelta(hours=13))["warned"] == 1


def test_api_lists_answers_and_sets_policies(world, sim_cluster):
    from tests.conftest import api_for

    run_at(T0)
    r = GrantReclaim.objects.get()
    alice, manager = api_for(world["alice"]), api_for(world["manager"])
    listed = alice.get("/api/v1/reclaims/").json()["results"]
    assert [(x["id"], x["unused"], x["status"]) for x in listed] == [(str(r.pk), 4, "warned")]
    assert listed[0]["explanation"].startswith("4 of the 6 nvidia.com/gpu")
    stranger = api_for(make_user("zed"))
    assert stranger.get("/api/v1/reclaims/").json()["results"] == []
    assert stranger.get(f"/api/v1/reclaims/{r.pk}/").status_code == 404
    url = f"/api/v1/reclaims/{r.pk}/still-needed/"
    assert alice.post(url, {"reason": WHY}).status_code == 403
    assert manager.post(url, {}).status_code == 400
    assert manager.post(url, {"reason": WHY, "until": "never"}).status_code == 400
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        done = manager.post(url, {"reason": WHY})
        assert done.status_code == 200 and done.json()["status"] == "held"
        assert manager.post(url, {"reason": WHY}).status_code == 409
    admin = api_for(world["admin"])
    with time_machine.travel(T0, tick=False):
        [p] = alice.get("/api/v1/reclaim-policies/").json()["results"]
        assert (p["cluster"], p["enabled"], p["state"]) == ("sim", True, "judging")
        policy = {"cluster": "sim", "enabled": False}
        assert alice.post("/api/v1/reclaim-policies/", policy).status_code == 403
        assert admin.post("/api/v1/reclaim-policies/", {"cluster": "nope"}).status_code == 404
        bad_class = {"cluster": "sim", "gpu_class": "h100"}
        assert admin.post("/api/v1/reclaim-policies/", bad_class).status_code == 404
        assert (
            admin.post("/api/v1/reclaim-policies/", {**policy, "idle_hours": 0}).status_code == 400
        )
        off = admin.post("/api/v1/reclaim-policies/", policy)
    assert off.status_code == 200 and (off.json()["enabled"], off.json()["state"]) == (False, "off")
    r.refresh_from_db()
    assert r.status == "withdrawn"


def test_baselines_and_young_grants_cover_the_pods_first_and_are_never_lowered(world):
    """Pods' GPUs are covered by every grant of the class; only old request grants go."""
    ns = world["ns"]
    with time_machine.travel(T0 - timedelta(days=3), tick=False):
        baseline = make_grant(ns, 4, kind=Grant.Kind.BASELINE)
    with time_machine.travel(T0 - timedelta(hours=1), tick=False):
        young = make_grant(ns, 2, days=5)
    run_at(T0)
    r = GrantReclaim.objects.get()
    # 12 granted, the pod holds 2: 10 unused, of which the old request grant gives its 6.
    assert (r.granted, r.unused, r.basis["reclaimable"]) == (12, 6, 6)
    assert run_at(T0 + timedelta(hours=25))["lowered"] == 1
    world["grant"].refresh_from_db()
    assert world["grant"].end_reason == "reclaimed"
    assert set(Grant.objects.filter(ended_at__isnull=True)) == {baseline, young}
    assert not Grant.objects.filter(ended_at__isnull=True, amount=0).exists()


def test_pods_taking_the_gpus_in_the_grace_withdraw_the_warning(world, sim_cluster):
    run_at(T0)
    core = world["core"]
    core.create_namespaced_pod("vision", pod_body("eval", "gpu-0", gpus=4))
    wait_for(lambda: core.read_namespaced_pod("eval", "vision").status.phase == "Running")
    assert sync_cluster(sim_cluster).status == "succeeded"
    assert run_at(T0 + timedelta(hours=3))["withdrawn"] == 1
    r = GrantReclaim.objects.get()
    assert (r.status, r.note) == ("withdrawn", "its GPUs are in use again")
    assert Grant.objects.get(ended_at__isnull=True).amount == 6


def test_a_grant_ending_in_the_grace_withdraws_the_warning(world):
    from quotas.tasks import process_grant_windows

    run_at(T0)
    Grant.objects.filter(pk=world["grant"].pk).update(ends_at=T0 + timedelta(hours=2))
    with time_machine.travel(T0 + timedelta(hours=3), tick=False):
        assert process_grant_windows()["expired"] == 1
    assert run_at(T0 + timedelta(hours=4))["withdrawn"] == 1
    r = GrantReclaim.objects.get()
    assert (r.status, r.note) == ("withdrawn", "its grants ended or were released")
