"""Showback and the idle insight per GPU class, weighted by the class's weight: per-class
split, weighted sums, any-class grants, per-class rows adding up to the per-team rows,
idle per class (costliest first), the API fields and schema, the pages and the CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from inventory.classes import refresh
from inventory.models import GpuClass
from quotas.models import Grant
from telemetry import classes, insight, showback
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team, make_user

from .telebuilders import fill_1h, fill_5m, make_telemetry

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
V100 = "Tesla-V100-SXM2-16GB"
YEAR = timezone.now().year - 1
NOV = datetime(YEAR, 11, 1, tzinfo=UTC)


def _hold(gpu, pod: str) -> None:
    gpu.processes = [{"pid": 1, "used_memory_mib": 1, "pod": pod}]
    gpu.save()


@pytest.fixture
def world():
    """Cluster c1: H100 node (weight 10), A100 node (weight 1.5), V100 node (no weight),
    2 GPUs each. Team vision (mia) holds GPU 0 of each through the agent; team nlp (otto)
    holds GPU 1 of the H100 node."""
    cluster = make_cluster("c1")
    h1 = make_node(cluster, "h1", product=H100, gpus=2)
    a1 = make_node(cluster, "a1", product=A100, gpus=2, resources={GPU: (2, 2, 0), MIG: (7, 7, 0)})
    v1 = make_node(cluster, "v1", product=V100, gpus=2)
    refresh(cluster)
    by_product = {c.selector["nvidia.com/gpu.product"]: c for c in GpuClass.objects.all()}
    GpuClass.objects.filter(pk=by_product[H100].pk).update(weight=Decimal("10"))
    GpuClass.objects.filter(pk=by_product[A100].pk).update(weight=Decimal("1.5"))
    member, outsider = make_user("mia"), make_user("otto")
    admin = make_user("ada", staff=True)
    vision = make_team("vision", members=[member])
    nlp = make_team("nlp", members=[outsider])
    ns = make_namespace(vision, cluster, "ml-vision")
    nlp_ns = make_namespace(nlp, cluster, "ml-nlp")
    gpus = {}
    for node in (h1, a1, v1):
        g0, g1 = make_telemetry(node, 2)
        _hold(g0, f"ml-vision/train-{node.name}")
        gpus[node.name] = (g0, g1)
    _hold(gpus["h1"][1], "ml-nlp/nlp-0")
    return {
        "cluster": cluster, "nodes": {"h1": h1, "a1": a1, "v1": v1}, "gpus": gpus,
        "h100": GpuClass.objects.get(pk=by_product[H100].pk),
        "a100": GpuClass.objects.get(pk=by_product[A100].pk),
        "v100": by_product[V100], "member": member, "outsider": outsider, "admin": admin,
        "vision": vision, "nlp": nlp, "ns": ns, "nlp_ns": nlp_ns,
    }  # fmt: skip


def _pods(world, since):
    for name, node in world["nodes"].items():
        make_pod(node, f"train-{name}", "ml-vision", 1, k8s_created_at=since)
    make_pod(world["nodes"]["h1"], "nlp-0", "ml-nlp", 1, k8s_created_at=since)


def _november(world):
    """History and grants of November last year (hourly points, closed hours)."""
    _pods(world, timezone.now() - timedelta(days=1))
    g = world["gpus"]
    fill_1h(g["h1"][0], NOV, NOV + timedelta(hours=10), 50)  # vision: 10 h at 50 %
    fill_1h(g["a1"][0], NOV, NOV + timedelta(hours=4), 100)  # vision: 4 h at 100 %
    fill_1h(g["v1"][0], NOV, NOV + timedelta(hours=2), 25)  # vision: 2 h, no weight
    fill_1h(g["h1"][1], NOV, NOV + timedelta(hours=3), 100)  # nlp: 3 h
    ns = world["ns"]

    def grant(amount, hours, gpu_class=None, resource=GPU, namespace=ns):
        Grant.objects.create(
            namespace=namespace, gpu_class=gpu_class, resource=resource, amount=amount,
            starts_at=NOV, ends_at=NOV + timedelta(hours=hours),
        )  # fmt: skip

    grant(2, 24, world["h100"])  # 48 GPU-h of H100
    grant(1, 10, world["a100"])  # 10 GPU-h of A100
    grant(1, 5)  # 5 GPU-h of any class
    grant(2, 6, world["a100"], resource=MIG)  # 12 slice-hours
    grant(1, 7, world["h100"], namespace=world["nlp_ns"])  # nlp: 7 GPU-h of H100


def _report(teams):
    _, start, end = showback.parse_month(f"{YEAR}-11")
    led = showback.ledger(teams, start, end)
    return showback.rows(led), classes.class_rows(led)


# -- showback per class ---------------------------------------------------------------------


def test_per_class_split_weighted_and_any_class(world):
    _november(world)
    _, report = _report([world["vision"]])
    rows = {(r.resource, r.label): r for r in report.rows}
    assert list(rows) == [
        (GPU, "NVIDIA A100 SXM4 80GB"),
        (GPU, "NVIDIA H100 80GB HBM3"),
        (GPU, "Tesla V100 SXM2 16GB"),
        (GPU, "any class"),
        (MIG, "NVIDIA A100 SXM4 80GB"),
    ]
    h100 = rows[(GPU, "NVIDIA H100 80GB HBM3")]
    assert (h100.granted_hours, h100.allocated_hours, h100.busy_hours) == pytest.approx((48, 10, 5))
    assert h100.weight == Decimal("10")
    assert (h100.weighted_granted, h100.weighted_allocated, h100.weighted_busy) == pytest.approx(
        (480, 100, 50)
    )
    a100 = rows[(GPU, "NVIDIA A100 SXM4 80GB")]
    assert (a100.granted_hours, a100.allocated_hours, a100.busy_hours) == pytest.approx((10, 4, 4))
    assert (a100.weighted_granted, a100.weighted_allocated, a100.weighted_busy) == pytest.approx(
        (15, 6, 6)
    )
    v100 = rows[(GPU, "Tesla V100 SXM2 16GB")]
    assert (v100.granted_hours, v100.allocated_hours) == pytest.approx((0, 2))
    assert v100.weighted_allocated is None  # no weight
    anyc = rows[(GPU, "any class")]
    assert anyc.gpu_class is None
    assert (anyc.granted_hours, anyc.allocated_hours, anyc.weighted_granted) == (5, 0, None)
    mig = rows[(MIG, "NVIDIA A100 SXM4 80GB")]
    assert (mig.granted_hours, mig.allocated_hours, mig.weighted_granted) == (12, None, None)

    (cost,) = report.teams
    assert cost.weighted_granted == pytest.approx(480 + 15)
    assert cost.weighted_allocated == pytest.approx(100 + 6)
    assert cost.weighted_busy == pytest.approx(50 + 6)
    assert cost.unweighted_granted_hours == pytest.approx(5)  # the any-class grant
    assert cost.unweighted_allocated_hours == pytest.approx(2)  # the V100 hours


def test_class_rows_add_up_to_the_team_rows(world):
    _november(world)
    team_rows, report = _report([world["vision"], world["nlp"]])
    assert len(team_rows) == 3  # vision GPU + MIG, nlp GPU
    for row in team_rows:
        parts = [r for r in report.rows if r.team == row.team and r.resource == row.resource]
        assert parts
        assert sum(p.granted_hours for p in parts) == pytest.approx(row.granted_hours)
        if row.allocated_hours is None:
            assert {p.allocated_hours for p in parts} == {None}
        else:
            assert sum(p.allocated_hours for p in parts) == pytest.approx(row.allocated_hours)
            assert sum(p.busy_hours for p in parts) == pytest.approx(row.busy_hours)
    # And the per-team rows are the ones showback() has always returned.
    _, start, end = showback.parse_month(f"{YEAR}-11")
    assert [
        r.as_dict() for r in showback.showback([world["vision"], world["nlp"]], start, end)
    ] == [r.as_dict() for r in team_rows]
    vision_gpu = next(r for r in team_rows if r.team == world["vision"] and r.resource == GPU)
    assert (vision_gpu.granted_hours, vision_gpu.allocated_hours) == pytest.approx((63, 16))
    (nlp,) = [r for r in report.rows if r.team == world["nlp"]]
    assert (nlp.label, nlp.allocated_hours, nlp.weighted_allocated) == pytest.approx(
        ("NVIDIA H100 80GB HBM3", 3, 30)
    )


# -- idle per class -------------------------------------------------------------------------


def _idle_now(world):
    """vision's H100 pod idle for the last 3 h (busy before), its A100 pod idle since it
    started 12 h ago, its V100 pod busy; nlp's H100 pod idle since it started a day ago."""
    now = timezone.now()
    nodes, g = world["nodes"], world["gpus"]
    make_pod(nodes["h1"], "train-h1", "ml-vision", 1, k8s_created_at=now - timedelta(days=1))
    make_pod(nodes["a1"], "train-a1", "ml-vision", 1, k8s_created_at=now - timedelta(hours=12))
    make_pod(nodes["v1"], "train-v1", "ml-vision", 1, k8s_created_at=now - timedelta(days=1))
    busy_until = now - timedelta(hours=3)
    fill_5m(g["h1"][0], now - timedelta(hours=5), now, lambda t: 80 if t < busy_until else 1)
    fill_5m(g["a1"][0], now - timedelta(hours=3), now, 0)
    fill_5m(g["v1"][0], now - timedelta(hours=3), now, 60)
    return now


def test_idle_allocations_carry_class_and_idle_hours_summary_costliest_first(world):
    now = _idle_now(world)
    idle = insight.idle_allocations(now=now)
    summary = classes.idle_by_class(idle, now)
    by_pod = {a.pod: a for a in idle}
    assert sorted(by_pod) == ["train-a1", "train-h1"]
    h, a = by_pod["train-h1"], by_pod["train-a1"]
    assert h.gpu_class == world["h100"] and a.gpu_class == world["a100"]
    # Idle since the end of its last busy 5-minute point, about 3 h ago.
    assert h.idle_gpu_hours == pytest.approx(3, abs=5 / 60)
    assert h.weighted_idle == pytest.approx(30, abs=1)
    # Never busy in the history: idle since the pod started, 12 h ago.
    assert a.idle_gpu_hours == pytest.approx(12, abs=0.01)
    assert a.weighted_idle == pytest.approx(18, abs=0.1)
    # More idle hours on the A100, but the H100's cost more: it comes first.
    assert [(c.label, c.allocations, c.gpus) for c in summary] == [
        ("NVIDIA H100 80GB HBM3", 1, 1),
        ("NVIDIA A100 SXM4 80GB", 1, 1),
    ]
    assert summary[0].weighted == pytest.approx(h.weighted_idle)
    assert summary[1].idle_gpu_hours == pytest.approx(a.idle_gpu_hours)


def test_idle_class_without_weight_comes_last(world):
    now = timezone.now()
    nodes, g = world["nodes"], world["gpus"]
    make_pod(nodes["v1"], "train-v1", "ml-vision", 1, k8s_created_at=now - timedelta(days=2))
    make_pod(nodes["a1"], "train-a1", "ml-vision", 1, k8s_created_at=now - timedelta(hours=4))
    fill_5m(g["v1"][0], now - timedelta(hours=3), now, 0)
    fill_5m(g["a1"][0], now - timedelta(hours=3), now, 0)
    summary = classes.idle_by_class(insight.idle_allocations(now=now), now)
    assert [c.label for c in summary] == ["NVIDIA A100 SXM4 80GB", "Tesla V100 SXM2 16GB"]
    assert summary[1].weighted is None
    assert summary[1].idle_gpu_hours == pytest.approx(48, abs=0.01)


# -- API ------------------------------------------------------------------------------------


def test_showback_api_has_class_rows_and_team_costs_scoped(world):
    _november(world)
    api = APIClient()
    api.force_authenticate(world["member"])
    body = api.get(f"/api/v1/showback/?month={YEAR}-11").json()
    assert [r["team"] for r in body["results"]] == ["vision", "vision"]  # fields kept
    assert set(body["results"][0]) == {
        "team", "resource", "granted_gpu_hours", "allocated_gpu_hours", "busy_gpu_hours",
        "allocated_from", "recorded_since",
    }  # fmt: skip
    h100 = next(r for r in body["classes"] if r["gpu_class_slug"] == world["h100"].slug)
    assert h100 == {
        "team": "vision", "resource": GPU, "gpu_class": str(world["h100"].pk),
        "gpu_class_slug": world["h100"].slug, "gpu_class_name": "NVIDIA H100 80GB HBM3",
        "cluster": "c1", "weight": "10.0000", "granted_gpu_hours": 48.0,
        "allocated_gpu_hours": 10.0, "busy_gpu_hours": 5.0, "weighted_granted": 480.0,
        "weighted_allocated": 100.0, "weighted_busy": 50.0, "allocated_from": ["telemetry"],
    }  # fmt: skip
    anyc = next(r for r in body["classes"] if r["gpu_class"] is None)
    assert (anyc["gpu_class_name"], anyc["weight"], anyc["weighted_granted"]) == (
        "any class", None, None
    )  # fmt: skip
    assert body["team_costs"] == [
        {"team": "vision", "weighted_granted": 495.0, "weighted_allocated": 106.0,
         "weighted_busy": 56.0, "unweighted_granted_gpu_hours": 5.0,
         "unweighted_allocated_gpu_hours": 2.0},
    ]  # fmt: skip
    api.force_authenticate(world["admin"])
    body = api.get(f"/api/v1/showback/?month={YEAR}-11").json()
    assert {t["team"] for t in body["team_costs"]} == {"vision", "nlp"}


def test_idle_api_per_class_scoped(world):
    _idle_now(world)
    api = APIClient()
    api.force_authenticate(world["admin"])
    body = api.get("/api/v1/idle-allocations/").json()
    assert [c["gpu_class_name"] for c in body["classes"]] == [
        "NVIDIA H100 80GB HBM3", "NVIDIA A100 SXM4 80GB"
    ]  # fmt: skip
    assert body["classes"][0]["weight"] == "10.0000"
    assert body["classes"][0]["weighted_idle"] == pytest.approx(30, abs=1)
    row = next(r for r in body["results"] if r["pod"] == "train-a1")
    assert row["gpu_class_slug"] == world["a100"].slug
    assert row["idle_gpu_hours"] == pytest.approx(12, abs=0.01)
    assert row["weighted_idle"] == pytest.approx(18, abs=0.1)
    api.force_authenticate(world["member"])
    assert len(api.get("/api/v1/idle-allocations/").json()["results"]) == 2
    api.force_authenticate(world["outsider"])
    body = api.get("/api/v1/idle-allocations/").json()
    assert (body["results"], body["classes"]) == ([], [])


def test_schema_declares_the_class_fields():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    showback_fields = components["Showback"]["properties"]
    assert {"results", "classes", "team_costs"} <= set(showback_fields)
    class_row = components["ShowbackClassRow"]["properties"]
    assert {"gpu_class", "weight", "weighted_granted", "weighted_allocated", "weighted_busy",
            "granted_gpu_hours"} <= set(class_row)  # fmt: skip
    op = schema["paths"]["/api/v1/idle-allocations/"]["get"]
    assert op["operationId"] == "idle_allocations"
    assert {"idle_gpu_hours", "weighted_idle", "gpu_class"} <= set(
        components["IdleAllocation"]["properties"]
    )


# -- pages and CSV --------------------------------------------------------------------------


def test_showback_page_and_team_page_show_classes_and_weights(client, world):
    _november(world)
    client.force_login(world["member"])
    html = client.get(reverse("telemetry:showback") + f"?month={YEAR}-11").content.decode()
    assert "Per GPU class" in html
    assert "NVIDIA H100 80GB HBM3" in html and "any class" in html
    assert "480.00" in html and "100.00" in html  # H100 weighted granted / allocated
    assert "495.00" in html and "106.00" in html  # vision's weighted totals
    assert "weight or price per GPU-hour" in html
    html = client.get(reverse("telemetry:team", args=["vision"])).content.decode()
    assert "Per GPU class" in html


def test_idle_page_shows_class_and_weighted_idle(client, world):
    _idle_now(world)
    client.force_login(world["admin"])
    html = client.get(reverse("telemetry:idle")).content.decode()
    assert "Per GPU class" in html and "Weighted idle" in html
    assert html.index("NVIDIA H100 80GB HBM3") < html.index("NVIDIA A100 SXM4 80GB")
    assert "18.00" in html  # the A100 pod: 12 idle GPU-h x 1.5
    client.force_login(world["member"])
    html = client.get(reverse("telemetry:team", args=["vision"])).content.decode()
    assert "Weighted idle" in html and "train-a1" in html


def test_class_csv(client, world):
    _november(world)
    client.force_login(world["member"])
    response = client.get(reverse("telemetry:showback-classes-csv") + f"?month={YEAR}-11")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:7] == ["month", "team", "resource", "cluster", "gpu_class_slug",
                           "gpu_class_name", "weight"]  # fmt: skip
    h100 = next(r for r in rows if r[4] == world["h100"].slug and r[2] == GPU)
    assert h100[6:] == ["10.0000", "48.000", "10.000", "5.000", "480.000", "100.000", "50.000",
                        "telemetry"]  # fmt: skip
    anyc = next(r for r in rows if r[5] == "any class")
    assert anyc[3:5] == ["", ""] and anyc[-4:] == ["", "", "", "telemetry"]
    # The per-team CSV keeps its columns (allocated_from added last).
    response = client.get(reverse("telemetry:showback-csv") + f"?month={YEAR}-11")
    assert next(csv.reader(io.StringIO(response.content.decode()))) == [
        "month", "team", "resource", "granted_gpu_hours", "allocated_gpu_hours",
        "busy_gpu_hours", "allocated_from",
    ]  # fmt: skip


def test_showback_page_queries_constant_in_classes(client, world):
    _november(world)
    client.force_login(world["admin"])
    url = reverse("telemetry:showback") + f"?month={YEAR}-11"
    client.get(url)
    with CaptureQueriesContext(connection) as few:
        client.get(url)
    for n in range(3):
        node = make_node(world["cluster"], f"l{n}", product=f"NVIDIA-L4-{n}", gpus=1)
        (g,) = make_telemetry(node, 1)
        _hold(g, f"ml-vision/more-{n}")
        make_pod(node, f"more-{n}", "ml-vision", 1, k8s_created_at=NOV)
        fill_1h(g, NOV, NOV + timedelta(hours=2), 10)
    refresh(world["cluster"])
    with CaptureQueriesContext(connection) as many:
        html = client.get(url).content.decode()
    assert "NVIDIA L4 2" in html
    assert len(many) == len(few)
