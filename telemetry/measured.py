"""Which clusters' GPUs are measured, so that "not measured" is never shown as 0 (issue #21
section 2, DESIGN.md: "Not measured" is never shown as 0).

A cluster is measured when the portal reads its GPUs from a Prometheus (a
:class:`telemetry.models_source.PrometheusSource`) or when one of its node agents has
reported at least once (a :class:`telemetry.models.NodeTelemetry` row, or the GPU state
it wrote, :class:`telemetry.models.GpuState`). A cluster with
neither (the demo's Kueue cluster has no agents) has held and busy figures of nothing:
they are shown as *not measured*, and a figure that adds clusters says which it leaves out.
"""

from __future__ import annotations

from .models import GpuState, NodeTelemetry
from .models_source import PrometheusSource


def measured_cluster_ids(cluster_ids=None) -> set:
    """The ids of the measured clusters (among ``cluster_ids``). Three queries."""
    agents, gpus = NodeTelemetry.objects.all(), GpuState.objects.all()
    sources = PrometheusSource.objects.all()
    if cluster_ids is not None:
        ids = list(set(cluster_ids))
        agents = agents.filter(node__cluster_id__in=ids)
        gpus = gpus.filter(node__cluster_id__in=ids)
        sources = sources.filter(cluster_id__in=ids)
    out = set(sources.values_list("cluster_id", flat=True))
    for qs in (agents, gpus):
        out |= set(qs.values_list("node__cluster_id", flat=True).distinct())
    return out
