"""``TELEMETRY_SOURCE=prometheus make demo``: the source check, the history backfill (the
exporter's own series at past instants), a real promtool + Prometheus answering a range
query over last week and continuing it with live scrapes, and the demo's source command."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from devstack import REPO_ROOT
from devstack import demo_prometheus as dp
from gpuagent.agent import Agent
from gpuagent.exporter import Exporter
from gpuagent.fake_nvml import FakeNvml
from gpuagent.fleet import Fleet, device_pods, scenarios
from gpuagent.podresources import StaticPodResolver
from telemetry.models_source import PrometheusSource
from tests.factories import make_cluster, make_node, make_pod
from tests.prereqs import need
from tests.prom import Prometheus, PrometheusError, free_port, start_prometheus

SPEC = {
    "a100-00": {"product": "NVIDIA-A100-SXM4-80GB", "gpus": 2, "patterns": ["busy", "idle"],
                "placed": True},
    "a100mig-00": {"product": "NVIDIA-A100-SXM4-80GB", "gpus": 1,
                   "mig": {"config": "all-3g.40gb"}},
    "h100-01": {"product": "NVIDIA-H100-80GB-HBM3", "gpus": 2, "unhealthy": 1,
                "patterns": ["busy", "busy"], "placed": True},
}  # fmt: skip
PODS = {"a100-00": {"0": "ml-vision/resnet-0"}, "a100mig-00": {"0/1": "genomics/fold-1/main"}}


# -- TELEMETRY_SOURCE ---------------------------------------------------------------------


def test_telemetry_source_accepts_two_values_and_names_them_otherwise():
    assert dp.telemetry_source({}) == "agent"
    assert dp.telemetry_source({"TELEMETRY_SOURCE": ""}) == "agent"
    assert dp.telemetry_source({"TELEMETRY_SOURCE": " Prometheus "}) == "prometheus"
    with pytest.raises(dp.PromDemoError, match=r"TELEMETRY_SOURCE=agent .*TELEMETRY_SOURCE=prom"):
        dp.telemetry_source({"TELEMETRY_SOURCE": "dcgm"})


def test_make_demo_with_an_unknown_source_stops_before_starting_anything(tmp_path):
    env = {**os.environ, "DATA_DIR": str(tmp_path), "TELEMETRY_SOURCE": "grafana"}
    done = subprocess.run([sys.executable, "-m", "devstack", "demo"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "TELEMETRY_SOURCE='grafana' is not a telemetry source" in done.stdout
    assert "TELEMETRY_SOURCE=agent (the default) or TELEMETRY_SOURCE=prometheus" in done.stdout
    assert not (tmp_path / "postgres").exists()  # nothing was started


def test_prometheus_source_without_prometheus_names_the_debian_package(tmp_path):
    """No ``prometheus`` on PATH (and no apt-get to install it): one clear line, exit 2,
    before any service starts."""
    env = {**os.environ, "DATA_DIR": str(tmp_path), "TELEMETRY_SOURCE": "prometheus",
           "PATH": str(tmp_path / "empty")}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "devstack", "demo"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "install the Debian package prometheus" in done.stdout
    assert not (tmp_path / "postgres").exists()


# -- the history --------------------------------------------------------------------------


def test_instants_cover_the_days_coarse_then_fine():
    now = 1_796_000_000.0
    times = dp.instants(now, 7)
    assert times == sorted(times) and times[-1] < now
    assert now - 7 * 86400 < times[0] <= now - 7 * 86400 + dp.COARSE_STEP
    gaps = {round(b - a) for a, b in itertools.pairwise(times)}
    assert max(gaps) < 300  # inside Prometheus' 5-minute lookback: no holes in a chart
    fine = [t for t in times if t >= now - dp.FINE_HOURS * 3600]
    assert {round(b - a) for a, b in itertools.pairwise(fine)} == {60}
    assert dp.instants(now, 7) == times  # the same grid on a restart


def _rendered(spec, at: float, pods) -> dict[tuple, float]:
    """What the live fleet's exporters serve at ``at``: each node's Agent and Exporter."""
    out = {}
    for name, _cfg, scenario in scenarios(spec):
        fake = FakeNvml(scenario, clock=lambda: at)
        exporter = Exporter()
        resolver = StaticPodResolver(device_pods(fake, pods.get(name, {})))
        agent = Agent(fake, name, None, clock=lambda: at, exporter=exporter, pods=resolver)
        assert agent.ensure_nvml() is None
        agent.collect()
        for family in exporter.registry.collect():
            for s in family.samples:
                labels = {**s.labels, "job": dp.JOB, "instance": name}
                out[(s.name, *sorted(labels.items()))] = s.value
        agent.reader.close()
    return out


def test_backfilled_series_are_what_the_exporter_renders_at_that_instant():
    at = 1_796_000_123.0
    data = dp.history(SPEC, [at - 3600, at], pods=PODS)  # lost from the start: as live
    got = {}
    for name, (_help, series) in data.items():
        for s in series.values():
            assert list(s.times) == [at - 3600, at]
            got[(name, *sorted(s.labels.items()))] = s.values[-1]
    want = _rendered(SPEC, at, PODS)
    assert got == want
    names = {k[0] for k in got}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "gpuagent_gpu_lost"} <= names
    labels = [dict(k[1:]) for k in got if k[0] == "DCGM_FI_DEV_FB_USED"]
    assert {(d.get("GPU_I_PROFILE"), d.get("pod")) for d in labels if d["Hostname"] == "a100mig-00"
            } == {("3g.40gb", None), ("3g.40gb", "fold-1")}  # fmt: skip
    assert any(d.get("pod") == "resnet-0" and d["namespace"] == "ml-vision" for d in labels)


def test_a_gpu_lost_during_the_week_has_history_before_only():
    now = 1_796_000_000.0
    data = dp.history(SPEC, [now - 7200, now - 60], lost_since=now - 3600)
    util = data["DCGM_FI_DEV_GPU_UTIL"][1].values()
    lost_gpu = [s for s in util if s.labels["Hostname"] == "h100-01" and s.labels["gpu"] == "1"]
    assert [list(s.times) for s in lost_gpu] == [[now - 7200]]
    flags = data["gpuagent_gpu_lost"][1].values()
    flag = next(s for s in flags if s.labels["Hostname"] == "h100-01" and s.labels["gpu"] == "1")
    assert list(flag.values) == [0.0, 1.0]


# -- a real promtool and Prometheus -------------------------------------------------------


def test_backfill_then_prometheus_answers_last_week_and_goes_on_live(tmp_path):
    """Blocks from promtool, the demo's own config and command, a live exporter fleet:
    a range query over the past week finds the backfill, and a live scrape continues the
    same series (one series per GPU, not one for the past and one for now)."""
    prom, promtool = need("prometheus"), need("promtool")
    tsdb = tmp_path / "prometheus"
    now = time.time()
    lines: list[str] = []
    samples = dp.backfill(SPEC, tsdb, days=7, now=now, pods=PODS, promtool=promtool,
                          log=lines.append)  # fmt: skip
    assert samples > 5 * 2000 and dp.has_blocks(tsdb)
    assert not list(tmp_path.glob(".prometheus-backfill*"))  # the scratch folder is gone
    assert dp.backfill(SPEC, tsdb, days=7, pods=PODS, promtool=promtool, log=lines.append) == 0
    assert "already holds blocks; no backfill" in lines[-1]

    fleet = Fleet.from_spec(SPEC, None, interval_s=0.5, exporter_only=True, pods=PODS)
    thread = threading.Thread(target=fleet.run, kwargs={"tick_s": 0.05}, daemon=True)
    thread.start()
    targets, config = tmp_path / "targets.json", tmp_path / "prometheus.yml"
    fleet.write_targets(targets)
    dp.write_config(config, targets, scrape_interval="1s")
    check = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                           text=True, check=False)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(dp.server_command(prom, config, tsdb, port, 7), stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    server = Prometheus(proc, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + 30
        while not dp.ready(server.url):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        one = 'DCGM_FI_DEV_GPU_UTIL{Hostname="a100-00",gpu="0"}'
        week = server.query_range(one, now - 7 * 86400 + 600, now - 60, 3600)
        assert len(week) == 1 and len(week[0]["values"]) >= 167
        assert week[0]["metric"]["pod"] == "resnet-0" and week[0]["metric"]["job"] == dp.JOB
        assert all(50 <= float(v) <= 100 or float(v) < 41 for _, v in week[0]["values"])
        # The exact backfilled value at one instant is the fake GPU's value then.
        t = dp.instants(now, 7)[100]
        at = server.query(one, time=t)
        assert (
            float(at[0]["value"][1])
            == _rendered(SPEC, t, PODS)[
                ("DCGM_FI_DEV_GPU_UTIL", *sorted(_labels_of(at[0]["metric"]).items()))
            ]
        )
        server.wait_for(f"{one} and timestamp({one}) > {now + 1}", timeout=20)  # live scrape
        series = server.query(f"count_over_time({one}[8d])")
        assert len(series) == 1 and float(series[0]["value"][1]) > samples / 200
        assert len(server.query('DCGM_FI_DEV_GPU_UTIL{Hostname="a100-00"}')) == 2
    except PrometheusError:
        raise AssertionError(log.read_text()) from None
    finally:
        server.stop()
        fleet.stop()
        thread.join(5)


def _labels_of(metric: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in metric.items() if k != "__name__"}


def test_tests_prom_helper_serves_a_backfill_too(tmp_path):
    """The same blocks under ``tests.prom.start_prometheus`` (how telemetry tests use it)."""
    promtool = need("promtool")
    now = time.time()
    dp.backfill(SPEC, tmp_path / "prometheus" / "data", days=2, now=now, promtool=promtool,
                log=lambda _: None)  # fmt: skip
    server = start_prometheus(tmp_path, [], retention="15d")
    try:
        # Whole GPUs with utilisation: a100-00's two and h100-01's two, one of which fell
        # off the bus a day ago (half the backfill); the MIG GPU reports none.
        before = server.query_range("count(DCGM_FI_DEV_GPU_UTIL)", now - 2 * 86400 + 600,
                                    now - 86400 - 600, 600)  # fmt: skip
        after = server.query_range("count(DCGM_FI_DEV_GPU_UTIL)", now - 86400 + 600, now - 60, 600)
        assert {float(v) for _, v in before[0]["values"]} == {4.0}
        assert {float(v) for _, v in after[0]["values"]} == {3.0}
    finally:
        server.stop()


# -- the demo's source command ------------------------------------------------------------


@pytest.mark.django_db
def test_demo_source_command_switches_and_writes_pod_attribution(tmp_path):
    cluster = make_cluster("demo")
    a100 = make_node(cluster, "a100-00", gpus=2)
    mig = make_node(cluster, "a100mig-00", gpus=1)
    make_pod(a100, "resnet-0", gpus=1)
    make_pod(a100, "pending-1", gpus=1, phase="Pending")  # holds nothing yet
    make_pod(mig, "fold-1", namespace="genomics", gpus=0,
             requests={"nvidia.com/mig-3g.40gb": 2})  # fmt: skip
    tokens, pods = tmp_path / "tokens.json", tmp_path / "pods.json"
    tokens.write_text(json.dumps(SPEC))
    call_command("demo_prometheus_source", url="http://127.0.0.1:9090", write_pods=str(pods),
                 tokens=str(tokens))  # fmt: skip
    source = PrometheusSource.objects.get(cluster=cluster)
    assert (source.url, source.enabled, source.cluster_label) == ("http://127.0.0.1:9090", True, "")
    assert json.loads(pods.read_text()) == {
        "a100-00": {"0": "ml-vision/resnet-0"},
        "a100mig-00": {"0/0": "genomics/fold-1", "0/1": "genomics/fold-1"},
    }
    call_command("demo_prometheus_source", disable=True)
    assert not PrometheusSource.objects.get(cluster=cluster).enabled
    call_command("demo_prometheus_source", url="http://127.0.0.1:9191")  # back, same row
    assert PrometheusSource.objects.get(cluster=cluster).enabled
    assert PrometheusSource.objects.count() == 1
    with pytest.raises(CommandError, match="--url 'ftp://x'"):
        call_command("demo_prometheus_source", url="ftp://x")
    with pytest.raises(CommandError, match="no cluster 'elsewhere'"):
        call_command("demo_prometheus_source", cluster="elsewhere", disable=True)


def test_banner_names_the_source_and_url(tmp_path):
    targets = tmp_path / "t.json"
    targets.write_text(json.dumps([{"targets": ["127.0.0.1:1"], "labels": {}}] * 3))
    lines = "\n".join(dp.banner_lines("prometheus", "http://127.0.0.1:9090", targets))
    assert "Telemetry source: prometheus, http://127.0.0.1:9090" in lines
    assert "scraping 3 fake dcgm-exporter(s)" in lines
    assert "Telemetry source: agent" in "\n".join(dp.banner_lines("agent"))


def test_exporter_ports_fall_back_unless_chosen(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert dp.exporter_base_port(3, {"DEMO_EXPORTER_PORT": ""}) in (0, 19400)
        with pytest.raises(dp.PromDemoError, match=f"DEMO_EXPORTER_PORT={taken}: ports"):
            dp.exporter_base_port(3, {"DEMO_EXPORTER_PORT": str(taken)})
    with pytest.raises(dp.PromDemoError, match="not a port number"):
        dp.exporter_base_port(3, {"DEMO_EXPORTER_PORT": "nine"})
    assert Path(dp.files(tmp_path)["tsdb"]) == tmp_path / "prometheus"
