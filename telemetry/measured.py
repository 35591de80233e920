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
    """The ids of the measured clusters (among ``cluster_ids``). One query: an EXISTS per
    cluster, so its cost follows the clusters, not their 40,000 GPUs."""
    from django.db.models import Exists, OuterRef, Q

    from inventory.models import Cluster

    clusters = Cluster.objects.all()
    if cluster_ids is not None:
        clusters = clusters.filter(pk__in=list(set(cluster_ids)))
    return set(
        clusters.filter(
            Q(Exists(PrometheusSource.objects.filter(cluster=OuterRef("pk"))))
            | Q(Exists(NodeTelemetry.objects.filter(node__cluster=OuterRef("pk"))))
            | Q(Exists(GpuState.objects.filter(node__cluster=OuterRef("pk"))))
        ).values_list("pk", flat=True)
    )
