"""Build the report body exactly as ``docs/agent-report.md`` specifies (the ingest contract)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from gpuagent import __version__
from gpuagent.podresources import PodResolver

# The contract's limits; the agent trims rather than have the whole report refused (413/400).
MAX_GPUS = 64
MAX_MIG_DEVICES = 64
MAX_PROCESSES = 256


def iso_timestamp(epoch: float) -> str:
    """``2026-11-30T14:00:00Z``: whole seconds, UTC (the portal dedupes on node+timestamp)."""
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_report(
    node: str,
    snapshot: dict[str, Any],
    *,
    timestamp: float,
    interval_s: int,
    pods: PodResolver | None = None,
) -> dict[str, Any]:
    """Wrap an :meth:`NvmlReader.read` snapshot in the report envelope.

    ``pod`` is added to a process only when the resolver knows the device it runs on (its
    MIG instance first, else its GPU); otherwise the key is absent, as the contract says.
    """
    gpus = copy.deepcopy(snapshot.get("gpus", []))[:MAX_GPUS]
    mapping = {}
    if pods is not None:
        try:
            mapping = pods.pods_by_device()
        except Exception:  # a resolver must not cost us the report
            mapping = {}
    for gpu in gpus:
        gpu["mig_devices"] = gpu.get("mig_devices", [])[:MAX_MIG_DEVICES]
        gpu["processes"] = gpu.get("processes", [])[:MAX_PROCESSES]
        for proc in gpu["processes"]:
            pod = mapping.get(proc.get("mig_uuid") or "") or mapping.get(gpu.get("uuid") or "")
            if pod:
                proc["pod"] = pod
    topology = snapshot.get("topology")
    if topology is not None:
        topology = [row[:MAX_GPUS] for row in topology[:MAX_GPUS]]
    return {
        "node": node,
        "timestamp": iso_timestamp(timestamp),
        "agent_version": __version__,
        "interval_s": int(interval_s),
        "driver_version": snapshot.get("driver_version"),
        "cuda_driver_version": snapshot.get("cuda_driver_version"),
        "gpus": gpus,
        "topology": topology,
    }
