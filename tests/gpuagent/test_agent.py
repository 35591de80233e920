"""The agent loop, the CLI and SIGTERM, with the fake NVML and a local portal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuagent.agent import Agent
from gpuagent.cli import parse_args
from gpuagent.fake_nvml import FakeNvml
from gpuagent.podresources import StaticPodResolver, default_resolver
from gpuagent.sender import Sender, reports_url
from tests.gpuagent.contract import check_report

ROOT = Path(__file__).resolve().parents[2]


def test_loop_reports_every_interval_and_buffers_through_an_outage(portal, clock):
    fake = FakeNvml({"gpus": 2}, clock=clock)
    sender = Sender(reports_url(portal.url), lambda: "t", clock=clock, rand=lambda: 1.0)
    agent = Agent(fake, "n1", sender, interval_s=15, clock=clock, wait=clock.advance)
    agent.run(max_steps=4)
    assert len(portal.received) == 4
    stamps = [r["timestamp"] for r in portal.received]
    assert len(set(stamps)) == 4
    for r in portal.received:
        check_report(r)
    portal.statuses = [503] * 3
    for _ in range(6):
        delay = agent.step()
        clock.advance(delay)
    assert sender.failures == 0 and not sender.buffer  # recovered and flushed
    got = [r["timestamp"] for r in portal.received]
    assert got == sorted(got) and len(set(got)) == len(got)


def test_nvml_failure_mid_run_reinitialises(portal, clock):
    fake = FakeNvml({"gpus": 1}, clock=clock)
    sender = Sender(reports_url(portal.url), lambda: "t", clock=clock)
    agent = Agent(fake, "n1", sender, clock=clock, wait=clock.advance)
    agent.step()
    original = fake.nvmlDeviceGetCount
    fake.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(fake.NVMLError_Unknown())
    clock.advance(15)
    agent.step()
    assert not agent.reader.initialized
    fake.nvmlDeviceGetCount = original
    clock.advance(15)
    agent.step()
    assert agent.reader.initialized and len(portal.received) == 2


def test_pod_attribution_through_a_resolver(clock):
    fake = FakeNvml(
        {
            "gpus": 2,
            "mig": {1: ["3g.40gb"]},
            "processes": {
                0: [{"pid": 10, "used_memory_mib": 100}],
                1: [{"pid": 11, "used_memory_mib": 100, "mig": 0}],
            },
        },
        clock=clock,
    )
    gpu0, mig = fake.gpus[0].uuid, fake.gpus[1].mig[0].uuid
    pods = StaticPodResolver({gpu0: "ml/train-0", mig: "nlp/notebook-1"})
    agent = Agent(fake, "n1", None, pods=pods, clock=clock)
    agent.ensure_nvml()
    report = agent.collect()
    check_report(report)
    assert report["gpus"][0]["processes"][0]["pod"] == "ml/train-0"
    assert report["gpus"][1]["processes"][0]["pod"] == "nlp/notebook-1"


def test_default_resolver_is_a_noop_even_with_the_socket(tmp_path, caplog):
    sock = tmp_path / "kubelet.sock"
    sock.write_text("")
    with caplog.at_level("INFO"):
        assert default_resolver(str(sock)).pods_by_device() == {}
    assert "no gRPC client" in caplog.text
    assert default_resolver(None).pods_by_device() == {}


def test_cli_parsing_defaults_and_env(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    monkeypatch.setenv("PORTAL_URL", "http://portal:8000")
    monkeypatch.delenv("GPU_AGENT_TOKEN_FILE", raising=False)
    args = parse_args([])
    assert args.command == "run" and args.node == "gpu-7" and args.portal == "http://portal:8000"
    assert args.token_file == "/var/run/secrets/gpu-portal/token"
    assert args.interval == 15 and args.buffer == 240 and args.max_age == 3600
    args = parse_args(["--interval", "5", "--token-file", "/t", "--buffer", "10"])
    assert (args.command, args.interval, args.token_file, args.buffer) == ("run", 5, "/t", 10)
    args = parse_args(["once", "--print", "--fake-nvml", "s.yaml"])
    assert args.command == "once" and args.print and args.fake_nvml == "s.yaml"
    args = parse_args(["fleet", "--portal", "http://p", "--tokens", "t.json"])
    assert (args.command, args.tokens, args.interval) == ("fleet", "t.json", 15)
    with pytest.raises(SystemExit):
        parse_args(["fleet"])  # --tokens is required


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def test_once_print_needs_no_token_or_portal(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("gpus: 2\nmig: {1: ['3g.40gb', '3g.40gb']}\n")
    out = subprocess.run(
        [sys.executable, "-m", "gpuagent", "once", "--print", "--fake-nvml", str(scenario)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=30,
        check=True,
    )
    report = json.loads(out.stdout)
    check_report(report)
    assert [m["profile"] for m in report["gpus"][1]["mig_devices"]] == ["3g.40gb", "3g.40gb"]
    assert "django" not in out.stderr.lower()


def test_agent_imports_no_django():
    code = (
        "import sys, gpuagent.cli, gpuagent.agent, gpuagent.fleet, gpuagent.fake_nvml; "
        "sys.exit(any(m.split('.')[0] in ('django', 'portal') for m in sys.modules))"
    )
    subprocess.run([sys.executable, "-c", code], env=_env(), cwd=ROOT, check=True, timeout=30)


def test_sigterm_stops_cleanly_after_the_current_post(portal, tmp_path):
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"gpus": 1}))
    token = tmp_path / "token"
    token.write_text("tok-9\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuagent",
            "--fake-nvml",
            str(scenario),
            "--portal",
            portal.url,
            "--token-file",
            str(token),
            "--node",
            "sig-node",
            "--interval",
            "30",
        ],
        env=_env(),
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not portal.received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert portal.received, "the agent never posted"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped" in err and "Traceback" not in err
    assert portal.received[0]["node"] == "sig-node"
    assert portal.headers[0]["Authorization"] == "Bearer tok-9"


def test_run_without_portal_url_exits_with_a_message(monkeypatch):
    env = _env()
    env.pop("PORTAL_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "gpuagent", "run"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "PORTAL_URL" in out.stderr
