"""GPU classes as portal pages: everyone signed in reads them, with idle now and free to
grant per resource (the fleet page's figures, quotas/figures.py); admins define, edit and
delete them. ``inventory/classes.py`` does the work (validated, audited), as for the API.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from . import classes
from .figures import figures_by_class
from .forms import GpuClassForm
from .models import Cluster, GpuClass
from .views import staff_only

CLASSES_PER_PAGE = 50


@login_required
def class_list(request: HttpRequest) -> HttpResponse:
    clusters = list(Cluster.objects.order_by("name"))
    slug = request.GET.get("cluster", "")
    chosen = next((c for c in clusters if c.slug == slug), None)
    queryset = GpuClass.objects.select_related("cluster").order_by("cluster__name", "name")
    if chosen is not None:
        queryset = queryset.filter(cluster=chosen)
    page = Paginator(queryset, CLASSES_PER_PAGE).get_page(request.GET.get("page"))
    shown = list(page.object_list)
    figures = figures_by_class(shown)
    for cls in shown:
        cls.figures = figures.get(cls.pk, [])
    return render(
        request,
        "inventory/class_list.html",
        {
            "page": page,
            "classes": shown,
            "clusters": clusters,
            "chosen": chosen,
            "unknown_cluster": slug if slug and chosen is None else "",
        },
        status=404 if slug and chosen is None else 200,
    )


@login_required
def class_new(request: HttpRequest) -> HttpResponse:
    staff_only(request, "define, change or delete GPU classes")
    initial = {}
    if request.GET.get("cluster"):
        initial["cluster"] = request.GET["cluster"]
    form = GpuClassForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        try:
            cls = classes.create_class(request.user, data.pop("cluster"), **data)
        except ValidationError as exc:
            form.add_model_errors(exc)
        else:
            messages.success(
                request, f"Class {cls.name} defined on {cls.cluster.name}: {cls.node_count} "
                "node(s) match it now.",
            )  # fmt: skip
            return redirect(f"{reverse('inventory:classes')}?cluster={cls.cluster.slug}")
    return render(request, "inventory/class_form.html", {"form": form, "gpu_class": None})


@login_required
def class_edit(request: HttpRequest, pk) -> HttpResponse:
    staff_only(request, "define, change or delete GPU classes")
    cls = get_object_or_404(GpuClass.objects.select_related("cluster"), pk=pk)
    initial = {"name": cls.name, "selector": cls.selector, "weight": cls.weight}
    form = GpuClassForm(request.POST or None, initial=initial, editing=True)
    if request.method == "POST" and form.is_valid():
        try:
            cls = classes.update_class(request.user, cls, **form.cleaned_data)
        except ValidationError as exc:
            form.add_model_errors(exc)
        else:
            messages.success(request, f"Class {cls.name} saved: {cls.node_count} node(s).")
            return redirect(f"{reverse('inventory:classes')}?cluster={cls.cluster.slug}")
    return render(request, "inventory/class_form.html", {"form": form, "gpu_class": cls})


@login_required
def class_delete(request: HttpRequest, pk) -> HttpResponse:
    """GET asks for confirmation; POST deletes, or says which grants and requests keep it."""
    staff_only(request, "define, change or delete GPU classes")
    cls = get_object_or_404(GpuClass.objects.select_related("cluster"), pk=pk)
    back = f"{reverse('inventory:classes')}?cluster={cls.cluster.slug}"
    if request.method == "POST":
        try:
            classes.delete_class(request.user, cls)
        except classes.ClassInUse as exc:
            messages.error(request, str(exc))
            return redirect(back)
        messages.success(request, f"Class {cls.name} deleted from {cls.cluster.name}.")
        return redirect(back)
    return render(request, "inventory/class_delete.html", {"gpu_class": cls, "back": back})
