"""NVML reading against the fake module: the contract, failures, MIG, processes, topology."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from gpuagent import fake_nvml
from gpuagent import nvml as nvml_module
from gpuagent.agent import Agent
from gpuagent.fake_nvml import FakeNvml
from gpuagent.nvml import NvmlReader, mig_profile_name
from gpuagent.report import build_report
from tests.gpuagent.contract import check_report

FIXED = {"util": 50, "mem_util": 20, "memory_used_mib": 1000, "temp": 40, "power_w": 123.45}


def report_for(scenario: dict, clock=lambda: 1_800_000_000.0) -> dict:
    reader = NvmlReader(FakeNvml(scenario, clock=clock))
    reader.open()
    try:
        snap = reader.read()
    finally:
        reader.close()
    return build_report("gpu-node-1", snap, timestamp=clock(), interval_s=15)


def test_full_report_matches_the_contract():
    report = report_for(
        {
            "gpus": 8,
            "patterns": ["busy", "idle", "hot", "free", "busy", "busy", "idle", "fixed"],
            "fixed": {7: FIXED},
            "mig": {4: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
        }
    )
    check_report(report)
    assert report["node"] == "gpu-node-1"
    assert report["timestamp"] == "2027-01-15T08:00:00Z"
    assert report["driver_version"] == "550.107.02"
    assert report["cuda_driver_version"] == 12040
    assert [g["index"] for g in report["gpus"]] == list(range(8))
    fixed = report["gpus"][7]
    assert fixed["name"] == "NVIDIA A100-SXM4-80GB"
    assert re.match(r"^GPU-[0-9a-f-]{36}$", fixed["uuid"])
    assert fixed["memory_total_mib"] == 81920
    assert fixed["memory_used_mib"] == 1000
    assert (fixed["utilization_gpu_pct"], fixed["utilization_memory_pct"]) == (50, 20)
    assert fixed["temperature_c"] == 40
    assert fixed["power_w"] == 123.5  # mW -> W, one decimal
    assert fixed["power_limit_w"] == 400.0
    assert fixed["mig_mode"] == {"current": False, "pending": False}
    assert fixed["unsupported"] == []
    assert report["gpus"][2]["temperature_c"] >= 85  # the hot one
    assert report["gpus"][1]["utilization_gpu_pct"] <= 3  # idle allocation
    assert len({g["uuid"] for g in report["gpus"]}) == 8


def test_unsupported_metrics_are_null_and_listed():
    report = report_for(
        {
            "gpus": 2,
            "patterns": "fixed",
            "fixed": {0: FIXED, 1: FIXED},
            "failures": {
                "not_supported": {
                    "nvmlDeviceGetEnforcedPowerLimit": "all",
                    "nvmlDeviceGetUtilizationRates": [1],
                },
                "no_permission": {"nvmlDeviceGetTemperature": [1]},
            },
        }
    )
    check_report(report)
    g0, g1 = report["gpus"]
    assert g0["power_limit_w"] is None and g0["unsupported"] == ["power_limit_w"]
    assert g0["temperature_c"] == 40
    assert g1["utilization_gpu_pct"] is None and g1["utilization_memory_pct"] is None
    assert g1["temperature_c"] is None
    assert sorted(g1["unsupported"]) == sorted(
        ["utilization_gpu_pct", "utilization_memory_pct", "temperature_c", "power_limit_w"]
    )
    assert g1["power_w"] == 123.5 and g1["lost"] is False


def test_lost_gpu_is_reported_and_the_others_are_fine(caplog):
    fake = FakeNvml({"gpus": 4, "patterns": "fixed", "fixed": dict.fromkeys(range(4), FIXED)})
    reader = NvmlReader(fake)
    reader.open()
    first = reader.read()
    fake.lost = {2}
    with caplog.at_level(logging.ERROR):
        snap = reader.read()
    report = build_report("n", snap, timestamp=1_800_000_000, interval_s=15)
    check_report(report)
    lost = report["gpus"][2]
    assert lost["lost"] is True and lost["index"] == 2
    # the identity last seen for that index is kept, metrics are null
    assert lost["uuid"] == first["gpus"][2]["uuid"] and lost["name"] == "NVIDIA A100-SXM4-80GB"
    assert lost["memory_used_mib"] is None and lost["processes"] == []
    for i in (0, 1, 3):
        assert report["gpus"][i]["lost"] is False
        assert report["gpus"][i]["utilization_gpu_pct"] == 50
    assert report["topology"][2] == [None] * 4
    assert report["topology"][0][2] is None and report["topology"][0][1] == "NV12"
    assert "GPU 2" in caplog.text and "lost" in caplog.text


def test_lost_from_the_first_read_has_no_identity():
    report = report_for({"gpus": 2, "failures": {"lost": [0]}})
    check_report(report)
    assert report["gpus"][0]["lost"] is True and report["gpus"][0]["uuid"] is None


def test_one_broken_device_does_not_stop_the_others(caplog):
    fake = FakeNvml({"gpus": 3, "patterns": "fixed", "fixed": dict.fromkeys(range(3), FIXED)})
    original = fake.nvmlDeviceGetPowerUsage

    def broken(handle):
        if handle.index == 1:
            raise RuntimeError("driver returned garbage")
        return original(handle)

    fake.nvmlDeviceGetPowerUsage = broken
    reader = NvmlReader(fake)
    reader.open()
    with caplog.at_level(logging.ERROR):
        snap = reader.read()
    report = build_report("n", snap, timestamp=1_800_000_000, interval_s=15)
    check_report(report)
    assert report["gpus"][1]["uuid"] and report["gpus"][1]["power_w"] is None
    assert report["gpus"][0]["power_w"] == report["gpus"][2]["power_w"] == 123.5
    assert "unexpected error" in caplog.text


def test_other_nvml_errors_are_null_but_not_unsupported():
    fake = FakeNvml({"gpus": 1})

    def timeout(handle, sensor):
        raise fake.NVMLError_Unknown()

    fake.nvmlDeviceGetTemperature = timeout
    report = report_for({"gpus": 1})  # sanity: the plain one has a temperature
    assert report["gpus"][0]["temperature_c"] is not None
    reader = NvmlReader(fake)
    reader.open()
    gpu = reader.read()["gpus"][0]
    assert gpu["temperature_c"] is None and "temperature_c" not in gpu["unsupported"]


def test_mig_devices_profiles_and_processes():
    report = report_for(
        {
            "gpus": 2,
            "mig": {0: ["3g.40gb", "2g.20gb", "1g.10gb+me"]},
            "mig_pending": {1: True},
            "processes": {
                0: [
                    {"pid": 4242, "used_memory_mib": 20000, "mig": 0},
                    {"pid": 4343, "used_memory_mib": 5000, "mig": 2},
                ],
                1: [{"pid": 777, "used_memory_mib": 1234}],
            },
        }
    )
    check_report(report)
    g0, g1 = report["gpus"]
    assert g0["mig_mode"] == {"current": True, "pending": True}
    assert [m["profile"] for m in g0["mig_devices"]] == ["3g.40gb", "2g.20gb", "1g.10gb+me"]
    assert [m["index"] for m in g0["mig_devices"]] == [0, 1, 2]
    assert g0["mig_devices"][0]["memory_total_mib"] == 40192
    # utilisation is per GPU only without MIG (as on real hardware): null and listed
    assert g0["utilization_gpu_pct"] is None and "utilization_gpu_pct" in g0["unsupported"]
    by_pid = {p["pid"]: p for p in g0["processes"]}
    assert by_pid[4242] == {
        "pid": 4242,
        "used_memory_mib": 20000,
        "mig_uuid": g0["mig_devices"][0]["uuid"],
    }
    assert by_pid[4343]["mig_uuid"] == g0["mig_devices"][2]["uuid"]
    assert g1["mig_mode"] == {"current": False, "pending": True}
    assert g1["mig_devices"] == []
    assert g1["processes"] == [{"pid": 777, "used_memory_mib": 1234}]


def test_mig_profile_derived_when_profile_info_is_unavailable():
    fake = FakeNvml({"gpus": 1, "mig": {0: ["3g.40gb", "1g.10gb"]}})
    del_names = ["nvmlDeviceGetGpuInstanceProfileInfoById"]

    def unsupported(*args):
        raise fake.NVMLError_NotSupported()

    for name in del_names:
        setattr(fake, name, unsupported)
    reader = NvmlReader(fake)
    reader.open()
    gpu = reader.read()["gpus"][0]
    assert [m["profile"] for m in gpu["mig_devices"]] == ["3g.40gb", "1g.10gb"]


@pytest.mark.parametrize(
    ("slices", "mig_mib", "total_mib", "name"),
    [
        (3, 40192, 81920, "3g.40gb"),
        (1, 9728, 81920, "1g.10gb"),
        (7, 80384, 81920, "7g.80gb"),
        (1, 4864, 40960, "1g.5gb"),
        (3, 19968, 40960, "3g.20gb"),
        (1, 9984, 81559, "1g.10gb"),  # H100: 81559 MiB is nominally 80 GB
        (1, 16384, 143771, "1g.18gb"),  # H200
        (2, 32768, 143771, "2g.35gb"),
        (3, 71680, 143771, "3g.71gb"),
        (7, 143360, 143771, "7g.141gb"),
        (1, 5836, 24576, "1g.6gb"),  # A30
        (4, 24064, 24576, "4g.24gb"),
    ],
)
def test_mig_profile_name_derivation(slices, mig_mib, total_mib, name):
    assert mig_profile_name(slices, mig_mib, total_mib) == name


def test_every_fake_product_profile_derives_to_its_own_name():
    for prod in fake_nvml.PRODUCTS.values():
        for name, (slices, mib, _) in prod.mig.items():
            assert mig_profile_name(slices, mib, prod.memory_mib) == name.removesuffix("+me")


def test_topology_nvswitch_and_pcie():
    nv = report_for({"gpus": 4})["topology"]
    assert nv == [
        ["X", "NV12", "NV12", "NV12"],
        ["NV12", "X", "NV12", "NV12"],
        ["NV12", "NV12", "X", "NV12"],
        ["NV12", "NV12", "NV12", "X"],
    ]
    pcie = report_for({"product": "NVIDIA-L40S", "gpus": 4})["topology"]
    assert pcie == [
        ["X", "PIX", "SYS", "SYS"],
        ["PIX", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "PIX"],
        ["SYS", "SYS", "PIX", "X"],
    ]
    eight = report_for({"product": "NVIDIA-L4", "gpus": 8})["topology"]
    assert eight[0][2] == "NODE" and eight[0][4] == "SYS" and eight[6][7] == "PIX"


def test_topology_direct_nvlink_bridges():
    """Two PCIe cards bridged to each other (remote end is a GPU): NV<links to that GPU>."""
    fake = FakeNvml({"product": "NVIDIA-A100-80GB-PCIe", "gpus": 4})

    def state(handle, link):
        if link >= 3:
            raise fake.NVMLError_InvalidArgument()
        return 1

    def remote(handle, link):
        peer = fake.gpus[handle.index ^ 1]
        return type("Pci", (), {"busId": peer.bus_id.encode()})()

    fake.nvmlDeviceGetNvLinkState = state
    fake.nvmlDeviceGetNvLinkRemotePciInfo = remote
    fake.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, link: fake.NVML_NVLINK_DEVICE_TYPE_GPU
    reader = NvmlReader(fake)
    reader.open()
    topo = reader.read()["topology"]
    assert topo[0][1] == "NV3" and topo[2][3] == "NV3"
    assert topo[0][2] == "SYS" and topo[1][3] == "SYS"


def test_no_driver_logs_and_retries_with_backoff(caplog, clock):
    fake = FakeNvml({"gpus": 1, "failures": {"library_missing": 2}})
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return clock.advance(seconds)

    agent = Agent(fake, "n", None, clock=clock, wait=wait)
    with caplog.at_level(logging.INFO):
        agent.run(max_steps=3)  # two failed inits, then NVML works
    assert "no NVIDIA driver on this host; retrying in 60 s" in caplog.text
    assert "no NVIDIA driver on this host; retrying in 120 s" in caplog.text
    assert "NVML is available now" in caplog.text
    assert waits[:2] == [60, 120]
    assert fake.init_calls == 3 and not fake.initialized  # shut down on exit


def test_init_backoff_is_capped(clock):
    fake = FakeNvml({"failures": {"library_missing": True}})
    agent = Agent(fake, "n", None, clock=clock, wait=clock.advance, init_retry_max_s=600)
    delays = [agent.ensure_nvml() for _ in range(8)]
    assert delays == [60, 120, 240, 480, 600, 600, 600, 600]


def test_fake_implements_the_real_pynvml_names():
    """Every NVML function and error the reader or fake uses exists in nvidia-ml-py."""
    pynvml = pytest.importorskip("pynvml")
    source = Path(fake_nvml.__file__).read_text()
    for name in set(re.findall(r"def (nvml\w+)\(", source)):
        assert hasattr(pynvml, name), name
    for name in re.findall(r"^(NVML_\w+) = ", source, re.M):
        assert getattr(pynvml, name) == getattr(fake_nvml, name), name
    for name in dir(fake_nvml):
        if name.startswith("NVMLError_"):
            assert getattr(pynvml, name)().value == getattr(fake_nvml, name)().value, name
    used = set(re.findall(r"m\.(nvml\w+)", Path(nvml_module.__file__).read_text()))
    assert used and all(hasattr(pynvml, n) for n in used), used - set(dir(pynvml))
