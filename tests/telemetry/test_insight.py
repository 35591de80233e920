"""Idle detection, attribution, showback arithmetic, renewal utilisation, the idle gauge
and health signals, on crafted telemetry rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from inventory.models import NodeResource
from quotas.models import Grant, QuotaRequest
from telemetry import health, insight, renewals, retention, showback, summary
from telemetry.models import GpuState, NodeTelemetry
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team, make_user

from .telebuilders import fill_1h, fill_5m, make_telemetry

pytestmark = pytest.mark.django_db

OLD = timezone.now() - timedelta(days=1)


@pytest.fixture
def node():
    return make_node(make_cluster("c1"), "gpu-a", gpus=2)


def _running(node, name, ns="ml-vision", gpus=1):
    return make_pod(node, name, ns, gpus, k8s_created_at=OLD)


# -- idle -----------------------------------------------------------------------------------


def test_idle_allocation_listed_and_busy_hour_not(node):
    now = timezone.now()
    g0, g1 = make_telemetry(node, 2)
    g0.processes = [{"pid": 1, "used_memory_mib": 500, "pod": "ml-vision/idle-0"}]
    g1.processes = [{"pid": 2, "used_memory_mib": 500, "pod": "ml-nlp/busy-0"}]
    GpuState.objects.bulk_update([g0, g1], ["processes"])
    _running(node, "idle-0", "ml-vision")
    _running(node, "busy-0", "ml-nlp")
    fill_5m(g0, now - timedelta(hours=3), now, 2)  # under 5 % throughout
    # Idle except one busy hour inside the window.
    busy = (now - timedelta(hours=1, minutes=30), now - timedelta(minutes=30))
    fill_5m(g1, now - timedelta(hours=3), now, lambda t: 80 if busy[0] <= t < busy[1] else 1)

    idle = insight.idle_allocations(now=now)

    assert [(a.namespace, a.pod, a.method, a.gpu_indexes) for a in idle] == [
        ("ml-vision", "idle-0", "agent", [0])
    ]
    assert idle[0].max_util_pct == pytest.approx(2.0)


def test_idle_threshold_and_window_are_settings(node, settings):
    now = timezone.now()
    (g0,) = make_telemetry(node, 1)
    _running(node, "p", gpus=1)
    fill_5m(g0, now - timedelta(hours=5), now, 8)
    assert insight.idle_allocations(now=now) == []
    settings.TELEMETRY_IDLE_THRESHOLD_PCT = 10
    assert len(insight.idle_allocations(now=now)) == 1
    settings.TELEMETRY_IDLE_WINDOW_HOURS = 8  # more than the 5 h of data: not judged
    assert insight.idle_allocations(now=now) == []


def test_requests_fallback_needs_every_candidate_idle(node):
    """Without agent attribution, two pods on a node with one busy GPU: nobody is listed;
    with both GPUs idle, both are."""
    now = timezone.now()
    g0, g1 = make_telemetry(node, 2)
    _running(node, "a", "ns-a")
    _running(node, "b", "ns-b")
    fill_5m(g0, now - timedelta(hours=3), now, 0)
    fill_5m(g1, now - timedelta(hours=3), now, 50)
    assert insight.idle_allocations(now=now) == []

    g1.delete()
    idle = insight.idle_allocations(now=now)
    assert sorted(a.pod for a in idle) == ["a", "b"]
    assert {a.method for a in idle} == {"requests"}


def test_young_pod_and_unreported_gpu_are_not_idle(node):
    now = timezone.now()
    g0, _g1 = make_telemetry(node, 2)
    make_pod(node, "fresh", "ns", 1, k8s_created_at=now - timedelta(minutes=10))
    fill_5m(g0, now - timedelta(hours=3), now, 0)
    assert insight.idle_allocations(now=now) == []


def test_attribution_shares_follow_requests(node):
    make_telemetry(node, 2)
    _running(node, "a", "ns-a", gpus=1)
    _running(node, "b", "ns-b", gpus=3)  # overcommitted node: 4 requested of 2
    att = insight.attribute()
    totals = {}
    for owners in att.shares.values():
        for key, share in owners.items():
            totals[key[1]] = totals.get(key[1], 0) + share
    assert totals == pytest.approx({"ns-a": 0.5, "ns-b": 1.5})


def test_idle_gauge(node):
    from prometheus_client import CollectorRegistry, generate_latest

    now = timezone.now()
    team = make_team("vision")
    make_namespace(team, node.cluster, "ml-vision")
    (g0, g1) = make_telemetry(node, 2)
    for g in (g0, g1):
        g.processes = [{"pid": 1, "used_memory_mib": 1, "pod": "ml-vision/train-0"}]
        g.save()
        fill_5m(g, now - timedelta(hours=3), now, 0)
    _running(node, "train-0", "ml-vision", gpus=2)
    registry = CollectorRegistry()
    registry.register(summary.IdleGpuCollector())
    text = generate_latest(registry).decode()
    assert 'portal_idle_gpus{cluster="c1",namespace="ml-vision",team="vision"} 2.0' in text


# -- showback -------------------------------------------------------------------------------


def test_month_parsing():
    assert showback.parse_month("2026-11")[1:] == (
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 12, 1, tzinfo=UTC),
    )
    assert showback.parse_month("2026-12")[2] == datetime(2027, 1, 1, tzinfo=UTC)
    for bad in ("2026-13", "26-11", "2026/11", "x"):
        with pytest.raises(showback.BadMonth):
            showback.parse_month(bad)


def test_showback_temporary_grant_crossing_month_boundary(node):
    team = make_team("vision")
    ns = make_namespace(team, node.cluster, "ml-vision")
    now = timezone.now()
    # 4 GPUs from 28 Oct 12:00 to 3 Nov 00:00 (a past year, so "now" does not cut it).
    year = now.year - 1
    Grant.objects.create(
        namespace=ns, resource="nvidia.com/gpu", amount=4,
        starts_at=datetime(year, 10, 28, 12, tzinfo=UTC),
        ends_at=datetime(year, 11, 3, tzinfo=UTC),
    )  # fmt: skip
    # Released early: counts up to ended_at.
    Grant.objects.create(
        namespace=ns, resource="nvidia.com/mig-1g.10gb", amount=2,
        starts_at=datetime(year, 10, 31, tzinfo=UTC),
        ends_at=datetime(year, 12, 1, tzinfo=UTC),
        ended_at=datetime(year, 11, 1, 6, tzinfo=UTC), end_reason="released",
    )  # fmt: skip
    _, s_oct, e_oct = showback.parse_month(f"{year}-10")
    _, s_nov, e_nov = showback.parse_month(f"{year}-11")
    oct_rows = {r.resource: r for r in showback.showback([team], s_oct, e_oct)}
    nov_rows = {r.resource: r for r in showback.showback([team], s_nov, e_nov)}
    assert oct_rows["nvidia.com/gpu"].granted_hours == 4 * (3 * 24 + 12)  # 28th 12:00 -> 1st
    assert nov_rows["nvidia.com/gpu"].granted_hours == 4 * 48
    assert oct_rows["nvidia.com/mig-1g.10gb"].granted_hours == 2 * 24
    assert nov_rows["nvidia.com/mig-1g.10gb"].granted_hours == 2 * 6
    assert nov_rows["nvidia.com/mig-1g.10gb"].allocated_hours is None


def test_showback_used_hours_from_history(node):
    team = make_team("vision")
    make_namespace(team, node.cluster, "ml-vision")
    g0, g1 = make_telemetry(node, 2)
    g0.processes = [{"pid": 1, "used_memory_mib": 1, "pod": "ml-vision/train-0"}]
    g0.save()
    _running(node, "train-0", "ml-vision", gpus=1)
    year = timezone.now().year - 1
    start = datetime(year, 11, 30, 20, tzinfo=UTC)
    fill_1h(g0, start, start + timedelta(hours=10), 50)  # 4 h in Nov, 6 h in Dec
    fill_1h(g1, start, start + timedelta(hours=10), 100)  # nobody's GPU
    _, s, e = showback.parse_month(f"{year}-11")
    (row,) = showback.showback([team], s, e)
    assert row.allocated_hours == pytest.approx(4.0)
    assert row.busy_hours == pytest.approx(2.0)
    assert row.busy_pct == pytest.approx(50.0)


# -- renewals -------------------------------------------------------------------------------


def test_renewal_utilisation(node):
    now = timezone.now()
    user = make_user("rita")
    team = make_team("vision", members=[user])
    ns = make_namespace(team, node.cluster, "ml-vision")
    begin = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    hours = (now - begin).total_seconds() / 3600
    grant = Grant.objects.create(
        namespace=ns, resource="nvidia.com/gpu", amount=2,
        starts_at=begin, ends_at=now + timedelta(days=1),
    )  # fmt: skip
    g0, _g1 = make_telemetry(node, 2)
    g0.processes = [{"pid": 1, "used_memory_mib": 1, "pod": "ml-vision/train-0"}]
    g0.save()
    _running(node, "train-0", "ml-vision", gpus=1)
    fill_5m(g0, begin, now, 0)
    retention.rollup_hours(now, hours=5)  # closed hours come from hourly points
    req = QuotaRequest.objects.create(
        team=team, namespace=ns, kind=QuotaRequest.Kind.RENEWAL, target_grant=grant,
        resource="nvidia.com/gpu", amount=2, starts_at=now, justification="more",
        requested_by=user,
    )  # fmt: skip
    req = QuotaRequest.objects.select_related("namespace", "target_grant").get(pk=req.pk)
    renewals.annotate_renewals([req], now=now)
    u = req.utilisation
    assert u.granted_gpu_hours == pytest.approx(2 * hours)
    # One of two granted GPUs held the whole time (5-minute points count whole).
    assert u.allocated_gpu_hours == pytest.approx(hours, abs=5 / 60)
    assert u.allocated_pct == pytest.approx(50, abs=3)
    assert u.busy_pct == 0
    assert u.idle_now == 1


# -- health ---------------------------------------------------------------------------------


def test_health_signals_each_triggered():
    now = timezone.now()
    cluster = make_cluster("c2")
    ok = make_node(cluster, "ok", gpus=1)
    skew = make_node(cluster, "skew", gpus=1)
    third = make_node(cluster, "third", gpus=1)
    make_telemetry(ok, 1)
    make_telemetry(third, 1)
    make_telemetry(skew, 1, driver_version="535.54.03")
    silent = make_node(cluster, "silent", gpus=1)
    make_telemetry(silent, 1, stale=True)
    broken = make_node(cluster, "broken", gpus=2, resources={"nvidia.com/gpu": (2, 1, 0)})
    lost, leaky = make_telemetry(broken, 2)
    GpuState.objects.filter(pk=lost.pk).update(lost=True)
    GpuState.objects.filter(pk=leaky.pk).update(
        memory_used_mib=4000, processes=[], mig_current=False, mig_pending=True
    )
    make_node(
        cluster, "mig", gpus=1, mig_config_state="pending",
        last_changed_at=now - timedelta(hours=2),
    )  # fmt: skip
    idle_node = make_node(cluster, "idle", gpus=1)
    (g,) = make_telemetry(idle_node, 1)
    _running(idle_node, "sleepy", "ns")
    fill_5m(g, now - timedelta(hours=3), now, 0)

    by_code = {}
    for s in health.fleet_signals(now):
        by_code.setdefault(s.code, set()).add(s.node.name)
    assert by_code == {
        "agent-driver-skew": {"skew"},
        "not-reporting": {"silent"},
        "unhealthy-gpu": {"broken"},
        "gpu-lost": {"broken"},
        "orphan-memory": {"broken"},
        "mig-mode-pending": {"broken"},
        "mig-stuck": {"mig"},
        "idle-allocation": {"idle"},
    }
    assert NodeTelemetry.objects.count() == 6
    assert NodeResource.objects.filter(node=broken).get().unhealthy == 1
