"""Reports the agent produced on a real NVIDIA H200 (driver 580.159.04), recorded with
``python -m gpuagent once --print`` on a lent GPU machine on 2026-11-30: one idle, one
while a CUDA matmul loop ran. ``nvidia-smi`` output from the same machine is kept beside
them, so the agent's figures can be compared with NVIDIA's own tool.
"""

import csv
import json
from pathlib import Path

import pytest

from tests.gpuagent.contract import check_report

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.mark.parametrize("name", ["h200-idle.json", "h200-busy.json"])
def test_real_reports_follow_the_contract(name):
    check_report(load(name))


def test_real_report_agrees_with_nvidia_smi():
    (smi,) = csv.DictReader(
        (FIXTURES / "h200-nvidia-smi.csv").read_text().splitlines(), skipinitialspace=True
    )
    report = load("h200-idle.json")
    (gpu,) = report["gpus"]
    assert gpu["name"] == smi["name"] == "NVIDIA H200"
    assert report["driver_version"] == smi["driver_version"]
    assert f"{gpu['memory_total_mib']} MiB" == smi["memory.total [MiB]"]
    assert gpu["mig_mode"] == {"current": False, "pending": False}
    assert smi["mig.mode.current"] == "Disabled"
    assert f"{gpu['power_limit_w']:.2f} W" == smi["power.limit [W]"]
    assert report["topology"] == [["X"]]  # one GPU: `nvidia-smi topo -m` shows only X


def test_busy_report_shows_load_and_the_process():
    (gpu,) = load("h200-busy.json")["gpus"]
    assert gpu["utilization_gpu_pct"] == 100
    assert gpu["power_w"] > 400 and gpu["memory_used_mib"] > 1000
    assert [p["used_memory_mib"] > 1000 for p in gpu["processes"]] == [True]
