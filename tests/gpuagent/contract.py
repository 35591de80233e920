"""A strict check of a report against docs/agent-report.md, independent of gpuagent's code."""

from __future__ import annotations

import re
from typing import Any

TOPOLOGY_VALUE = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
GPU_KEYS = {
    "index": int,
    "uuid": str,
    "name": str,
    "lost": bool,
    "memory_total_mib": int,
    "memory_used_mib": int,
    "utilization_gpu_pct": int,
    "utilization_memory_pct": int,
    "temperature_c": int,
    "power_w": float,
    "power_limit_w": float,
    "mig_mode": dict,
    "mig_devices": list,
    "processes": list,
    "unsupported": list,
}
NULLABLE = set(GPU_KEYS) - {"index", "lost", "mig_devices", "processes", "unsupported"}


def _is(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_report(report: dict[str, Any]) -> None:
    """Assert every key and type the contract names (and no others)."""
    assert set(report) == {
        "node",
        "timestamp",
        "agent_version",
        "interval_s",
        "driver_version",
        "cuda_driver_version",
        "gpus",
        "topology",
    }
    assert isinstance(report["node"], str) and report["node"]
    assert TIMESTAMP.match(report["timestamp"])
    assert isinstance(report["agent_version"], str)
    assert _is(report["interval_s"], int)
    assert report["driver_version"] is None or isinstance(report["driver_version"], str)
    assert report["cuda_driver_version"] is None or _is(report["cuda_driver_version"], int)
    gpus = report["gpus"]
    assert isinstance(gpus, list) and len(gpus) <= 64
    for gpu in gpus:
        assert set(gpu) == set(GPU_KEYS), set(gpu) ^ set(GPU_KEYS)
        for key, kind in GPU_KEYS.items():
            value = gpu[key]
            if value is None:
                assert key in NULLABLE, key
                continue
            assert _is(value, kind), (key, value)
        for key in gpu["unsupported"]:
            assert key in GPU_KEYS and gpu[key] in (None, []), key
        if gpu["mig_mode"] is not None:
            assert set(gpu["mig_mode"]) == {"current", "pending"}
            assert all(isinstance(v, bool) for v in gpu["mig_mode"].values())
        assert len(gpu["mig_devices"]) <= 64
        for mig in gpu["mig_devices"]:
            assert set(mig) == {"index", "uuid", "profile", "memory_total_mib", "memory_used_mib"}
            assert _is(mig["index"], int)
            assert mig["uuid"].startswith("MIG-")
            assert re.match(r"^\d+g\.\d+gb(\+me)?$", mig["profile"]), mig["profile"]
            assert _is(mig["memory_total_mib"], int) and _is(mig["memory_used_mib"], int)
        assert len(gpu["processes"]) <= 256
        mig_uuids = {m["uuid"] for m in gpu["mig_devices"]}
        for proc in gpu["processes"]:
            assert (
                {"pid", "used_memory_mib"}
                <= set(proc)
                <= {
                    "pid",
                    "used_memory_mib",
                    "pod",
                    "mig_uuid",
                }
            )
            assert _is(proc["pid"], int)
            assert proc["used_memory_mib"] is None or _is(proc["used_memory_mib"], int)
            if "mig_uuid" in proc:
                assert proc["mig_uuid"] in mig_uuids
            if "pod" in proc:
                assert re.match(r"^[^/]+/[^/]+$", proc["pod"])
    topo = report["topology"]
    if topo is not None:
        assert len(topo) == len(gpus)
        for i, row in enumerate(topo):
            assert len(row) == len(gpus)
            for j, cell in enumerate(row):
                if cell is None:
                    continue
                assert TOPOLOGY_VALUE.match(cell), cell
                assert (cell == "X") == (i == j)
