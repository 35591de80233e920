"""The latest state of a Prometheus cluster's GPUs, copied from dcgm-exporter's series.

For clusters with a :class:`~telemetry.models.PrometheusSource`, no agent posts reports;
the node page's GPU cards, the health signals, the GPU API and the attribution of GPUs to
pods still need one row per GPU with its latest figures. :func:`sync_source` makes a few
instant queries (one per metric, the cluster's series only) and upserts those rows in one
statement: ``GpuState`` per GPU, ``NodeTelemetry`` per node. History is never copied: it is
read from Prometheus when a page needs it (telemetry.sources.prom).

What comes from where (NVIDIA/dcgm-exporter ``etc/default-counters.csv`` and its
renderer's labels):

- identity: ``modelName`` (name), ``UUID``, ``gpu`` (index), ``Hostname``/``hostname`` (the
  Kubernetes node), ``DCGM_FI_DRIVER_VERSION`` (a label, where the exporter adds it);
- figures: ``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_MEM_COPY_UTIL``, ``DCGM_FI_DEV_FB_USED``
  + ``DCGM_FI_DEV_FB_FREE`` (total = used + free), ``DCGM_FI_DEV_GPU_TEMP``,
  ``DCGM_FI_DEV_POWER_USAGE``, ``DCGM_FI_DEV_XID_ERRORS`` (the last XID, 0 for none);
- MIG instances: series with ``GPU_I_ID``/``GPU_I_PROFILE`` (memory per instance);
- which pod holds the GPU (or instance): the ``namespace``/``pod`` labels of dcgm-exporter's
  Kubernetes mapping (``internal/pkg/transformation/kubernetes.go``, from the kubelet
  pod-resources API, as the portal's own agent does; one series per pod with
  ``--kubernetes-virtual-gpus``), ``pod_namespace``/``pod_name`` with its
  ``--use-old-namespace``, or ``exported_namespace``/``exported_pod`` where Prometheus
  renamed them: the GPU Operator's ServiceMonitor for dcgm-exporter
  (NVIDIA/gpu-operator ``assets/state-dcgm-exporter/0500_service_monitor.yaml``) does not
  set ``honorLabels``, so the target's own ``namespace``/``pod`` (the exporter's pod) win
  and the exporter's become ``exported_*``. A pod counts only when the inventory knows it
  as a running GPU pod on that node, so the exporter's own pod is never taken for a
  holder. dcgm-exporter has no process list, so ``processes`` holds pods without PIDs and
  ``unsupported`` says ``processes``.

A GPU is stale ``STALE_AFTER`` after its latest sample, as an agent's GPU is three report
intervals after its latest report; a GPU that vanished from Prometheus keeps its row and
goes stale.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from inventory.models import GpuPod, Node

from .models import GpuState, NodeTelemetry
from .models_source import PrometheusSource
from .promsource import ENGINE_ACTIVE, GPU_UTIL, PromClient, PrometheusUnavailable, host_of

SYNC_INTERVAL = timedelta(seconds=60)
STALE_AFTER = 3 * SYNC_INTERVAL
EXPORTER = "dcgm-exporter (Prometheus)"

METRICS = {
    GPU_UTIL: "util",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "mem_util",
    "DCGM_FI_DEV_FB_USED": "fb_used",
    "DCGM_FI_DEV_FB_FREE": "fb_free",
    "DCGM_FI_DEV_GPU_TEMP": "temp",
    "DCGM_FI_DEV_POWER_USAGE": "power",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    ENGINE_ACTIVE: "engine",
}

log = logging.getLogger(__name__)


@dataclass
class _Gpu:
    labels: dict[str, str] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    instances: dict[str, dict] = field(default_factory=dict)  # GPU_I_ID -> profile, memory
    pods: set[tuple[str, str | None]] = field(default_factory=set)  # ("ns/pod", GPU_I_ID)
    seen: float = 0.0  # latest sample time


@dataclass
class SyncResult:
    gpus: int = 0
    nodes: int = 0
    unknown_hosts: list[str] = field(default_factory=list)  # in Prometheus, not in inventory


def _collect(client: PromClient) -> dict[tuple[str, str], _Gpu]:
    """One instant query per metric, and one for when each GPU was last sampled."""
    gpus: dict[tuple[str, str], _Gpu] = defaultdict(_Gpu)
    for metric, what in METRICS.items():
        for s in client.instant(client.selector(metric)):
            host, index = host_of(s.labels), s.labels.get("gpu", "")
            if not host or not index.isdigit():
                continue
            g = gpus[(host, index)]
            gi = s.labels.get("GPU_I_ID") or None
            if not g.labels or gi is None:
                g.labels = s.labels
            pod = pod_of(s.labels)
            if pod:
                g.pods.add((pod, gi))
            if gi is not None:
                inst = g.instances.setdefault(gi, {"profile": s.labels.get("GPU_I_PROFILE", "")})
                inst[what] = s.value
            else:
                g.values[what] = s.value
    # Framebuffer memory is there for whole GPUs and MIG instances alike (utilisation is
    # not, on MIG GPUs); one series per GPU.
    for metric in ("DCGM_FI_DEV_FB_USED", GPU_UTIL):
        stamps = client.instant(
            f"max by (Hostname, hostname, gpu) (timestamp({client.selector(metric)}))"
        )
        for s in stamps:
            g = gpus.get((host_of(s.labels), s.labels.get("gpu", "")))
            if g is not None:
                g.seen = max(g.seen, s.value)
        if stamps:
            break
    return gpus


POD_LABELS = (  # (namespace, pod), most specific first (see the module docstring)
    ("exported_namespace", "exported_pod"),
    ("pod_namespace", "pod_name"),
    ("namespace", "pod"),
)


def pod_of(labels: dict[str, str]) -> str | None:
    """``"namespace/pod"`` of the pod the series says holds the GPU, or None."""
    for ns_label, pod_label in POD_LABELS:
        if labels.get(ns_label) and labels.get(pod_label):
            return f"{labels[ns_label]}/{labels[pod_label]}"
    return None


def _int(v: float | None, lo: int, hi: int) -> int | None:
    if v is None or v != v:  # NaN
        return None
    return max(lo, min(hi, round(v)))


def _state(node: Node, index: int, g: _Gpu, now: datetime) -> GpuState:
    v = g.values
    used, free = v.get("fb_used"), v.get("fb_free")
    if used is None and g.instances:  # a MIG GPU: its instances' memory
        used = sum(i.get("fb_used", 0.0) for i in g.instances.values())
        free = sum(i.get("fb_free", 0.0) for i in g.instances.values())
    seen = datetime.fromtimestamp(g.seen, UTC) if g.seen else now
    devices = [
        {
            "index": int(gi),
            "uuid": "",
            "profile": i.get("profile", ""),
            "memory_total_mib": _int(i.get("fb_used", 0) + i.get("fb_free", 0), 0, 1 << 31),
            "memory_used_mib": _int(i.get("fb_used"), 0, 1 << 31),
        }
        for gi, i in sorted(
            g.instances.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0
        )
        if gi.isdigit()
    ]
    processes = [
        {"pid": None, "used_memory_mib": None, "pod": pod, "mig_uuid": None, "gpu_instance": gi}
        for pod, gi in sorted(g.pods, key=lambda p: (p[0], p[1] or ""))
    ]
    unsupported = ["processes"] + [
        name for name, what in METRICS.items() if what not in v and what != "engine"
        and not (g.instances and what in ("fb_used", "fb_free"))
    ]  # fmt: skip
    xid = v.get("xid")
    return GpuState(
        node=node,
        index=index,
        uuid=g.labels.get("UUID", "")[:96],
        name=g.labels.get("modelName", "")[:96],
        lost=False,
        memory_total_mib=None if used is None or free is None else _int(used + free, 0, 1 << 31),
        memory_used_mib=_int(used, 0, 1 << 31),
        utilization_gpu_pct=_int(v.get("util"), 0, 100),
        utilization_memory_pct=_int(v.get("mem_util"), 0, 100),
        temperature_c=_int(v.get("temp"), -100, 200),
        power_w=v.get("power"),
        power_limit_w=None,
        mig_current=True if devices else None,
        mig_pending=None,
        mig_devices=devices[:64],
        processes=processes[:256],
        unsupported=unsupported,
        xid_last=_int(xid, 0, 1 << 15) or None,
        reported_at=seen,
        stale_after=seen + STALE_AFTER,
    )


UPDATE_FIELDS = [
    "uuid", "name", "lost", "memory_total_mib", "memory_used_mib", "utilization_gpu_pct",
    "utilization_memory_pct", "temperature_c", "power_w", "power_limit_w", "mig_current",
    "mig_pending", "mig_devices", "processes", "unsupported", "xid_last", "reported_at",
    "stale_after",
]  # fmt: skip


def sync_source(source: PrometheusSource, now: datetime | None = None) -> SyncResult:
    """Copy the latest state of ``source``'s cluster's GPUs (raises PrometheusUnavailable)."""
    now = now or timezone.now()
    gpus = _collect(PromClient(source))
    hosts = {host for host, _ in gpus}
    nodes = {
        n.name: n
        for n in Node.objects.filter(cluster_id=source.cluster_id, name__in=hosts, gone_at=None)
    }
    known = {
        (host, f"{ns}/{name}")
        for host, ns, name in GpuPod.objects.filter(
            cluster_id=source.cluster_id, node__name__in=hosts, phase="Running"
        ).values_list("node__name", "namespace", "name")
    }
    for (host, _), g in gpus.items():
        g.pods = {(pod, gi) for pod, gi in g.pods if (host, pod) in known}
    states = [
        _state(nodes[host], int(index), g, now)
        for (host, index), g in sorted(gpus.items())
        if host in nodes
    ]
    per_node: dict = defaultdict(list)
    for s in states:
        per_node[s.node.pk].append(s)
    tele = []
    for node_pk, rows in per_node.items():
        labels = gpus[(rows[0].node.name, str(rows[0].index))].labels
        seen = max(r.reported_at for r in rows)
        tele.append(
            NodeTelemetry(
                node_id=node_pk, driver_version=labels.get("DCGM_FI_DRIVER_VERSION", "")[:32],
                agent_version=EXPORTER, interval_s=int(SYNC_INTERVAL.total_seconds()),
                gpu_count=len(rows), last_report_at=now, last_report_timestamp=seen,
                stale_after=seen + STALE_AFTER,
            )
        )  # fmt: skip
    with transaction.atomic():
        GpuState.objects.bulk_create(
            states, update_conflicts=True, unique_fields=["node", "index"],
            update_fields=UPDATE_FIELDS, batch_size=2000,
        )  # fmt: skip
        NodeTelemetry.objects.bulk_create(
            tele, update_conflicts=True, unique_fields=["node"], batch_size=2000,
            update_fields=["driver_version", "agent_version", "interval_s", "gpu_count",
                           "last_report_at", "last_report_timestamp", "stale_after"],
        )  # fmt: skip
    return SyncResult(len(states), len(tele), sorted(hosts - set(nodes)))


def sync_all(now: datetime | None = None) -> dict[str, SyncResult | str]:
    """Every enabled source; a source that fails is logged and the others still sync."""
    out: dict[str, SyncResult | str] = {}
    for source in PrometheusSource.objects.filter(enabled=True).select_related("cluster"):
        try:
            out[source.cluster.slug] = result = sync_source(source, now)
        except PrometheusUnavailable as err:
            log.warning("GPU state of %s from Prometheus: %s", source.cluster.slug, err)
            out[source.cluster.slug] = str(err)
            continue
        if result.unknown_hosts:
            log.info(
                "%s: Prometheus has GPUs of %d nodes the inventory does not know: %s",
                source.cluster.slug, len(result.unknown_hosts), result.unknown_hosts[:5],
            )  # fmt: skip
    return out
