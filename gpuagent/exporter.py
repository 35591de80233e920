"""``/metrics`` in the Prometheus exposition format, with dcgm-exporter's names and labels.

A cluster without DCGM can point the same Prometheus queries at the agent that it would at
dcgm-exporter. Metric names, types, help texts and units are those of dcgm-exporter's
``etc/default-counters.csv``; the per-series labels are those of its renderer
(``internal/pkg/rendermetrics/render_metrics.go``: ``gpu``, ``UUID``, ``device``,
``modelName``, ``GPU_I_PROFILE`` and ``GPU_I_ID`` for MIG instances, the host name) and its
Kubernetes pod mapping (``internal/pkg/transformation/const.go`` / ``kubernetes.go``:
``namespace``, ``pod``, ``container``). See docs/agent.md, "Prometheus exporter".

The collector renders the agent's **latest NVML snapshot** (taken by the agent's own loop,
every ``--interval`` seconds): a scrape never calls NVML, so scrapes cost no GPU driver
time however often Prometheus comes, and the values are at most one interval old (as
dcgm-exporter's are at most one ``-c`` collect interval old).

Not exported: ``DCGM_FI_DEV_XID_ERRORS``. NVML hands out XIDs only as events
(``nvmlEventSetWait`` on ``nvmlEventTypeXidCriticalError``), not as a value to poll, and the
agent does not run an event thread; the metric is left out rather than reported as 0.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

log = logging.getLogger(__name__)

DEFAULT_PORT = 9400  # dcgm-exporter's default listen address is :9400
DEFAULT_ADDRESS = "0.0.0.0"  # noqa: S104 - a DaemonSet pod is scraped over the pod network

# (metric name, type, help) exactly as in dcgm-exporter's etc/default-counters.csv.
GPU_UTIL = ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).")
MEM_COPY_UTIL = ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).")
FB_FREE = ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).")
FB_USED = ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).")
GPU_TEMP = ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).")
POWER_USAGE = ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).")
COUNTERS = (GPU_UTIL, MEM_COPY_UTIL, FB_FREE, FB_USED, GPU_TEMP, POWER_USAGE)

# The agent's own series (not dcgm-exporter's), so a lost GPU and a stale snapshot show up.
GPU_LOST = ("gpuagent_gpu_lost", "1 while NVML reports the GPU lost (NVMLError_GpuIsLost).")
SNAPSHOT_TIME = (
    "gpuagent_snapshot_timestamp_seconds",
    "Unix time of the NVML snapshot the DCGM_FI_* series come from.",
)

BASE_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
POD_LABELS = ("namespace", "pod", "container")


def _pod_labels(value: str | None) -> dict[str, str]:
    """``namespace/pod`` or ``namespace/pod/container`` from a :class:`PodResolver`."""
    if not value:
        return {}
    parts = value.split("/")
    if len(parts) < 2:
        return {}
    out = {"namespace": parts[0], "pod": parts[1]}
    if len(parts) > 2 and parts[2]:
        out["container"] = parts[2]
    return out


def gpu_instance_ids(nvml: Any, snapshot: Mapping[str, Any]) -> dict[str, int]:
    """``{MIG uuid: GPU instance id}`` for the snapshot's MIG devices (``GPU_I_ID``).

    The snapshot names MIG devices by UUID and profile only; the instance id takes two cheap
    handle look-ups and ``nvmlDeviceGetGpuInstanceId`` per instance, done once per snapshot
    in the agent's loop (never per scrape). A failure leaves that instance out of the map.
    """
    out: dict[str, int] = {}
    for gpu in snapshot.get("gpus", []):
        if gpu.get("lost") or not gpu.get("mig_devices"):
            continue
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(int(gpu["index"]))
        except nvml.NVMLError:
            continue
        for dev in gpu["mig_devices"]:
            if not dev.get("uuid"):
                continue
            try:
                mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, int(dev["index"]))
                out[dev["uuid"]] = int(nvml.nvmlDeviceGetGpuInstanceId(mh))
            except nvml.NVMLError as exc:
                log.debug("GPU %s MIG %s: no instance id (%s)", gpu["index"], dev["index"], exc)
    return out


class Snapshot:
    """The latest NVML snapshot and what labels it, replaced whole under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.node = ""
        self.timestamp: float | None = None
        self.gpus: list[dict[str, Any]] = []
        self.pods: dict[str, str] = {}
        self.instance_ids: dict[str, int] = {}

    def update(
        self,
        node: str,
        snapshot: Mapping[str, Any],
        *,
        timestamp: float,
        pods: Mapping[str, str] | None = None,
        instance_ids: Mapping[str, int] | None = None,
    ) -> None:
        with self.lock:
            self.node = node
            self.timestamp = timestamp
            self.gpus = list(snapshot.get("gpus", []))
            self.pods = dict(pods or {})
            self.instance_ids = dict(instance_ids or {})

    def copy(
        self,
    ) -> tuple[str, float | None, list[dict[str, Any]], dict[str, str], dict[str, int]]:
        with self.lock:
            return self.node, self.timestamp, self.gpus, self.pods, self.instance_ids


class DcgmCollector(Collector):
    """A custom collector: renders :class:`Snapshot` with dcgm-exporter's names at scrape."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def describe(self) -> list[Any]:
        return []  # unchecked collector: series depend on the snapshot

    def collect(self) -> Iterator[Any]:
        node, timestamp, gpus, pods, instance_ids = self.snapshot.copy()
        families = {
            name: GaugeMetricFamily(name, help_, labels=None) for name, _, help_ in COUNTERS
        }
        lost = GaugeMetricFamily(GPU_LOST[0], GPU_LOST[1], labels=BASE_LABELS)
        for gpu in gpus:
            base = {
                "gpu": str(gpu.get("index")),
                "UUID": gpu.get("uuid") or "",
                "device": f"nvidia{gpu.get('index')}",
                "modelName": gpu.get("name") or "",
                "Hostname": node,
            }
            lost.add_metric([base[k] for k in BASE_LABELS], 1.0 if gpu.get("lost") else 0.0)
            if gpu.get("lost"):
                continue  # NVML says nothing about a lost GPU; no stale values
            migs = gpu.get("mig_devices") or []
            whole = {**base, **_pod_labels(pods.get(base["UUID"]))}
            values = {
                GPU_UTIL[0]: gpu.get("utilization_gpu_pct"),
                MEM_COPY_UTIL[0]: gpu.get("utilization_memory_pct"),
                GPU_TEMP[0]: gpu.get("temperature_c"),
                POWER_USAGE[0]: gpu.get("power_w"),
            }
            if not migs:
                # With MIG on, dcgm-exporter reports framebuffer per GPU instance instead.
                used, total = gpu.get("memory_used_mib"), gpu.get("memory_total_mib")
                values[FB_USED[0]] = used
                values[FB_FREE[0]] = total - used if used is not None and total else None
            for name, value in values.items():
                _add(families[name], whole, value)
            for dev in migs:
                labels = {
                    **base,
                    "GPU_I_PROFILE": dev.get("profile") or "",
                    "GPU_I_ID": str(instance_ids.get(dev.get("uuid") or "", "")),
                    **_pod_labels(pods.get(dev.get("uuid") or "")),
                }
                used, total = dev.get("memory_used_mib"), dev.get("memory_total_mib")
                _add(families[FB_USED[0]], labels, used)
                _add(
                    families[FB_FREE[0]],
                    labels,
                    total - used if used is not None and total else None,
                )
        yield from families.values()
        yield lost
        stamp = GaugeMetricFamily(SNAPSHOT_TIME[0], SNAPSHOT_TIME[1], labels=["Hostname"])
        if timestamp is not None:
            stamp.add_metric([node], float(timestamp))
        yield stamp


def _add(family: GaugeMetricFamily, labels: dict[str, str], value: Any) -> None:
    """Add one sample with its own label set (MIG and pod labels vary per series)."""
    if value is None:
        return
    family.samples.append(Sample(family.name, dict(labels), float(value), None))


class Exporter:
    """Holds the snapshot, the registry and (after :meth:`serve`) the HTTP server."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(DcgmCollector(self.snapshot))
        self.server: Any = None
        self.thread: threading.Thread | None = None

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.snapshot.update(*args, **kwargs)

    def serve(self, port: int = DEFAULT_PORT, address: str = DEFAULT_ADDRESS) -> int:
        """Serve ``/metrics`` on a daemon thread; return the bound port (``0`` picks one)."""
        self.server, self.thread = start_http_server(port, addr=address, registry=self.registry)
        bound = int(self.server.server_address[1])
        log.info("serving Prometheus metrics on http://%s:%d/metrics", address, bound)
        return bound

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
