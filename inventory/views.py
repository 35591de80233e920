"""Server-rendered inventory pages: fleet overview, nodes, clusters.

Thin views: aggregates come from ``summary``, health from ``health``, filtering from
``filters``; every page runs a fixed number of queries whatever the fleet size.
"""

from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal import broker, sorting

from .connect import connect, describe, rerun
from .filters import NodeFilter
from .forms import ClusterForm
from .health import node_badges, usual_drivers, with_suspects
from .models import GPU_RESOURCE, Cluster, Node
from .preflight import report_from
from .summary import fleet_summary, fleet_totals

log = logging.getLogger(__name__)

NODES_PER_PAGE = 50
# The node table's sortable columns (?sort=gpus, ?sort=-changed, ...).
NODE_SORTS = {
    "name": "name", "cluster": "cluster__name", "product": "gpu_product",
    "gpus": "gpu_count", "changed": "last_changed_at",
}  # fmt: skip
SYNC_RUNS_SHOWN = 20

_present = Q(nodes__gone_at__isnull=True)


def _clusters_with_counts():
    """Clusters with node counts (one query)."""
    return Cluster.objects.annotate(
        node_count=Count("nodes", filter=_present),
        gpu_node_count=Count("nodes", filter=_present & ~Q(nodes__gpu_product="")),
        gpu_total=Sum("nodes__gpu_count", filter=_present, default=0),
        cordoned_count=Count("nodes", filter=_present & Q(nodes__unschedulable=True)),
        gone_count=Count("nodes", filter=Q(nodes__gone_at__isnull=False)),
    )


def _annotate_node(node: Node, usual: dict[str, str]) -> Node:
    """Attach the whole-GPU resource, MIG resources and badges (resources prefetched)."""
    resources = list(node.resources.all())
    node.gpu = next((r for r in resources if r.resource == GPU_RESOURCE), None)
    node.mig_resources = [r for r in resources if r.resource != GPU_RESOURCE]
    node.badges = node_badges(node, usual)
    return node


def _class_figures(clusters):
    from quotas.figures import class_figures  # quotas builds on inventory

    return class_figures(clusters)


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    clusters = list(Cluster.objects.all())
    summaries = fleet_summary(Node.objects.all())
    return render(
        request,
        "inventory/fleet.html",
        {
            "clusters": clusters,
            "stale_clusters": [c for c in clusters if c.is_stale and c.sync_enabled],
            "summaries": summaries,
            "totals": fleet_totals(summaries),
            "class_figures": _class_figures(clusters),
        },
    )


@login_required
def node_list(request: HttpRequest) -> HttpResponse:
    # Annotated with the lost GPUs, so the badges name the unhealthy one (no extra query).
    queryset = with_suspects(Node.objects.select_related("cluster").prefetch_related("resources"))
    filterset = NodeFilter(request.GET, queryset=queryset)
    order = sorting.parse(request.GET, NODE_SORTS, "cluster", tie="name")  # Node's own order
    nodes = filterset.qs.order_by(*order.order_by) if filterset.is_valid() else queryset.none()
    page = Paginator(nodes, NODES_PER_PAGE).get_page(request.GET.get("page"))
    usual = usual_drivers(Node.objects.all())
    for node in page.object_list:
        _annotate_node(node, usual)
    products = (
        Node.objects.present()
        .gpu()
        .order_by("gpu_product")
        .values_list("gpu_product", flat=True)
        .distinct()
    )
    return render(
        request,
        "inventory/node_list.html",
        {
            "filterset": filterset,
            "form": filterset.form,
            "page": page,
            "products": products,
            "filtered": any(v for k, v in request.GET.items() if k not in ("page", "sort")),
            "sort_error": order.error,
            "sorts": sorting.links(request.GET, order, NODE_SORTS),
        },
    )


@login_required
def node_detail(request: HttpRequest, pk) -> HttpResponse:
    node = get_object_or_404(
        with_suspects(Node.objects.select_related("cluster").prefetch_related("resources")),
        pk=pk,
    )
    _annotate_node(node, usual_drivers(Node.objects.all()))
    labels = sorted(
        node.labels.items(), key=lambda kv: (not kv[0].startswith("nvidia.com/"), kv[0])
    )
    from telemetry.visibility import PodNames  # telemetry depends on inventory

    pod_names = PodNames(request.user)
    pods = list(node.gpu_pods.all())
    for pod in pods:
        pod.visible_name = pod_names.name(node.cluster_id, pod.namespace, pod.name)
    return render(
        request,
        "inventory/node_detail.html",
        {
            "node": node,
            "resources": list(node.resources.all()),
            "pods": pods,
            "pod_names": pod_names,
            "pod_names_hidden": any(p.visible_name is None for p in pods),
            "labels": labels,
            "nvidia_label_count": sum(1 for k, _ in labels if k.startswith("nvidia.com/")),
        },
    )


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    return render(request, "inventory/cluster_list.html", {"clusters": _clusters_with_counts()})


@login_required
def cluster_detail(request: HttpRequest, slug: str) -> HttpResponse:
    cluster = get_object_or_404(_clusters_with_counts(), slug=slug)
    return render(
        request,
        "inventory/cluster_detail.html",
        {
            "cluster": cluster,
            "runs": cluster.sync_runs.all()[:SYNC_RUNS_SHOWN],
            "summaries": fleet_summary(Node.objects.filter(cluster=cluster)),
            "report": report_from(cluster.preflight),
        },
    )


@require_POST
@login_required
def cluster_sync(request: HttpRequest, slug: str) -> HttpResponse:
    """Staff only: enqueue a manual sync of one cluster."""
    if not request.user.is_staff:
        raise PermissionDenied("Only staff can start a sync.")
    cluster = get_object_or_404(Cluster, slug=slug)
    from .tasks import sync_cluster_task

    if not broker.send(sync_cluster_task, (str(cluster.pk), "manual"), what=f"sync of {slug}"):
        messages.error(request, f"Could not queue a sync of {cluster.name}: the task queue "
                                "(Redis) does not answer.")  # fmt: skip
    else:
        messages.success(
            request, f"Sync of {cluster.name} queued. Reload in a few seconds to see the run."
        )
    return redirect("inventory:cluster", slug=cluster.slug)


def staff_only(request: HttpRequest, what: str = "connect or change clusters") -> None:
    if not request.user.is_staff:
        raise PermissionDenied(f"Only admins can {what}.")


def _connect_page(request: HttpRequest, cluster: Cluster | None) -> HttpResponse:
    """Connect (``cluster`` None) or edit: preflight first, save when it passes."""
    staff_only(request)
    before = describe(cluster) if cluster is not None else None
    form = ClusterForm(request.POST or None, instance=cluster)
    report = None
    if request.method == "POST" and form.is_valid():
        outcome = connect(
            form.instance,
            actor=request.user,
            save_anyway=form.cleaned_data["save_anyway"],
            before=before,
        )
        if outcome.saved:
            messages.success(
                request, f"{form.instance.name} saved; preflight: {outcome.report.status}."
            )
            return redirect("inventory:cluster", slug=form.instance.slug)
        report = outcome.report
        form.add_error(
            "save_anyway", "The preflight found errors: fix them, or tick this to save anyway."
        )
    status = 400 if request.method == "POST" else 200
    return render(
        request,
        "inventory/cluster_form.html",
        {"form": form, "cluster": cluster, "report": report},
        status=status,
    )


@login_required
def cluster_connect(request: HttpRequest) -> HttpResponse:
    return _connect_page(request, None)


@login_required
def cluster_edit(request: HttpRequest, slug: str) -> HttpResponse:
    return _connect_page(request, get_object_or_404(Cluster, slug=slug))


@require_POST
@login_required
def cluster_preflight(request: HttpRequest, slug: str) -> HttpResponse:
    """Admins: run the preflight of a stored cluster again (it shows on the cluster page)."""
    staff_only(request)
    cluster = get_object_or_404(Cluster, slug=slug)
    report = rerun(cluster, actor=request.user)
    level = messages.success if report.status == "ok" else messages.warning
    level(request, f"Preflight of {cluster.name}: {report.status}.")
    return redirect("inventory:cluster", slug=cluster.slug)
