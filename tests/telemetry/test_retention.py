"""History rollup (5-minute -> hourly, exact and idempotent) and expiry, with frozen time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from telemetry import retention, tasks
from telemetry.models import AgentReport, GpuHistory1h, GpuHistory5m, GpuState, UsageHour
from tests.factories import make_cluster, make_node

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@pytest.fixture
def gpu():
    node = make_node(make_cluster("lab"), "a100-00")
    return GpuState.objects.create(node=node, index=0, reported_at=T0, stale_after=T0)


def point(gpu, bucket, *, util, n=1, mem=1000, temp=50, power=100.0):
    return GpuHistory5m.objects.create(
        gpu=gpu, bucket=bucket, samples=n, util_sum=util * n, util_n=n, util_max=util,
        mem_used_sum=mem * n, mem_n=n, temp_max=temp, power_sum=power * n, power_n=n,
    )  # fmt: skip


def test_rollup_sums_five_minute_points_into_exact_hourly_ones(gpu):
    for k in range(12):  # 10:00-10:55, utilisation 0, 10, ..., 110 capped at 100
        point(gpu, T0 + timedelta(minutes=5 * k), util=min(10 * k, 100), n=20, temp=40 + k)
    point(gpu, T0 + timedelta(hours=1), util=77)  # the next hour: separate point
    with time_machine.travel(T0 + timedelta(hours=2, minutes=3), tick=False):
        assert tasks.rollup_history() == 2
    hours = list(GpuHistory1h.objects.with_averages().order_by("bucket"))
    assert [h.bucket for h in hours] == [T0, T0 + timedelta(hours=1)]
    first = hours[0]
    assert first.samples == 240 and first.util_n == 240
    assert first.util_avg == pytest.approx(sum(min(10 * k, 100) for k in range(12)) / 12)
    assert (first.util_max, first.temp_max) == (100, 51)
    assert first.mem_used_avg_mib == pytest.approx(1000) and first.power_avg_w == 100.0
    assert hours[1].util_avg == 77


def test_rollup_skips_the_open_hour_and_is_idempotent_with_late_points(gpu):
    point(gpu, T0, util=10)
    now = T0 + timedelta(minutes=50)
    assert retention.rollup_hours(now) == 0  # 10:00 is still open
    now = T0 + timedelta(hours=1, minutes=5)
    assert retention.rollup_hours(now) == 1
    assert retention.rollup_hours(now) == 1
    assert GpuHistory1h.objects.get().samples == 1
    point(gpu, T0 + timedelta(minutes=55), util=30)  # a late report for 10:55
    retention.rollup_hours(now + timedelta(minutes=10))
    hour = GpuHistory1h.objects.with_averages().get()
    assert (hour.samples, hour.util_avg, hour.util_max) == (2, 20, 30)


def test_rollup_of_a_gpu_without_utilisation_keeps_nulls(gpu):
    GpuHistory5m.objects.create(gpu=gpu, bucket=T0, samples=3)
    retention.rollup_hours(T0 + timedelta(hours=1))
    hour = GpuHistory1h.objects.with_averages().get()
    assert (hour.samples, hour.util_avg, hour.util_max, hour.temp_max) == (3, None, None, None)


def test_expiry_honours_each_retention(gpu):
    now = T0 + timedelta(days=400)
    keep_5m = point(gpu, now - timedelta(days=29, hours=23), util=1)
    point(gpu, now - timedelta(days=30, minutes=5), util=1)
    GpuHistory1h.objects.create(gpu=gpu, bucket=now - timedelta(days=364))
    GpuHistory1h.objects.create(gpu=gpu, bucket=now - timedelta(days=366))
    AgentReport.objects.create(node=gpu.node, timestamp=now, received_at=now - timedelta(hours=1))
    AgentReport.objects.create(node=gpu.node, timestamp=now - timedelta(hours=3),
                               received_at=now - timedelta(hours=2, minutes=1))  # fmt: skip
    for days in (364, 366):
        UsageHour.objects.create(cluster=gpu.node.cluster, namespace="ml", allocated=1, busy=0,
                                 hour=now - timedelta(days=days))  # fmt: skip
    with time_machine.travel(now, tick=False):
        assert tasks.expire_history() == {"five_minute": 1, "hourly": 1, "report_keys": 1,
                                          "usage_hours": 1}  # fmt: skip
        assert tasks.expire_history() == {"five_minute": 0, "hourly": 0, "report_keys": 0,
                                          "usage_hours": 0}  # fmt: skip
    assert UsageHour.objects.get().hour == now - timedelta(days=364)
    assert list(GpuHistory5m.objects.all()) == [keep_5m]
    assert GpuHistory1h.objects.get().bucket == now - timedelta(days=364)
    assert AgentReport.objects.get().timestamp == now


def test_expiry_deletes_in_batches(gpu, monkeypatch):
    monkeypatch.setattr(retention, "DELETE_BATCH", 3)
    old = timezone.now() - timedelta(days=40)
    for k in range(7):
        point(gpu, old + timedelta(minutes=5 * k), util=1)
    assert retention.expire().five_minute == 7
    assert not GpuHistory5m.objects.exists()


def test_a_replayed_report_older_than_its_key_would_be_refused_anyway():
    # Keys live 2 hours; reports are accepted up to 1 hour old: a replay can't slip through.
    from telemetry.ingest import MAX_REPORT_AGE

    assert retention.REPORT_KEY_RETENTION > MAX_REPORT_AGE
