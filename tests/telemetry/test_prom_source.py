"""Telemetry pages, idle insight, showback and renewals with a cluster's Prometheus as the
source (issue #13 section 1), against a real Prometheus serving recorded history.

26 hours of dcgm-exporter-shaped series (1-minute samples; the metric and label names of
NVIDIA/dcgm-exporter's default counters and Kubernetes pod mapping) are written as
OpenMetrics and turned into TSDB blocks by ``promtool`` (devstack/promhistory.py) before a
real Prometheus (Debian package ``prometheus``) starts on them. One Prometheus serves two
clusters told apart by a ``cluster`` label:

- ``prod``, node ``gpu-a``: GPUs 0 and 1 held by ``vision-train/busy`` at 80 %, GPU 2 held
  by ``vision-train/idle`` at 1 %, GPU 3 free at 0 %; plus a node the inventory does not know;
- ``eng``, node ``gpu-m``: GPU 0 in MIG mode, instance 1 held by ``eng-ml/mig-idle`` (engine
  activity 1 %), instance 2 by ``eng-ml/mig-busy`` (70 %): DCP engine activity is present, so
  it is the metric, and the instances are judged one by one.

An agent cluster with the same values as 5-minute points checks that both sources give the
same figures (one definition), and a source pointing at a closed port checks the outage path.
"""

from __future__ import annotations

import socket
import time
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from devstack.promhistory import Family, create_blocks, write_openmetrics
from quotas.models import Grant, QuotaRequest
from telemetry import (
    classes,
    insight,
    promstate,
    renewals,
    retention,
    showback,
    sources,
    summary,
    views,
)
from telemetry.models import GpuState, NodeTelemetry, PrometheusSource
from telemetry.visibility import PodNames
from tests.factories import make_cluster, make_node, make_pod
from tests.prereqs import need
from tests.prom import start_prometheus
from tests.quotas.builders import make_namespace, make_team, make_user

from .telebuilders import fill_5m, make_telemetry

pytestmark = pytest.mark.django_db

HOURS = 26
RECORDED_HOURS = 20
A100 = "NVIDIA A100-SXM4-80GB"
PROD = [  # (gpu, namespace/pod or None, utilisation %)
    ("0", "vision-train/busy", 80.0),
    ("1", "vision-train/busy", 80.0),
    ("2", "vision-train/idle", 1.0),
    ("3", None, 0.0),
]
MIG = [  # (GPU_I_ID, namespace/pod, engine activity ratio)
    ("1", "eng-ml/mig-idle", 0.01),
    ("2", "eng-ml/mig-busy", 0.70),
]


def _pod_labels(pod: str | None) -> dict[str, str]:
    if not pod:
        return {}
    ns, _, name = pod.partition("/")
    return {"namespace": ns, "pod": name, "container": "main"}


def _families(end: float) -> list[Family]:
    times = [end - 60 * i for i in range(HOURS * 60, -1, -1)]

    def flat(value):
        return [(t, value) for t in times]

    prod = {"cluster": "prod", "Hostname": "gpu-a", "modelName": A100,
            "DCGM_FI_DRIVER_VERSION": "550.90.07"}  # fmt: skip
    util, used, free, temp, recorded = [], [], [], [], []
    # What the recording rule portal:dcgm_gpu_util:avg5m would have written, for the last
    # RECORDED_HOURS only (the rule started later than the exporter).
    every5 = [end - 300 * i for i in range(RECORDED_HOURS * 12, -1, -1)]
    for gpu, pod, value in PROD:
        labels = {**prod, "gpu": gpu, "UUID": f"GPU-a{gpu}", "device": f"nvidia{gpu}",
                  **_pod_labels(pod)}  # fmt: skip
        util.append((labels, flat(value)))
        recorded.append((labels, [(t, value) for t in every5]))
        used.append((labels, flat(20000.0 if pod else 0.0)))
        free.append((labels, flat(61920.0 if pod else 81920.0)))
        temp.append((labels, flat(40.0 + float(gpu))))
    stranger = {**prod, "Hostname": "gpu-unknown", "gpu": "0", "UUID": "GPU-x"}
    util.append((stranger, flat(50.0)))
    eng = {"cluster": "eng", "Hostname": "gpu-m", "modelName": A100, "gpu": "0", "UUID": "GPU-m0"}
    # GPU 1: held by eng-ml/dozing, busy until 25 hours ago, idle since.
    dozing = {**eng, "gpu": "1", "UUID": "GPU-m1", **_pod_labels("eng-ml/dozing")}
    engine = [(dozing, [(t, 0.9 if t < end - 25 * 3600 else 0.01) for t in times])]
    for gi, pod, ratio in MIG:
        labels = {**eng, "GPU_I_ID": gi, "GPU_I_PROFILE": "3g.40gb", **_pod_labels(pod)}
        engine.append((labels, flat(ratio)))
        used.append((labels, flat(10000.0)))
        free.append((labels, flat(30000.0)))
    return [
        Family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", util),
        Family("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", used),
        Family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", free),
        Family("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", temp),
        Family("portal:dcgm_gpu_util:avg5m", "recorded", recorded),
        Family(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", engine
        ),
        Family(
            "DCGM_FI_DEV_XID_ERRORS",
            "Value of the last XID error encountered.",
            [({**prod, "gpu": "3", "UUID": "GPU-a3"}, flat(79.0))],
        ),
    ]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    need("promtool")
    root = tmp_path_factory.mktemp("recorded")
    text = root / "history.om"
    write_openmetrics(text, _families(time.time()))
    create_blocks(text, root / "prometheus" / "data")
    prom = start_prometheus(root, [], retention="3d")
    prom.wait_for('DCGM_FI_DEV_GPU_UTIL{cluster="prod"}', count=len(PROD) + 1)
    yield prom
    prom.stop()


@pytest.fixture
def world(prometheus):
    old = timezone.now() - timedelta(days=2)
    prod, eng = make_cluster("prod"), make_cluster("eng")
    node_a = make_node(prod, "gpu-a", gpus=4)
    node_m = make_node(eng, "gpu-m", gpus=2)
    for cluster in (prod, eng):
        PrometheusSource.objects.create(
            cluster=cluster, url=prometheus.url, cluster_label="cluster"
        )
    vision, eng_team = make_team("vision"), make_team("eng-team")
    ns = make_namespace(vision, prod, "vision-train")
    make_namespace(eng_team, eng, "eng-ml")
    make_pod(node_a, "busy", "vision-train", 2, k8s_created_at=old)
    make_pod(node_a, "idle", "vision-train", 1, k8s_created_at=old)
    make_pod(node_m, "mig-idle", "eng-ml", 0, k8s_created_at=old)
    make_pod(node_m, "mig-busy", "eng-ml", 0, k8s_created_at=old)
    make_pod(node_m, "dozing", "eng-ml", 1, k8s_created_at=old)
    synced = promstate.sync_all()
    admin = make_user("ada", staff=True)
    return {"prod": prod, "eng": eng, "node_a": node_a, "node_m": node_m, "admin": admin,
            "vision": vision, "ns": ns, "synced": synced}  # fmt: skip


# -- latest state -------------------------------------------------------------------------------


def test_latest_state_is_copied_from_the_exporter_series(world):
    result = world["synced"]["prod"]
    assert (result.gpus, result.nodes, result.unknown_hosts) == (4, 1, ["gpu-unknown"])
    gpus = {g.index: g for g in GpuState.objects.filter(node=world["node_a"])}
    assert sorted(gpus) == [0, 1, 2, 3]
    g0 = gpus[0]
    assert (g0.name, g0.uuid, g0.utilization_gpu_pct) == (A100, "GPU-a0", 80)
    assert (g0.memory_used_mib, g0.memory_total_mib, g0.temperature_c) == (20000, 81920, 40)
    assert [p["pod"] for p in g0.processes] == ["vision-train/busy"]
    assert "processes" in g0.unsupported and not g0.is_stale
    assert gpus[3].xid_last == 79 and gpus[3].processes == []
    tele = NodeTelemetry.objects.get(node=world["node_a"])
    assert (tele.agent_version, tele.driver_version) == (promstate.EXPORTER, "550.90.07")
    # The GPU's time is its latest sample's (stale 3 minutes after it), not the sync's.
    assert g0.reported_at == tele.last_report_timestamp < tele.last_report_at
    assert g0.stale_after == g0.reported_at + promstate.STALE_AFTER
    mig = GpuState.objects.get(node=world["node_m"], index=0)
    assert [(d["index"], d["profile"], d["memory_total_mib"]) for d in mig.mig_devices] == [
        (1, "3g.40gb", 40000), (2, "3g.40gb", 40000),
    ]  # fmt: skip
    assert {(p["pod"], p["gpu_instance"]) for p in mig.processes} == {
        ("eng-ml/mig-idle", "1"), ("eng-ml/mig-busy", "2"),
    }  # fmt: skip


def test_xid_error_is_a_health_signal_and_no_orphan_memory_is_guessed(client, world):
    client.force_login(world["admin"])
    page = client.get(reverse("telemetry:health")).content.decode()
    assert "GPU 3: XID 79" in page
    assert "memory used, no process" not in page  # dcgm-exporter lists no processes


# -- history on the pages ---------------------------------------------------------------------


def test_node_page_charts_come_from_range_queries(client, world):
    ctx = views.node_gpu_context(world["node_a"], PodNames(None))
    cards = {c["gpu"].index: c for c in ctx["cards"]}
    assert ctx["source"] == "prometheus" and ctx["outages"] == []
    for index, (_, _, value) in enumerate(PROD):
        util = cards[index]["util"]
        assert util.points >= 280, index  # 24 h of 5-minute points, the newest included
        assert util.low == util.high == util.last == pytest.approx(value)
        assert len(util.segments) == 1  # no gaps
    mem = cards[0]["mem"]
    assert mem.points >= 280 and mem.mean == pytest.approx(100 * 20000 / 81920)
    assert cards[3]["temp"].last == pytest.approx(43)
    client.force_login(world["admin"])
    page = client.get(reverse("inventory:node", args=[world["node_a"].pk])).content.decode()
    assert "Source: dcgm-exporter via the cluster's Prometheus" in page
    assert "read from the cluster's Prometheus" in page and "latest sample" in page
    assert "<h4>Pods <span" in page and "Not in Prometheus: processes" in page


def test_fleet_chart_and_products_from_prometheus(client, world):
    now = timezone.now()
    series = summary.read(now=now).series
    hours = series["NVIDIA-A100-SXM4-80GB"]
    assert len(hours) >= 24
    # gpu-a's four GPUs (80, 80, 1, 0) and the MIG node's engine activity (the eng
    # cluster's metric): the hourly mean of every GPU's 5-minute means.
    full = [s / n for s, n in hours.values() if n]
    prod_mean = (80 + 80 + 1 + 0) / 4
    eng_mean = ((1 + 70) / 2 + 1) / 2  # the MIG GPU's instances, and the dozing GPU
    assert full and all(m == pytest.approx((4 * prod_mean + 2 * eng_mean) / 6) for m in full[1:-1])
    client.force_login(world["admin"])
    response = client.get(reverse("telemetry:fleet"))
    assert response.status_code == 200
    assert 'role="alert"' not in response.content.decode()


def test_idle_insight_uses_the_exporters_metric_and_judges_mig_instances(client, world):
    idle = insight.idle_allocations()
    got = {(a.namespace, a.pod, tuple(a.gpu_indexes), a.metric) for a in idle}
    assert got == {
        ("vision-train", "idle", (2,), "DCGM_FI_DEV_GPU_UTIL"),
        ("eng-ml", "mig-idle", (0,), "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        ("eng-ml", "dozing", (1,), "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    }
    by_pod = {a.pod: a for a in idle}
    assert by_pod["idle"].max_util_pct == pytest.approx(1.0)
    assert by_pod["mig-idle"].max_util_pct == pytest.approx(1.0)  # instance 1, not the GPU
    # Idle since the pods started two days ago: no 5-minute point of GPU 2, or of instance 1
    # (its neighbour works), reached the threshold in what Prometheus holds. The dozing
    # pod's GPU worked until 25 hours ago: found hour by hour beyond the last day.
    classes.idle_by_class(idle)
    for a in idle:
        if a.pod == "dozing":
            assert 24 <= a.idle_gpu_hours <= 25, a.idle_gpu_hours
        else:
            assert a.idle_gpu_hours == pytest.approx(48, abs=0.1), a.pod
    client.force_login(world["admin"])
    page = client.get(reverse("telemetry:idle")).content.decode()
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in page and "mig-idle" in page
    assert "mig-busy" not in page and ">busy<" not in page


def test_showback_and_team_usage_from_prometheus(client, world):
    now = timezone.now()
    attribution = insight.attribute(None, now)
    used = showback.used_hours(now - timedelta(hours=24), now, attribution, now=now)
    key = (world["prod"].pk, "vision-train")
    alloc, busy = renewals.used_since(used, key, now - timedelta(hours=24))
    # 3 GPUs held for 24 h; busy: (80 + 80 + 1) % of those GPU-hours.
    assert alloc == pytest.approx(72, abs=0.6)
    assert busy == pytest.approx(0.8 * 24 * 2 + 0.01 * 24, abs=0.6)
    client.force_login(world["admin"])
    page = client.get(reverse("telemetry:team", args=["vision"]))
    assert page.status_code == 200
    assert page.context["chart"]["series"][0]["values"][-3] == pytest.approx(100 * 1.61 / 3, abs=1)


def test_renewal_view_measures_the_grant_from_prometheus(world):
    now = timezone.now()
    user = make_user("rita")
    grant = Grant.objects.create(
        namespace=world["ns"], resource="nvidia.com/gpu", amount=4,
        starts_at=now - timedelta(days=3), ends_at=now + timedelta(days=1),
    )  # fmt: skip
    req = QuotaRequest.objects.create(
        team=world["vision"], namespace=world["ns"], kind=QuotaRequest.Kind.RENEWAL,
        target_grant=grant, resource="nvidia.com/gpu", amount=4, starts_at=now,
        justification="more", requested_by=user,
    )  # fmt: skip
    req = QuotaRequest.objects.select_related("namespace", "target_grant").get(pk=req.pk)
    renewals.annotate_renewals([req], now=now)
    u = req.utilisation
    # The lookback is 7 days; the recorded history has 26 hours of 3 held GPUs.
    assert u.allocated_gpu_hours == pytest.approx(3 * HOURS, abs=3)
    assert u.busy_pct == pytest.approx(100 * 1.61 / 3, abs=1)
    assert u.idle_now == 1


def test_both_sources_give_the_same_figures_for_the_same_values(world):
    """The agent's 5-minute points and Prometheus' subqueries: one definition."""
    now = timezone.now()
    agent_cluster = make_cluster("onprem")
    node = make_node(agent_cluster, "gpu-a", gpus=4)
    states = make_telemetry(node, 4)
    for g, (_, _, value) in zip(states, PROD, strict=True):
        fill_5m(g, now - timedelta(hours=26), now, value)
    retention.rollup_hours(now, hours=27)  # closed hours come from hourly points
    prom_states = list(GpuState.objects.filter(node=world["node_a"]).select_related("node"))
    agent_states = list(GpuState.objects.filter(node=node).select_related("node"))
    window = timedelta(hours=2)
    stats, metrics = sources.window_stats(prom_states + agent_states, now, window)
    for p, a in zip(sorted(prom_states, key=lambda g: g.index), agent_states, strict=True):
        assert stats[p.pk][0] == pytest.approx(stats[a.pk][0])
        assert abs(stats[p.pk][1] - stats[a.pk][1]) <= 1  # 5-minute points in the window
    assert metrics[agent_cluster.pk] != metrics[world["prod"].pk] == "DCGM_FI_DEV_GPU_UTIL"
    hours = sources.gpu_hours(prom_states + agent_states, now - timedelta(hours=24), now, now)
    by_gpu: dict = {}
    for gpu_id, _, h, b in hours:  # the agent's: hourly points, then 5-minute ones
        old = by_gpu.get(gpu_id, (0.0, 0.0))
        by_gpu[gpu_id] = (old[0] + h, old[1] + b)
    for p, a in zip(sorted(prom_states, key=lambda g: g.index), agent_states, strict=True):
        # The agent's closed hours are hourly points from the first whole hour on, so its
        # window starts up to an hour later; Prometheus counts 5-minute points throughout.
        assert 24 - 5 / 60 <= by_gpu[p.pk][0] <= 24 + 5 / 60
        assert 23 <= by_gpu[a.pk][0] <= by_gpu[p.pk][0]
        assert by_gpu[p.pk][1] == pytest.approx(by_gpu[p.pk][0] * PROD[p.index][2] / 100)
        assert by_gpu[a.pk][1] == pytest.approx(by_gpu[a.pk][0] * PROD[p.index][2] / 100)


# -- outages --------------------------------------------------------------------------------


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_an_outage_is_a_banner_on_every_telemetry_page_never_a_500(client):
    cluster = make_cluster("dark")
    node = make_node(cluster, "gpu-d", gpus=2)
    PrometheusSource.objects.create(cluster=cluster, url=_closed_port(), timeout_seconds=1)
    states = make_telemetry(node, 2)
    states[0].processes = [{"pid": None, "pod": "dark-ns/job", "used_memory_mib": None}]
    states[0].save()
    make_pod(node, "job", "dark-ns", 1, k8s_created_at=timezone.now() - timedelta(days=1))
    team = make_team("dark-team")
    make_namespace(team, cluster, "dark-ns")
    client.force_login(make_user("ada", staff=True))
    for url in (
        reverse("telemetry:fleet"),
        reverse("telemetry:idle"),
        reverse("telemetry:team", args=["dark-team"]),
        reverse("telemetry:showback"),
        reverse("inventory:node", args=[node.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        page = response.content.decode()
        assert "Telemetry of cluster Dark is unavailable." in page, url
        assert "cannot be reached: connection refused" in page, url
    for name in ("idle-allocations", "showback"):
        body = client.get(f"/api/v1/{name}/").json()
        assert [o["cluster"] for o in body["telemetry_unavailable"]] == ["Dark"], name
        assert "cannot be reached" in body["telemetry_unavailable"][0]["message"]
    assert promstate.sync_all()["dark"].startswith("Prometheus at")


def test_sync_prometheus_command_reports_each_source(world, capsys):
    from django.core.management import call_command

    call_command("sync_prometheus")
    out = capsys.readouterr().out
    assert "prod: 4 GPUs on 1 nodes, 1 unknown nodes" in out
    assert "eng: 2 GPUs on 1 nodes" in out


def test_admins_check_a_source_now_and_see_what_it_found(client, world):
    admin_user = make_user("su", staff=True)
    admin_user.is_superuser = True
    admin_user.save()
    client.force_login(admin_user)
    PrometheusSource.objects.create(
        cluster=make_cluster("dark"), url=_closed_port(), timeout_seconds=1
    )
    ids = [str(pk) for pk in PrometheusSource.objects.values_list("pk", flat=True)]
    response = client.post(
        reverse("admin:telemetry_prometheussource_changelist"),
        {"action": "check_now", "_selected_action": ids},
        follow=True,
    )
    assert response.status_code == 200
    found = [str(m) for m in response.context["messages"]]
    assert any(m.startswith("Prod: 4 GPUs on 1 nodes") and "gpu-unknown" in m for m in found)
    assert any(m.startswith("Eng: 2 GPUs on 1 nodes") for m in found)
    assert any(m.startswith("Dark: Prometheus at") and "cannot be reached" in m for m in found)


def test_recorded_five_minute_means_are_read_where_the_source_says_so(world):
    """deploy/monitoring's recording rule: same definitions, fewer samples read."""
    now = timezone.now()
    gpus = list(GpuState.objects.filter(node=world["node_a"]).select_related("node"))
    window = timedelta(hours=2)
    raw_stats, _ = sources.window_stats(gpus, now, window)
    raw_hours = {
        g: h for g, _, h, _ in sources.gpu_hours(gpus, now - timedelta(hours=25), now, now)
    }
    PrometheusSource.objects.filter(cluster=world["prod"]).update(recorded_activity=True)
    stats, metrics = sources.window_stats(gpus, now, window)
    assert metrics[world["prod"].pk] == (
        "DCGM_FI_DEV_GPU_UTIL (recorded: portal:dcgm_gpu_util:avg5m)"
    )
    for g in gpus:
        assert stats[g.pk][0] == raw_stats[g.pk][0]
        assert abs(stats[g.pk][1] - raw_stats[g.pk][1]) <= 1
    hours = {g: h for g, _, h, _ in sources.gpu_hours(gpus, now - timedelta(hours=25), now, now)}
    # The recorded series start 20 hours back, the raw samples 26: what was read shows.
    for g in gpus:
        assert raw_hours[g.pk] == pytest.approx(25, abs=0.1)
        assert hours[g.pk] == pytest.approx(RECORDED_HOURS, abs=0.1)
    assert {a.pod for a in insight.idle_allocations() if a.node == world["node_a"]} == {"idle"}


def test_idle_grant_reclaim_cycle_on_prometheus(world):
    """Issue #25 section 2 with Prometheus as the source, in frozen time within the recorded
    26 hours: warning, "still needed", the hold's end and a new warning, the lowering."""
    import time_machine

    from quotas import reclaim as rules
    from quotas.models import GrantReclaim, ReclaimPolicy
    from telemetry import reclaim

    start = timezone.now() - timedelta(hours=14)
    with time_machine.travel(start - timedelta(days=3), tick=False):
        Grant.objects.create(namespace=world["ns"], resource="nvidia.com/gpu", amount=8,
                             starts_at=timezone.now(), start_applied=True)  # fmt: skip
    ReclaimPolicy.objects.create(
        cluster=world["prod"], enabled=True, idle_hours=6, grace_hours=4, hold_hours=2
    )
    manager = make_user("mona")
    world["vision"].memberships.create(user=manager, role="manager")

    def run(at):
        with time_machine.travel(at, tick=False):
            summary.refresh(world["prod"].pk, at, force=True)
            return reclaim.run(at)

    assert run(start)["warned"] == 1
    r = GrantReclaim.objects.get()
    # 3 GPUs held now (2 busy at 80 %, 1 idle), and 3 held in busy hours: 5 of 8 unused.
    assert (r.granted, r.unused, r.basis["held_now"], r.basis["busy_peak"]) == (8, 5, 3, 3)
    assert r.basis["source"] == sources.source_name(world["prod"].pk)
    rules.answer(r, manager, "the evaluation sweep resumes tonight", start + timedelta(hours=1))
    counts = run(start + timedelta(hours=3, minutes=30))  # the hold (2 h) ended: warned again
    assert (counts["withdrawn"], counts["warned"], counts["lowered"]) == (1, 1, 0)
    assert run(start + timedelta(hours=8))["lowered"] == 1
    [rest] = Grant.objects.filter(namespace=world["ns"], ended_at__isnull=True)
    assert rest.amount == 3
    assert GrantReclaim.objects.get(status="lowered").lowered_by == 5
