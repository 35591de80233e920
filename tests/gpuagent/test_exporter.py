"""The agent as a Prometheus exporter: /metrics over real HTTP with dcgm-exporter's names,
parsed with prometheus_client's parser, and scraped by a real Prometheus (Debian package)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuagent.agent import Agent
from gpuagent.cli import parse_args
from gpuagent.exporter import Exporter
from gpuagent.fake_nvml import FakeNvml
from gpuagent.podresources import StaticPodResolver
from tests.prom import free_port, start_prometheus

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024

# GPU 0 fixed values, GPU 1 busy, GPU 2 MIG with two 3g.40gb instances, GPU 3 lost.
SCENARIO = {
    "product": "NVIDIA-A100-SXM4-80GB",
    "gpus": 4,
    "seed": 3,
    "patterns": ["fixed", "busy", "busy", "busy"],
    "fixed": {
        0: {"util": 57, "mem_util": 21, "memory_used_mib": 12000, "temp": 44, "power_w": 123.4}
    },
    "mig": {2: ["3g.40gb", "3g.40gb"]},
}

TYPES_AND_HELP = {
    # etc/default-counters.csv in NVIDIA/dcgm-exporter
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
}


def _scrape(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _series(family) -> dict[tuple, tuple[dict[str, str], float]]:
    """Samples keyed by (gpu, GPU_I_ID) -> (labels, value)."""
    return {
        (s.labels["gpu"], s.labels.get("GPU_I_ID")): (s.labels, s.value) for s in family.samples
    }


def test_metrics_over_http_match_the_fake_gpus(clock):
    fake = FakeNvml(SCENARIO, clock=clock)
    fake.nvmlInit()
    uuids = [fake.nvmlDeviceGetUUID(fake.nvmlDeviceGetHandleByIndex(i)) for i in range(4)]
    mig_uuids = [
        fake.nvmlDeviceGetUUID(
            fake.nvmlDeviceGetMigDeviceHandleByIndex(fake.nvmlDeviceGetHandleByIndex(2), i)
        )
        for i in range(2)
    ]
    fake.nvmlShutdown()
    pods = StaticPodResolver({uuids[0]: "team-a/train-0", mig_uuids[1]: "team-b/notebook-1"})
    exporter = Exporter()
    port = exporter.serve(0, "127.0.0.1")
    agent = Agent(
        fake,
        "gpu-node-7",
        None,
        interval_s=15,
        pods=pods,
        clock=clock,
        wait=clock.advance,
        exporter=exporter,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        # Before the first snapshot: the families are there, without series.
        assert not _scrape(url)["DCGM_FI_DEV_GPU_UTIL"].samples
        agent.step()  # the first read sees GPU 3 healthy, so its identity is known
        fake.lost = {3}
        clock.advance(15)
        agent.step()
        families = _scrape(url)
    finally:
        exporter.close()
        agent.reader.close()
    # What NVML says at the same clock, read from the fake directly.
    fake.nvmlInit()
    parent = fake.nvmlDeviceGetHandleByIndex(2)
    migs = [fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, i) for i in range(2)]
    mig_mem = [fake.nvmlDeviceGetMemoryInfo(m) for m in migs]
    mig_gi = [fake.nvmlDeviceGetGpuInstanceId(m) for m in migs]
    busy = fake.nvmlDeviceGetUtilizationRates(fake.nvmlDeviceGetHandleByIndex(1))
    fake.nvmlShutdown()

    for name, (kind, help_) in TYPES_AND_HELP.items():
        assert families[name].type == kind, name
        assert families[name].documentation == help_, name
    assert "DCGM_FI_DEV_XID_ERRORS" not in families  # NVML has no XID value to poll

    model = "NVIDIA A100-SXM4-80GB"
    util = _series(families["DCGM_FI_DEV_GPU_UTIL"])
    # Only GPUs NVML gives utilisation for: not the MIG-enabled one (NotSupported), not lost.
    assert set(util) == {("0", None), ("1", None)}
    labels, value = util[("0", None)]
    assert labels == {
        "gpu": "0",
        "UUID": uuids[0],
        "device": "nvidia0",
        "modelName": model,
        "Hostname": "gpu-node-7",
        "namespace": "team-a",
        "pod": "train-0",
    }
    assert value == 57
    assert util[("1", None)][1] == busy.gpu
    assert "pod" not in util[("1", None)][0]
    assert _series(families["DCGM_FI_DEV_MEM_COPY_UTIL"])[("0", None)][1] == 21
    assert _series(families["DCGM_FI_DEV_GPU_TEMP"])[("0", None)][1] == 44
    assert _series(families["DCGM_FI_DEV_POWER_USAGE"])[("0", None)][1] == pytest.approx(123.4)

    used = _series(families["DCGM_FI_DEV_FB_USED"])
    free = _series(families["DCGM_FI_DEV_FB_FREE"])
    assert used[("0", None)][1] == 12000 and free[("0", None)][1] == 81920 - 12000
    # MIG: framebuffer per GPU instance, with the instance's profile and id.
    assert set(used) == {("0", None), ("1", None), ("2", "1"), ("2", "2")}
    for i in range(2):
        labels, value = used[("2", str(mig_gi[i]))]
        assert labels["GPU_I_PROFILE"] == "3g.40gb" and labels["UUID"] == uuids[2]
        assert labels["device"] == "nvidia2" and labels["modelName"] == model
        assert value == mig_mem[i].used // MIB
        assert free[("2", str(mig_gi[i]))][1] == (mig_mem[i].total - mig_mem[i].used) // MIB
    assert used[("2", str(mig_gi[1]))][0]["pod"] == "notebook-1"
    assert used[("2", str(mig_gi[1]))][0]["namespace"] == "team-b"
    assert "pod" not in used[("2", str(mig_gi[0]))][0]

    # The lost GPU: no DCGM_FI_* series (no stale values), flagged by gpuagent_gpu_lost.
    for name in TYPES_AND_HELP:
        assert all(s.labels["gpu"] != "3" for s in families[name].samples), name
    lost = {s.labels["gpu"]: s for s in families["gpuagent_gpu_lost"].samples}
    assert lost["3"].value == 1 and lost["3"].labels["UUID"] == uuids[3]
    assert [lost[g].value for g in "012"] == [0, 0, 0]
    stamp = families["gpuagent_snapshot_timestamp_seconds"].samples
    assert [s.value for s in stamp] == [clock.now]


def test_cli_options_and_env(monkeypatch):
    for name in ("GPU_AGENT_METRICS_PORT", "GPU_AGENT_METRICS_ADDRESS", "GPU_AGENT_EXPORTER_ONLY"):
        monkeypatch.delenv(name, raising=False)
    args = parse_args([])
    assert (args.metrics_port, args.metrics_address, args.exporter_only) == (9400, "0.0.0.0", False)  # noqa: S104
    monkeypatch.setenv("GPU_AGENT_METRICS_PORT", "9500")
    monkeypatch.setenv("GPU_AGENT_METRICS_ADDRESS", "127.0.0.1")
    monkeypatch.setenv("GPU_AGENT_EXPORTER_ONLY", "true")
    args = parse_args([])
    assert (args.metrics_port, args.metrics_address, args.exporter_only) == (
        9500,
        "127.0.0.1",
        True,
    )
    args = parse_args(["--metrics-port", "0"])
    assert args.metrics_port == 0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("PORTAL_URL", None)
    return env


def test_exporter_only_needs_a_port():
    out = subprocess.run(
        [sys.executable, "-m", "gpuagent", "run", "--exporter-only", "--metrics-port", "0"],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "--metrics-port" in out.stderr


def test_real_prometheus_scrapes_the_agent(tmp_path):
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({**SCENARIO, "failures": {"lost": [3]}}))
    port = free_port()
    cmd = [sys.executable, "-m", "gpuagent", "run", "--exporter-only", "--fake-nvml", str(scenario)]
    cmd += ["--node", "prom-node", "--interval", "1", "--metrics-address", "127.0.0.1"]
    cmd += ["--metrics-port", str(port)]
    agent = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stderr=subprocess.PIPE, text=True)
    prom = None
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if _scrape(f"http://127.0.0.1:{port}/metrics")["DCGM_FI_DEV_GPU_UTIL"].samples:
                    break
            except OSError:
                pass
            assert agent.poll() is None, agent.stderr.read()
            assert time.monotonic() < deadline, "the agent never served GPU metrics"
            time.sleep(0.1)
        prom = start_prometheus(tmp_path, [f"127.0.0.1:{port}"])
        result = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{Hostname="prom-node"}', count=2)
        by_gpu = {r["metric"]["gpu"]: r for r in result}
        assert set(by_gpu) == {"0", "1"}  # every GPU NVML gives utilisation for
        assert float(by_gpu["0"]["value"][1]) == 57
        for gpu, r in by_gpu.items():
            m = r["metric"]
            assert m["device"] == f"nvidia{gpu}" and m["modelName"] == "NVIDIA A100-SXM4-80GB"
            assert m["UUID"].startswith("GPU-") and m["instance"] == f"127.0.0.1:{port}"
        mig = prom.wait_for('DCGM_FI_DEV_FB_USED{GPU_I_PROFILE="3g.40gb"}', count=2)
        assert sorted(r["metric"]["GPU_I_ID"] for r in mig) == ["1", "2"]
        lost = prom.query('gpuagent_gpu_lost{Hostname="prom-node"} == 1')
        assert [r["metric"]["gpu"] for r in lost] == ["3"]
    finally:
        if prom is not None:
            prom.stop()
        agent.send_signal(signal.SIGTERM)
        try:
            _, err = agent.communicate(timeout=10)
        finally:
            if agent.poll() is None:
                agent.kill()
    assert agent.returncode == 0, err
    assert "Traceback" not in err
