"""The fake fleet as per-node exporters (``fleet --exporter-only``, the Prometheus demo):
real HTTP per node, parsed with prometheus_client's parser, targets as a file_sd file,
nothing posted; and the command line that ``make demo`` runs."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuagent.cli import main
from gpuagent.fake_nvml import FakeNvml
from gpuagent.fleet import Fleet, scenarios

ROOT = Path(__file__).resolve().parents[2]

SPEC = {
    "a100-00": {"token": "t-a", "product": "NVIDIA-A100-SXM4-80GB", "gpus": 2,
                "patterns": ["busy", "free"], "placed": True},
    "a100mig-00": {"token": "t-m", "product": "NVIDIA-A100-SXM4-80GB", "gpus": 1,
                   "mig": {"config": "all-3g.40gb"}},
    "h100-01": {"token": "t-h", "product": "NVIDIA-H100-80GB-HBM3", "gpus": 2, "unhealthy": 1,
                "patterns": ["busy", "busy"], "placed": True},
}  # fmt: skip
PODS = {"a100-00": {"0": "ml-vision/resnet-0/train"}, "a100mig-00": {"0/1": "genomics/fold-1"}}


def _scrape(target: str) -> dict[str, object]:
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=5) as resp:
        assert resp.status == 200
        return {f.name: f for f in text_string_to_metric_families(resp.read().decode())}


def _wait_scrape(target: str, metric: str, timeout: float = 10) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        families = _scrape(target)
        if families.get(metric) is not None and families[metric].samples:
            return families
        if time.monotonic() > deadline:
            raise AssertionError(f"{target}: no {metric} within {timeout}s")
        time.sleep(0.05)


def _free_range(n: int) -> int:
    """A base port with the next ``n`` ports free (bound and released at once)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        socks = []
        try:
            for i in range(n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    pytest.skip("no free port range")


@pytest.fixture
def fleet():
    started: list[tuple[Fleet, threading.Thread]] = []

    def start(**kwargs) -> Fleet:
        f = Fleet.from_spec(SPEC, None, interval_s=0.2, exporter_only=True, pods=PODS, **kwargs)
        t = threading.Thread(target=f.run, kwargs={"tick_s": 0.02}, daemon=True)
        t.start()
        started.append((f, t))
        return f

    yield start
    for f, t in started:
        f.stop()
        t.join(5)


def test_each_node_serves_its_own_gpus_and_nothing_is_posted(fleet, tmp_path):
    base = _free_range(len(SPEC))
    f = fleet(metrics_base_port=base)
    # Node i (name order) on base + i, as --metrics-base-port promises.
    assert [(n.name, n.port) for n in f.nodes] == [
        ("a100-00", base), ("a100mig-00", base + 1), ("h100-01", base + 2)
    ]  # fmt: skip
    assert all(n.agent.sender is None for n in f.nodes)  # exporter-only: no portal at all
    targets = tmp_path / "targets.json"
    f.write_targets(targets)
    entries = json.loads(targets.read_text())
    assert entries == [
        {"targets": [f"127.0.0.1:{n.port}"], "labels": {"instance": n.name}} for n in f.nodes
    ]
    uuids = {name: FakeNvml(sc) for name, _, sc in scenarios(SPEC)}
    for entry in entries:
        node = entry["labels"]["instance"]
        families = _wait_scrape(entry["targets"][0], "gpuagent_gpu_lost")
        fake = uuids[node]
        lost = set(fake.lost)
        if node != "a100mig-00":  # NVML has no utilisation for a GPU with MIG on
            util = families["DCGM_FI_DEV_GPU_UTIL"].samples
            assert {s.labels["Hostname"] for s in util} == {node}
            want = {g.uuid for g in fake.gpus if g.index not in lost}
            assert {s.labels["UUID"] for s in util} == want
        lost_flags = {s.labels["gpu"]: s.value for s in families["gpuagent_gpu_lost"].samples}
        assert lost_flags == {str(g.index): float(g.index in lost) for g in fake.gpus}
    a100 = _wait_scrape(entries[0]["targets"][0], "DCGM_FI_DEV_GPU_UTIL")
    by_gpu = {s.labels["gpu"]: s for s in a100["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert (by_gpu["0"].labels["namespace"], by_gpu["0"].labels["pod"]) == ("ml-vision", "resnet-0")
    assert by_gpu["0"].labels["container"] == "train"
    assert "pod" not in by_gpu["1"].labels and by_gpu["1"].value == 0  # a free GPU
    mig = _wait_scrape(entries[1]["targets"][0], "DCGM_FI_DEV_FB_USED")
    instances = {s.labels["GPU_I_ID"]: s.labels for s in mig["DCGM_FI_DEV_FB_USED"].samples}
    assert len(instances) == 2 and {v["GPU_I_PROFILE"] for v in instances.values()} == {"3g.40gb"}
    held = [v for v in instances.values() if v.get("pod")]
    assert [(v["namespace"], v["pod"]) for v in held] == [("genomics", "fold-1")]


def test_a_taken_port_names_the_node_and_frees_the_others(fleet):
    base = _free_range(len(SPEC))
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", base + 1))
        blocker.listen()
        with pytest.raises(
            OSError, match=rf"a100mig-00: cannot serve /metrics on 127.0.0.1:{base + 1}"
        ):
            Fleet.from_spec(SPEC, None, exporter_only=True, metrics_base_port=base)
    with socket.socket() as again:  # the first node's exporter was closed, not leaked
        again.bind(("127.0.0.1", base))


def test_cli_refuses_what_cannot_work(tmp_path, caplog):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(SPEC))
    assert main(["fleet", "--tokens", str(tokens)]) == 2  # neither a portal nor exporter-only
    assert main(["fleet", "--tokens", str(tokens), "--portal", "http://x",
                 "--targets-file", str(tmp_path / "t.json")]) == 2  # fmt: skip
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["fleet", "--exporter-only", "--tokens", str(tmp_path / "bad.json")]) == 2
    err = caplog.text
    assert "set --portal or PORTAL_URL (or use --exporter-only)" in err
    assert "--targets-file needs --exporter-only" in err
    assert "cannot read the tokens file" in err


def test_cli_exporter_only_serves_until_sigterm(tmp_path):
    """The command ``make demo`` runs: targets file once listening, clean exit on SIGTERM."""
    tokens, pods, targets = tmp_path / "tokens.json", tmp_path / "pods.json", tmp_path / "t.json"
    tokens.write_text(json.dumps(SPEC))
    pods.write_text(json.dumps(PODS))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "fleet", "--exporter-only", "--tokens", str(tokens),
         "--pods", str(pods), "--targets-file", str(targets), "--interval", "0.5"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not targets.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        entries = json.loads(targets.read_text())
        assert [e["labels"]["instance"] for e in entries] == sorted(SPEC)
        families = _wait_scrape(entries[0]["targets"][0], "DCGM_FI_DEV_GPU_UTIL")
        assert families["gpuagent_snapshot_timestamp_seconds"].samples[0].value > 1e9
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=15)[0]
    assert proc.returncode == 0, out
    assert "serving /metrics only" in out and "fake agent fleet stopped" in out
