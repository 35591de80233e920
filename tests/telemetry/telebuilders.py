"""Builders for telemetry rows (latest state and history), written through the models."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from telemetry.models import GpuHistory1h, GpuHistory5m, GpuState, NodeTelemetry


def make_telemetry(node, gpus: int = 2, *, stale: bool = False, **kw) -> list[GpuState]:
    now = timezone.now()
    stale_after = now - timedelta(minutes=1) if stale else now + timedelta(minutes=1)
    fields = {
        "driver_version": "550.107.02",
        "agent_version": "0.1.0",
        "gpu_count": gpus,
        "last_report_at": now,
        "last_report_timestamp": now,
        "stale_after": stale_after,
    }
    fields.update(kw)
    NodeTelemetry.objects.update_or_create(node=node, defaults=fields)
    return [
        GpuState.objects.create(
            node=node,
            index=i,
            uuid=f"GPU-{node.name}-{i}",
            name="NVIDIA A100-SXM4-80GB",
            memory_total_mib=81920,
            memory_used_mib=1000,
            utilization_gpu_pct=0,
            temperature_c=40,
            power_w=60.0,
            reported_at=now,
            stale_after=stale_after,
        )
        for i in range(gpus)
    ]


def bucket5(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0) - timedelta(minutes=t.minute % 5)


def fill_5m(gpu, start: datetime, end: datetime, util) -> None:
    """5-minute points for [start, end) with utilisation ``util(bucket)`` (20 samples each)."""
    t = bucket5(start)
    rows = []
    while t < end:
        u = util(t) if callable(util) else util
        rows.append(
            GpuHistory5m(
                gpu=gpu,
                bucket=t,
                samples=20,
                util_sum=20 * u,
                util_n=20,
                util_max=u,
                mem_used_sum=20 * 1000,
                mem_n=20,
                temp_max=50,
                power_sum=20 * 100.0,
                power_n=20,
            )
        )
        t += timedelta(minutes=5)
    GpuHistory5m.objects.bulk_create(rows)


def fill_1h(gpu, start: datetime, end: datetime, util) -> None:
    t = start
    rows = []
    while t < end:
        u = util(t) if callable(util) else util
        rows.append(
            GpuHistory1h(
                gpu=gpu,
                bucket=t,
                samples=240,
                util_sum=240 * u,
                util_n=240,
                util_max=u,
                mem_used_sum=240 * 1000,
                mem_n=240,
                temp_max=50,
                power_sum=240 * 100.0,
                power_n=240,
            )
        )
        t += timedelta(hours=1)
    GpuHistory1h.objects.bulk_create(rows)
