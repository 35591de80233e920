"""Telemetry figures computed before anyone asks (telemetry/summary.py): the beat's rows
are what every page, the API and /metrics show until the next computation; a reader
computes a row that is missing, too old or of other settings; hours that can no longer
change are kept from the previous row; a page reads no raw history."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise

import pytest
from django.db import connection
from django.db.models import F
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.health import REGISTRY
from quotas.models import Team
from telemetry import retention, summary, tasks
from telemetry.models import (
    ClusterSummary,
    GpuHistory1h,
    GpuHistory5m,
    GpuState,
    PrometheusSource,
)
from telemetry.showback import parse_month
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team, make_user

from .telebuilders import fill_5m, make_telemetry

pytestmark = pytest.mark.django_db

OLD = timezone.now() - timedelta(days=1)
PRODUCT = "NVIDIA-A100-SXM4-80GB"


@pytest.fixture
def world():
    cluster = make_cluster("c1")
    node = make_node(cluster, "gpu-a", gpus=2)
    admin, member = make_user("ada", staff=True), make_user("mia")
    make_namespace(make_team("vision", members=[member]), cluster, "ml-vision")
    g0, g1 = make_telemetry(node, 2)
    g0.processes = [{"pid": 42, "used_memory_mib": 1234, "pod": "ml-vision/train-0"}]
    g0.save()
    make_pod(node, "train-0", "ml-vision", 1, k8s_created_at=OLD)
    now = timezone.now()
    fill_5m(g0, now - timedelta(hours=3), now, 0)
    fill_5m(g1, now - timedelta(hours=3), now, 70)
    return {"cluster": cluster, "node": node, "admin": admin, "member": member, "gpus": (g0, g1)}


def _html(client, user, url) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def _idle_gauge() -> float:
    return sum(
        s.value for m in REGISTRY.collect() if m.name == "portal_idle_gpus" for s in m.samples
    )


def _make_busy(gpu) -> None:
    GpuHistory5m.objects.filter(gpu=gpu).update(util_sum=20 * 90, util_max=90)


def test_every_reader_shows_the_stored_figures_until_the_next_computation(client, world):
    assert tasks.refresh_summaries() == {"c1": pytest.approx(0.0, abs=30)}
    row = ClusterSummary.objects.get(cluster=world["cluster"])
    assert [a["pod"] for a in row.data["idle"]] == ["train-0"]
    _make_busy(world["gpus"][0])  # the pod's GPU works now: not idle any more
    idle_url = reverse("telemetry:idle")
    html = _html(client, world["admin"], idle_url)
    assert "train-0" in html and "figures as of" in html  # the stored row, with its time
    api = client.get("/api/v1/idle-allocations/").json()
    assert [r["pod"] for r in api["results"]] == ["train-0"] and api["as_of"]
    assert _idle_gauge() == 1

    tasks.refresh_summaries()  # the next beat
    assert "train-0" not in _html(client, world["admin"], idle_url)
    assert client.get("/api/v1/idle-allocations/").json()["results"] == []
    assert _idle_gauge() == 0
    team = _html(client, world["member"], reverse("telemetry:team", args=["vision"]))
    assert "No idle allocation" in team or "train-0" not in team


def test_a_reader_computes_a_row_the_beat_left_too_old(client, world):
    summary.refresh(world["cluster"].pk)
    _make_busy(world["gpus"][0])
    old = timezone.now() - timedelta(seconds=301)
    ClusterSummary.objects.update(computed_at=old)
    assert "train-0" not in _html(client, world["admin"], reverse("telemetry:idle"))
    assert ClusterSummary.objects.get().computed_at > old


def test_a_row_of_another_idle_threshold_is_computed_again(client, world):
    summary.refresh(world["cluster"].pk)
    assert len(summary.read().idle) == 1
    with override_settings(TELEMETRY_IDLE_THRESHOLD_PCT=0):  # nothing is under 0 %
        assert summary.read().idle == []
    assert len(summary.read().idle) == 1


def test_settled_hours_are_kept_and_recent_ones_read_again(world):
    g0, g1 = world["gpus"]
    now = timezone.now()
    GpuHistory5m.objects.all().delete()
    for g in (g0, g1):
        fill_5m(g, now - timedelta(hours=12), now, 50)
    retention.rollup_hours(now, hours=12)
    summary.refresh(world["cluster"].pk, now)
    hours = summary.read(now=now).series[PRODUCT]
    top = now.replace(minute=0, second=0, microsecond=0)
    settled, recent = top - timedelta(hours=8), top - timedelta(hours=1)
    assert hours[settled][0] / hours[settled][1] == pytest.approx(50)
    # History changes after the computation: an old hour (as retention never does) and
    # the last closed one (as a late agent report does).
    for bucket in (settled, recent):
        GpuHistory1h.objects.filter(bucket=bucket).update(util_sum=F("util_n") * 10)
    GpuHistory5m.objects.filter(bucket__gte=recent).update(util_sum=20 * 10)
    later = now + timedelta(minutes=1)
    summary.refresh(world["cluster"].pk, later)
    hours = summary.read(now=later).series[PRODUCT]
    assert hours[settled][0] / hours[settled][1] == pytest.approx(50)  # kept, not re-read
    assert hours[recent][0] / hours[recent][1] == pytest.approx(10)  # read again


def test_pages_read_no_raw_history_or_pods_once_the_rows_exist(client, world):
    for _ in range(20):  # the first computation writes a day; the next ones the days before
        tasks.refresh_summaries()
        if ClusterSummary.objects.get(cluster=world["cluster"]).data["usage_complete"]:
            break
    client.force_login(world["admin"])
    # (My teams reads its own pods' figures, not telemetry's: only history counts there.)
    for url, tables in (
        (reverse("telemetry:fleet"), ("telemetry_gpuhistory", "inventory_gpupod")),
        (reverse("telemetry:idle"), ("telemetry_gpuhistory", "inventory_gpupod")),
        ("/api/v1/idle-allocations/", ("telemetry_gpuhistory", "inventory_gpupod")),
        (reverse("telemetry:showback"), ("telemetry_gpuhistory", "inventory_gpupod")),
        (reverse("quotas:teams"), ("telemetry_gpuhistory",)),
    ):
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        raw = [q["sql"][:120] for q in ctx.captured_queries if any(t in q["sql"] for t in tables)]
        assert raw == [], url


def test_the_idle_page_shows_50_allocations_a_page(client, world):
    now = timezone.now()
    for n in range(26):  # 52 more idle pods, attributed by their requests
        node = make_node(world["cluster"], f"idle-{n}", gpus=2)
        for g in make_telemetry(node, 2):
            fill_5m(g, now - timedelta(hours=3), now, 0)
        for i in range(2):
            make_pod(node, f"idle-{n}-{i}", "ml-vision", 1, k8s_created_at=OLD)
    url = reverse("telemetry:idle")
    first = _html(client, world["admin"], url)
    assert "53 allocations holding 53 GPUs" in first and "Page 1 of 2" in first
    assert first.count("<td><code>ml-vision</code></td>") == 50
    second = _html(client, world["admin"], url + "?page=2")
    assert second.count("<td><code>ml-vision</code></td>") == 3


def test_a_cluster_that_changes_source_is_computed_again_from_nothing(world):
    summary.refresh(world["cluster"].pk)
    assert summary.read().series[PRODUCT]
    PrometheusSource.objects.create(cluster=world["cluster"], url="http://127.0.0.1:9",
                                    timeout_seconds=2)  # fmt: skip
    figures = summary.read()
    row = ClusterSummary.objects.get()
    assert row.data["definition"][2] == "prometheus"
    assert "connection refused" in row.data["outages"][0]  # port 9: recorded in the row
    assert figures.series == {} and figures.idle == []  # no agent figure kept


# -- GPU-hours per namespace and hour (UsageHour) ------------------------------------------


def _month_world(world):
    """12 hours of g0 at 50 % for train-0 in the middle of the month, hourly points rolled
    up; the figures computed at ``now``."""
    g0, _ = world["gpus"]
    now = parse_month(None)[1] + timedelta(days=14, hours=12)
    GpuHistory5m.objects.all().delete()
    fill_5m(g0, now - timedelta(hours=12), now, 50)
    retention.rollup_hours(now, hours=13)
    summary.refresh(world["cluster"].pk, now)
    _, start, end = parse_month(None, now)
    return now, start, end


def _vision_used(world, start, end, now) -> tuple[float, float]:
    from telemetry.showback import ledger

    led = ledger([Team.objects.get(slug="vision")], start, end, now)
    return tuple(sum(cell[i] for cell in led.used.values()) for i in (0, 1))


def test_the_hours_are_rewritten_once_per_usage_interval(world):
    now, start, end = _month_world(world)
    allocated, _ = _vision_used(world, start, end, now)
    GpuState.objects.filter(pk=world["gpus"][0].pk).update(processes=[])
    for minutes, expect in ((1, allocated), (4, allocated)):  # within 5 minutes: kept
        at = now + timedelta(minutes=minutes)
        summary.refresh(world["cluster"].pk, at)
        assert _vision_used(world, start, end, at)[0] == pytest.approx(expect)
    at = now + timedelta(minutes=5)
    summary.refresh(world["cluster"].pk, at)
    assert _vision_used(world, start, end, at)[0] < allocated


def test_showback_reads_the_hours_written_by_the_computation(world):
    now, start, end = _month_world(world)
    allocated, busy = _vision_used(world, start, end, now)
    g0 = world["gpus"][0]
    hours = GpuHistory1h.objects.filter(gpu=g0, bucket__lt=now).count()
    assert allocated == pytest.approx(hours + 0, abs=1.0) and busy == pytest.approx(allocated / 2)
    GpuHistory1h.objects.update(util_sum=0)  # history rewritten after the computation
    settled = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    GpuHistory5m.objects.filter(bucket__lt=settled).update(util_sum=0)
    # Settled hours are the stored rows, so their busy part stands.
    assert _vision_used(world, start, end, now) == pytest.approx((allocated, busy))


def test_showback_keeps_the_hours_of_a_pod_that_has_ended(world):
    from inventory.models import GpuPod

    now, start, end = _month_world(world)
    allocated, _ = _vision_used(world, start, end, now)
    GpuState.objects.filter(pk=world["gpus"][0].pk).update(processes=[])
    GpuPod.objects.filter(name="train-0").delete()  # the pod ended
    later = now + timedelta(minutes=6)  # past the usage interval (5 minutes)
    summary.refresh(world["cluster"].pk, later)
    kept, _ = _vision_used(world, start, end, later)
    # The hours before the rewritten ones (3 closed hours and the current one) were
    # written while the pod ran: they stay the team's (the current attribution alone
    # would give it nothing now).
    settled = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    hours = GpuHistory1h.objects.filter(gpu=world["gpus"][0], bucket__lt=settled).count()
    assert hours >= 8 and kept == pytest.approx(hours) and kept < allocated


def test_an_old_row_is_shown_while_another_process_computes_the_next(world):
    summary.refresh(world["cluster"].pk)
    old = timezone.now() - timedelta(seconds=301)
    ClusterSummary.objects.update(computed_at=old)
    other = connection.copy()  # another process's session holding the cluster's lock
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s, %s)", summary.lock_key(world["cluster"].pk))
        with connection.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '5s'")  # waiting would fail the test
        figures = summary.read()
        assert figures.computed_at[world["cluster"].pk] == old and len(figures.idle) == 1
    finally:
        other.close()
    assert summary.read().computed_at[world["cluster"].pk] > old  # lock free: computed


def test_the_beat_fills_the_hours_before_the_month_back_to_the_retention(world):
    """Each of the beat's computations writes one more day of GPU-hours before the rows
    begin (a span twice as long after one without history) back to the hourly points'
    retention; showback of those days then reads the rows, no raw history, and shows what
    it read from history before."""
    g0, _ = world["gpus"]
    _, month_start, _ = parse_month(None)
    now = month_start + timedelta(hours=12)
    GpuHistory5m.objects.all().delete()
    fill_5m(g0, month_start - timedelta(days=2, hours=6), now, 50)  # 2.25 days before
    retention.rollup_hours(now, hours=3 * 24 + 13)
    before_month = parse_month(None, month_start - timedelta(days=1))
    _, start, end = before_month
    from_history = _vision_used(world, start, end, now)  # no rows yet: read from history
    assert from_history[0] == pytest.approx(54) and from_history[1] == pytest.approx(27)

    cluster_id, since = world["cluster"].pk, []
    for minute in range(30):
        row = summary.refresh(cluster_id, now + timedelta(minutes=minute))
        back = (month_start.timestamp() - row.data["usage_since"]) / 86400  # days
        since.append((back, row.data.get("usage_complete")))
        if since[-1][1]:
            break
    # The first computation writes the last day (from 12 h before the month), then a day
    # at a time while there is history (it begins 2.25 days before the month), then 2, 4,
    # 8, ... days until a year back (the hourly points' retention).
    assert [d for d, _ in since[:6]] == [1.5, 2.5, 3.5, 5.5, 9.5, 17.5]
    assert since[-1][0] > 364 and len(since) <= 20
    # never more than 28 days a step: the Prometheus source refuses over 31 days a query
    assert max(b - a for (a, _), (b, _) in pairwise(since)) <= 28
    with CaptureQueriesContext(connection) as ctx:
        from_rows = _vision_used(world, start, end, now + timedelta(minutes=minute))
    assert from_rows == pytest.approx(from_history)
    assert not [q for q in ctx.captured_queries if "gpuhistory" in q["sql"]]
