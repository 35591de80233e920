"""Agent report ingest: the contract (docs/agent-report.md), field by field, idempotency,
exact history, statement count, and the latest-state API.

Personas: an agent holding a token for node ``a100-00``, a second agent for ``a100-01``,
a signed-in researcher and an anonymous client.
"""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from telemetry import tokens
from telemetry.ingest import MAX_BODY_BYTES, bucket_of
from telemetry.models import AgentReport, GpuHistory5m, GpuState, NodeTelemetry
from tests.factories import make_cluster, make_node, make_pod

pytestmark = pytest.mark.django_db

URL = "/api/v1/agent/reports/"
# Mid-bucket, so reports a few seconds apart share one 5-minute bucket.
NOW = datetime(2026, 11, 30, 14, 1, 0, tzinfo=UTC)


def gpu(index: int, **over) -> dict:
    g = {
        "index": index,
        "uuid": f"GPU-00000000-0000-0000-0000-{index:012d}",
        "name": "NVIDIA A100-SXM4-80GB",
        "lost": False,
        "memory_total_mib": 81920,
        "memory_used_mib": 40000 + index,
        "utilization_gpu_pct": 80,
        "utilization_memory_pct": 40,
        "temperature_c": 60 + index,
        "power_w": 300.5,
        "power_limit_w": 400.0,
        "mig_mode": None,
        "mig_devices": [],
        "processes": [{"pid": 4242, "used_memory_mib": 20000, "pod": "ml/train-0"}],
        "unsupported": [],
    }
    g.update(over)
    return g


def _own(g: dict, node: str) -> dict:
    """Another node's GPUs have UUIDs and a pod of their own (a node reports only its own
    GPUs, and processes of pods placed on it: telemetry/consistency.py)."""
    if node != "a100-00":
        g["uuid"] = g["uuid"][:-12] + f"{zlib.crc32(node.encode()) % 10**6:06d}{g['index']:06d}"
        for proc in g["processes"]:
            proc["pod"] = OTHER_POD
    return g


OTHER_POD = "ml/train-1"  # the pod of other_node's reports


def report(node: str = "a100-00", ts: datetime | None = None, gpus: int = 8, **over) -> dict:
    body = {
        "node": node,
        "timestamp": (ts or timezone.now()).isoformat().replace("+00:00", "Z"),
        "agent_version": "0.1.0",
        "interval_s": 15,
        "driver_version": "550.107.02",
        "cuda_driver_version": 12040,
        "gpus": [_own(gpu(i), node) for i in range(gpus)],
        "topology": [["X" if i == j else "NV12" for j in range(gpus)] for i in range(gpus)],
    }
    body.update(over)
    return body


@pytest.fixture(autouse=True)
def _frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def cluster():
    return make_cluster("lab")


@pytest.fixture
def node(cluster):
    node = make_node(cluster, "a100-00")
    make_pod(node, "train-0", namespace="ml")  # the reports' processes run in it
    return node


@pytest.fixture
def other_node(cluster):
    node = make_node(cluster, "a100-01")
    make_pod(node, "train-1", namespace="ml")
    return node


def agent_client(node) -> Client:
    _, raw = tokens.issue(node)
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.fixture
def agent(node) -> Client:
    return agent_client(node)


def post(client: Client, body, raw: bool = False):
    data = body if raw else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json")


# -- accepted reports ------------------------------------------------------------------------


def test_report_accepted_stores_latest_state_node_facts_and_history(agent, node):
    r = post(agent, report())
    assert r.status_code == 202, r.content
    assert r.json() == {"accepted": True}
    states = list(GpuState.objects.filter(node=node).order_by("index"))
    assert [g.index for g in states] == list(range(8))
    g3 = states[3]
    assert g3.uuid.endswith("000000000003")
    assert (g3.memory_used_mib, g3.utilization_gpu_pct, g3.temperature_c) == (40003, 80, 63)
    assert g3.power_w == 300.5 and g3.processes[0]["pod"] == "ml/train-0"
    assert g3.reported_at == NOW and not g3.is_stale
    facts = NodeTelemetry.objects.get(node=node)
    assert (facts.driver_version, facts.cuda_driver_version, facts.gpu_count) == (
        "550.107.02", 12040, 8)  # fmt: skip
    assert facts.topology[0][1] == "NV12" and facts.last_report_timestamp == NOW
    points = GpuHistory5m.objects.filter(gpu__node=node)
    assert points.count() == 8
    assert {p.bucket for p in points} == {datetime(2026, 11, 30, 14, 0, tzinfo=UTC)}


def test_duplicate_is_acknowledged_and_writes_nothing(agent, node):
    body = report()
    assert post(agent, body).status_code == 202
    before = list(GpuHistory5m.objects.values_list("samples", "util_sum"))
    body["gpus"][0]["utilization_gpu_pct"] = 3  # same (node, timestamp): still a duplicate
    r = post(agent, body)
    assert r.status_code == 200 and r.json() == {"duplicate": True}
    assert list(GpuHistory5m.objects.values_list("samples", "util_sum")) == before
    assert GpuState.objects.get(node=node, index=0).utilization_gpu_pct == 80
    assert AgentReport.objects.count() == 1


def test_history_averages_are_exact_across_reports_in_one_bucket(agent, node):
    utils, mems, powers = [10, 55, 98], [1000, 2000, 4001], [100.25, 200.5, None]
    for k, (u, m, p) in enumerate(zip(utils, mems, powers, strict=True)):
        body = report(ts=NOW + timedelta(seconds=15 * k), gpus=1)
        body["gpus"][0].update(utilization_gpu_pct=u, memory_used_mib=m, power_w=p,
                               temperature_c=50 + 20 * (k == 1))  # fmt: skip
        assert post(agent, body).status_code == 202
    point = GpuHistory5m.objects.with_averages().get(gpu__node=node)
    assert point.samples == 3
    assert point.util_avg == pytest.approx(sum(utils) / 3)
    assert point.util_max == 98 and point.temp_max == 70
    assert point.mem_used_avg_mib == pytest.approx(7001 / 3)
    # The sample without power does not dilute the average.
    assert (point.power_n, point.power_avg_w) == (2, pytest.approx(150.375))
    # Latest state is the last report.
    assert GpuState.objects.get(node=node).utilization_gpu_pct == 98


def test_next_bucket_starts_a_new_point(agent, node):
    post(agent, report(gpus=1))
    post(agent, report(ts=NOW + timedelta(minutes=5), gpus=1))
    buckets = list(GpuHistory5m.objects.order_by("bucket").values_list("bucket", flat=True))
    assert buckets == [bucket_of(NOW), bucket_of(NOW) + timedelta(minutes=5)]


def test_older_buffered_report_feeds_history_but_not_latest_state(agent, node):
    assert post(agent, report(gpus=1)).status_code == 202
    old = report(ts=NOW - timedelta(minutes=40), gpus=1)
    old["gpus"][0]["utilization_gpu_pct"] = 1
    old["driver_version"] = "535.0"
    assert post(agent, old).status_code == 202
    state = GpuState.objects.get(node=node)
    assert state.utilization_gpu_pct == 80 and state.reported_at == NOW
    assert NodeTelemetry.objects.get(node=node).driver_version == "550.107.02"
    assert GpuHistory5m.objects.filter(gpu=state).count() == 2


def test_lost_gpu_is_stored_with_null_metrics(agent, node):
    lost = {"index": 2, "uuid": "GPU-lost", "lost": True, "name": None}
    lost.update(dict.fromkeys(["memory_total_mib", "memory_used_mib", "utilization_gpu_pct",
                               "utilization_memory_pct", "temperature_c", "power_w",
                               "power_limit_w"]))  # fmt: skip
    body = report(gpus=2)
    body["gpus"].append(lost)
    body["topology"] = None
    assert post(agent, body).status_code == 202
    state = GpuState.objects.get(node=node, index=2)
    assert state.lost and state.uuid == "GPU-lost"
    assert state.utilization_gpu_pct is None and state.memory_used_mib is None
    point = GpuHistory5m.objects.with_averages().get(gpu=state)
    assert (point.samples, point.util_n, point.util_max, point.util_avg) == (1, 0, None, None)


def test_lost_gpu_keeps_its_known_identity(agent, node):
    post(agent, report(gpus=1))
    body = report(ts=NOW + timedelta(seconds=15), gpus=1)
    body["gpus"] = [{"index": 0, "lost": True}]
    assert post(agent, body).status_code == 202
    state = GpuState.objects.get(node=node)
    assert state.lost and state.uuid.startswith("GPU-0000") and state.name.startswith("NVIDIA")


def test_unsupported_metrics_are_stored_as_null(agent, node):
    body = report(gpus=1)
    body["gpus"][0].update(power_w=None, power_limit_w=None,
                           unsupported=["power_w", "power_limit_w"])  # fmt: skip
    assert post(agent, body).status_code == 202
    state = GpuState.objects.get(node=node)
    assert state.power_w is None and state.power_limit_w is None
    assert state.unsupported == ["power_w", "power_limit_w"]
    assert GpuHistory5m.objects.get(gpu=state).power_n == 0


def test_mig_mode_and_devices_are_stored(agent, node):
    body = report(gpus=1)
    body["gpus"][0].update(
        mig_mode={"current": True, "pending": False},
        mig_devices=[{"index": 0, "uuid": "MIG-1", "profile": "3g.40gb",
                      "memory_total_mib": 40192, "memory_used_mib": 100}],
    )  # fmt: skip
    assert post(agent, body).status_code == 202
    state = GpuState.objects.get(node=node)
    assert (state.mig_current, state.mig_pending) == (True, False)
    assert state.mig_devices[0]["profile"] == "3g.40gb"


def test_minimal_report_and_empty_gpu_list(cluster):
    node = make_node(cluster, "cpu-00", product="", gpus=0)  # an empty list: a node without GPUs
    body = {"node": "cpu-00", "timestamp": NOW.isoformat(), "gpus": []}
    assert post(agent_client(node), body).status_code == 202
    assert NodeTelemetry.objects.get(node=node).gpu_count == 0


def test_statements_per_report_are_bounded(agent, node):
    post(agent, report(ts=NOW - timedelta(seconds=15)))  # first use writes last_used_at
    with CaptureQueriesContext(connection) as ctx:
        r = post(agent, report(gpus=64, topology=None))
    assert r.status_code == 202
    # Token lookup, the check against the inventory (telemetry/consistency.py) and the one
    # write statement, whatever the number of GPUs.
    assert len(ctx.captured_queries) == 3, [q["sql"][:80] for q in ctx.captured_queries]
    with CaptureQueriesContext(connection) as ctx:
        assert post(agent, report(gpus=64, topology=None)).status_code == 200
    assert len(ctx.captured_queries) == 3


def test_stale_after_three_intervals(agent, node, _frozen):
    post(agent, report(gpus=1, interval_s=10))
    _frozen.shift(timedelta(seconds=29))
    assert not GpuState.objects.stale().exists()
    _frozen.shift(timedelta(seconds=2))
    assert GpuState.objects.stale().count() == 1
    assert NodeTelemetry.objects.get(node=node).is_stale


# -- authentication ----------------------------------------------------------------------------


def test_token_of_another_node_is_forbidden(agent, other_node):
    r = post(agent, report(node="a100-01"))
    assert r.status_code == 403
    assert "a100-00" in r.json()["detail"]
    assert not GpuState.objects.exists()


def test_missing_unknown_personal_and_revoked_tokens_are_401(node, admin_user):
    from portal.models import ApiToken

    assert post(Client(), report()).status_code == 401
    assert post(Client(HTTP_AUTHORIZATION="Bearer gqa_nope"), report()).status_code == 401
    _, personal = ApiToken.issue(admin_user, "x")
    assert post(Client(HTTP_AUTHORIZATION=f"Bearer {personal}"), report()).status_code == 401
    token, raw = tokens.issue(node)
    token.revoke()
    r = post(Client(HTTP_AUTHORIZATION=f"Bearer {raw}"), report())
    assert r.status_code == 401 and r["WWW-Authenticate"] == "Bearer"
    assert not AgentReport.objects.exists()


def test_last_used_is_recorded_at_most_every_five_minutes(node, _frozen):
    token, raw = tokens.issue(node)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    post(client, report())
    token.refresh_from_db()
    assert token.last_used_at == NOW
    _frozen.shift(timedelta(minutes=1))
    post(client, report())
    token.refresh_from_db()
    assert token.last_used_at == NOW


# -- the schema, field by field ----------------------------------------------------------------


def errors_of(response) -> dict:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["detail"].startswith("Invalid report in:")
    return body


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b.pop("gpus"), "gpus"),
        (lambda b: b.pop("node"), "node"),
        (lambda b: b.pop("timestamp"), "timestamp"),
        (lambda b: b.update(gpus={"0": {}}), "gpus"),
        (lambda b: b.update(gpus=[gpu(i) for i in range(65)]), "gpus"),
        (lambda b: b.update(interval_s="15"), "interval_s"),
        (lambda b: b.update(interval_s=0), "interval_s"),
        (lambda b: b.update(cuda_driver_version=12.4), "cuda_driver_version"),
        (lambda b: b.update(driver_version=550), "driver_version"),
        (lambda b: b.update(agent_version="x" * 65), "agent_version"),
        (lambda b: b.update(hostname="a100-00"), "hostname"),
        (lambda b: b.update(timestamp="yesterday"), "timestamp"),
        (lambda b: b.update(timestamp="2026-11-30T14:01:00"), "timestamp"),
        (lambda b: b.update(timestamp="2026-11-30T14:12:00Z"), "timestamp"),
        (lambda b: b.update(timestamp="2026-11-30T12:59:00Z"), "timestamp"),
        (lambda b: b.update(timestamp=1796047260), "timestamp"),
        # in range as written, out of datetime's range in UTC (an OverflowError: 500, #24)
        (lambda b: b.update(timestamp="0001-01-01T00:00:00+14:00"), "timestamp"),
        (lambda b: b.update(timestamp="9999-12-31T23:59:59-14:00"), "timestamp"),
        (lambda b: b["gpus"][1].update(memory_used_mib=-1), "gpus[1].memory_used_mib"),
        (lambda b: b["gpus"][1].update(memory_total_mib="80GB"), "gpus[1].memory_total_mib"),
        (lambda b: b["gpus"][2].update(utilization_gpu_pct=101), "gpus[2].utilization_gpu_pct"),
        (lambda b: b["gpus"][2].update(utilization_memory_pct=5.5),
         "gpus[2].utilization_memory_pct"),
        (lambda b: b["gpus"][2].update(temperature_c=True), "gpus[2].temperature_c"),
        (lambda b: b["gpus"][2].update(power_w="300"), "gpus[2].power_w"),
        (lambda b: b["gpus"][2].update(power_w=-1.0), "gpus[2].power_w"),
        (lambda b: b["gpus"][0].pop("index"), "gpus[0].index"),
        (lambda b: b["gpus"][0].update(index=64), "gpus[0].index"),
        (lambda b: b["gpus"][1].update(index=0), "gpus[1].index"),
        (lambda b: b["gpus"][0].update(lost="no"), "gpus[0].lost"),
        (lambda b: b["gpus"][0].update(fan_pct=30), "gpus[0].fan_pct"),
        (lambda b: b["gpus"][0].update(uuid="G" * 97), "gpus[0].uuid"),
        (lambda b: b["gpus"][0].update(mig_mode=True), "gpus[0].mig_mode"),
        (lambda b: b["gpus"][0].update(mig_mode={"current": 1, "pending": 0}),
         "gpus[0].mig_mode"),
        (lambda b: b["gpus"][0].update(mig_devices=[{"index": 0}] * 65), "gpus[0].mig_devices"),
        (lambda b: b["gpus"][0].update(mig_devices=[{"index": 0, "profile": 3}]),
         "gpus[0].mig_devices[0].profile"),
        (lambda b: b["gpus"][0].update(processes=[{"pid": 1}] * 257), "gpus[0].processes"),
        (lambda b: b["gpus"][0].update(processes=[{"pid": -5}]), "gpus[0].processes[0].pid"),
        (lambda b: b["gpus"][0].update(processes=[{"pid": 5, "container": "x"}]),
         "gpus[0].processes[0].container"),
        (lambda b: b["gpus"][0].update(unsupported="power_w"), "gpus[0].unsupported"),
        (lambda b: b["gpus"][0].update(unsupported=[1]), "gpus[0].unsupported"),
        (lambda b: b.update(topology=[["X", "NV12"]]), "topology[0]"),
        (lambda b: b.update(topology=[["X", "NVLINK"], ["NV1", "X"]]), "topology[0][1]"),
        (lambda b: b.update(topology="X"), "topology"),
    ],
)  # fmt: skip
def test_schema_errors_name_the_field(agent, mutate, field):
    body = report(gpus=3)
    mutate(body)
    errors = errors_of(post(agent, body))
    assert field in errors, errors
    assert isinstance(errors[field], list) and errors[field][0]
    assert not GpuState.objects.exists() and not AgentReport.objects.exists()


def test_several_errors_are_reported_together(agent):
    body = report(gpus=2, colour="blue")
    body["gpus"][0]["utilization_gpu_pct"] = 101
    body["gpus"][1]["memory_used_mib"] = -1
    errors = errors_of(post(agent, body))
    assert {"colour", "gpus[0].utilization_gpu_pct", "gpus[1].memory_used_mib"} <= set(errors)


@pytest.mark.parametrize(
    "raw", ["not json", "[1, 2]", '{"node": NaN}', "", '"a100-00"', b"\xff\xfe"]
)
def test_body_that_is_not_a_json_object_is_400(agent, raw):
    errors = errors_of(post(agent, raw, raw=True))
    assert "body" in errors


def test_body_over_256_kib_is_413(agent):
    body = report(gpus=1)
    body["agent_version"] = "x" * MAX_BODY_BYTES
    r = post(agent, body)
    assert r.status_code == 413
    assert not AgentReport.objects.exists()


def test_only_post_is_allowed(agent):
    assert agent.get(URL).status_code == 405


# -- GET /api/v1/gpus/ -------------------------------------------------------------------------


def test_gpu_list_for_signed_in_users_with_filters(agent, node, other_node, researcher_api,
                                                   anon_api, _frozen):  # fmt: skip
    post(agent, report(gpus=3))
    post(agent_client(other_node), report(node="a100-01", gpus=2, interval_s=60))
    assert anon_api.get("/api/v1/gpus/").status_code == 401
    r = researcher_api.get("/api/v1/gpus/")
    assert r.status_code == 200
    rows = r.json()["results"]
    assert [(g["node"], g["index"]) for g in rows] == [
        ("a100-00", 0), ("a100-00", 1), ("a100-00", 2), ("a100-01", 0), ("a100-01", 1)]  # fmt: skip
    assert rows[0]["cluster"] == "lab" and rows[0]["stale"] is False
    assert rows[0]["mig_mode"] is None
    r = researcher_api.get("/api/v1/gpus/", {"node": "a100-01"})
    assert r.json()["count"] == 2
    assert researcher_api.get("/api/v1/gpus/", {"cluster": "nope"}).json()["count"] == 0
    _frozen.shift(timedelta(seconds=60))  # a100-00 (15 s interval) is stale, a100-01 not
    r = researcher_api.get("/api/v1/gpus/", {"stale": "true"})
    assert {g["node"] for g in r.json()["results"]} == {"a100-00"}
    assert researcher_api.get("/api/v1/gpus/", {"stale": "maybe"}).status_code == 400


def test_gpu_list_query_count_does_not_grow_with_nodes(cluster, researcher_api):
    def count_queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert researcher_api.get("/api/v1/gpus/").status_code == 200
        return len(ctx.captured_queries)

    def add_node(i: int) -> None:
        n = make_node(cluster, f"n-{i}")
        post(agent_client(n), report(node=n.name, gpus=2))

    add_node(0)
    count_queries()  # the first call records the personal token's last use
    few = count_queries()
    for i in range(1, 6):
        add_node(i)
    assert count_queries() == few


def test_report_endpoint_is_in_the_schema(admin_api):
    r = admin_api.get("/api/schema/", {"format": "json"})
    assert r.status_code == 200
    paths = json.loads(r.content)["paths"]
    assert "post" in paths["/api/v1/agent/reports/"]
    assert "/api/v1/agent/tokens/" in paths and "/api/v1/gpus/" in paths


def test_without_prepared_statements_the_same_report_is_stored(agent, node, settings):
    settings.TELEMETRY_PREPARED_STATEMENTS = False
    assert post(agent, report(gpus=2)).status_code == 202
    assert post(agent, report(gpus=2)).status_code == 200
    assert GpuHistory5m.objects.filter(gpu__node=node, samples=1).count() == 2
