"""Label set pages: the list with each set's nodes and sync state, and (staff) the form
and the delete confirmation. Views parse and render; ``nodelabels.services`` decides."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from . import services
from .forms import LabelSetForm
from .models import LabelOperation, LabelSet

NODES_SHOWN = 12


def _staff_only(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only portal admins can manage node labels.")


@login_required
def label_set_list(request: HttpRequest) -> HttpResponse:
    label_sets = list(LabelSet.objects.select_related("cluster"))
    overview = services.sync_overview(label_sets)
    rows = []
    for label_set in label_sets:
        nodes = overview.get(label_set.pk, [])
        counts: dict[str, int] = {}
        for node in nodes:
            counts[node.status] = counts.get(node.status, 0) + 1
        rows.append(
            {
                "set": label_set,
                "nodes": nodes[:NODES_SHOWN],
                "more": max(len(nodes) - NODES_SHOWN, 0),
                "total": len(nodes),
                "counts": sorted(counts.items()),
            }
        )
    failed = LabelOperation.objects.filter(status=LabelOperation.Status.FAILED).count()
    return render(
        request, "nodelabels/label_set_list.html", {"rows": rows, "failed_operations": failed}
    )


def _save(request: HttpRequest, form: LabelSetForm, label_set: LabelSet | None):
    try:
        if label_set is None:
            return services.create_label_set(request.user, **form.domain_fields())
        return services.update_label_set(request.user, label_set, **form.domain_fields())
    except ValidationError as err:
        form.add_service_errors(err.message_dict)
    except PermissionError as err:
        raise PermissionDenied(str(err)) from err
    return None


@login_required
def label_set_new(request: HttpRequest) -> HttpResponse:
    _staff_only(request.user)
    form = LabelSetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        label_set = _save(request, form, None)
        if label_set is not None:
            messages.success(request, f"Label set {label_set.name} saved: its nodes are updated.")
            return redirect("nodelabels:list")
    return render(request, "nodelabels/label_set_form.html", {"form": form, "label_set": None})


@login_required
def label_set_edit(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    label_set = get_object_or_404(LabelSet.objects.select_related("cluster"), pk=pk)
    form = LabelSetForm(request.POST or None, instance=label_set)
    if request.method == "POST" and form.is_valid() and _save(request, form, label_set):
        messages.success(request, f"Label set {label_set.name} saved: its nodes are updated.")
        return redirect("nodelabels:list")
    return render(request, "nodelabels/label_set_form.html", {"form": form, "label_set": label_set})


@login_required
def label_set_delete(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    label_set = get_object_or_404(LabelSet.objects.select_related("cluster"), pk=pk)
    if request.method == "POST":
        services.delete_label_set(request.user, label_set)
        messages.success(
            request,
            f"Label set {label_set.name} deleted: its labels are removed from its nodes "
            "where they still hold the portal's value.",
        )
        return redirect("nodelabels:list")
    nodes = services.matched_nodes(label_set)
    return render(
        request, "nodelabels/label_set_delete.html", {"label_set": label_set, "nodes": nodes}
    )
