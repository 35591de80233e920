"""The demo fleet's history backfill: charts, sparklines, showback and the idle insight
have data at once, through the ingest and rollup code; a rerun writes nothing twice; the
unhealthy GPU is named on the node page."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from inventory.health import node_badges
from telemetry import insight, showback
from telemetry.models import GpuHistory1h, GpuHistory5m, GpuState
from telemetry.views import _hours, node_gpu_context
from telemetry.visibility import PodNames
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

SPEC = {
    # Both GPUs allocated to one pod and idle: the idle insight's candidate.
    "gpu-a": {"token": "x", "product": "NVIDIA-A100-SXM4-80GB", "gpus": 2,
              "patterns": ["idle", "idle"]},
    # A training node whose device plugin marked one device unhealthy.
    "gpu-b": {"token": "y", "product": "NVIDIA-H100-80GB-HBM3", "gpus": 2,
              "patterns": ["busy", "busy"], "unhealthy": 1},
}  # fmt: skip


@pytest.fixture
def world(tmp_path):
    cluster = make_cluster("demo")
    a = make_node(cluster, "gpu-a", gpus=2)
    b = make_node(
        cluster, "gpu-b", product="NVIDIA-H100-80GB-HBM3", gpus=2,
        resources={"nvidia.com/gpu": (2, 1, 1)},
    )  # fmt: skip
    admin = make_user("ada", staff=True)
    vision = make_team("vision")
    make_namespace(vision, cluster, "ml-vision")
    old = timezone.now() - timedelta(days=3)
    make_pod(a, "notebook", "ml-vision", 2, k8s_created_at=old)
    make_pod(b, "train", "ml-vision", 1, k8s_created_at=old)
    tokens = tmp_path / "agent-tokens.json"
    tokens.write_text(json.dumps(SPEC))
    call_command("backfill_telemetry", "--days", "2", "--tokens", str(tokens))
    return {"cluster": cluster, "a": a, "b": b, "admin": admin, "vision": vision,
            "tokens": tokens}  # fmt: skip


def test_charts_sparklines_showback_and_idle_have_data(world):
    a, b, admin = world["a"], world["b"], world["admin"]
    # 24 h of 5-minute points on every GPU card: ~288 points per sparkline.
    ctx = node_gpu_context(a, PodNames(admin))
    assert len(ctx["cards"]) == 2
    for card in ctx["cards"]:
        assert card["util"].points >= 285 and card["temp"].points >= 285
        assert card["mem"].points >= 285
    busy = node_gpu_context(b, PodNames(admin))["cards"][0]
    assert busy["util"].points >= 285
    # Hourly points rolled up for each of the last 24 hours (the fleet/team charts).
    now = timezone.now()
    hours = set(
        GpuHistory1h.objects.filter(gpu__node=a, bucket__gte=_hours(now)[0]).values_list(
            "bucket", flat=True
        )
    )
    assert len(hours) >= 23
    # Showback: allocated and busy GPU-hours for the team over the backfilled days.
    led = showback.ledger([world["vision"]], now - timedelta(days=2), now, now=now)
    row = next(r for r in showback.rows(led) if r.resource == "nvidia.com/gpu")
    assert row.allocated_hours > 40  # 2 GPUs of gpu-a + 1 of gpu-b's healthy one, ~2 days
    assert 0 < row.busy_hours < row.allocated_hours
    # The idle insight flags the notebook holding two idle GPUs, and not the training.
    idle = insight.idle_allocations()
    assert [(x.node.name, x.pod) for x in idle] == [("gpu-a", "notebook")]


def test_rerun_is_idempotent(world):
    before = (
        GpuHistory5m.objects.count(),
        sum(GpuHistory5m.objects.values_list("samples", flat=True)),
    )
    call_command("backfill_telemetry", "--days", "2", "--tokens", str(world["tokens"]))
    after = (
        GpuHistory5m.objects.count(),
        sum(GpuHistory5m.objects.values_list("samples", flat=True)),
    )
    assert after == before
    assert max(GpuHistory5m.objects.values_list("samples", flat=True)) == 1


def test_unhealthy_gpu_is_named_on_node_page_and_api(client, world):
    b = world["b"]
    lost = GpuState.objects.get(node=b, index=1)
    assert lost.lost and lost.uuid.startswith("GPU-")  # UUID known from before it was lost
    client.force_login(world["admin"])
    html = client.get(reverse("inventory:node", args=[b.pk])).content.decode()
    assert "Unhealthy GPU 1" in html
    assert f"GPU 1 ({lost.uuid}): the agent reports it lost" in html
    body = client.get(f"/api/v1/nodes/{b.pk}/").json()
    badge = next(x for x in body["health"] if x["code"] == "unhealthy-gpu")
    assert lost.uuid in badge["detail"] and badge["label"] == "Unhealthy GPU 1"


def test_unhealthy_without_agent_says_why_unnamed(world):
    c = make_node(world["cluster"], "gpu-c", gpus=4, resources={"nvidia.com/gpu": (4, 3, 0)})
    (badge,) = [x for x in node_badges(c) if x.code == "unhealthy-gpu"]
    assert badge.label == "Unhealthy GPU"
    assert "does not say which" in badge.detail and "no node agent" in badge.detail
