"""The reclaim page: policies with what each can do now, and the idle-grant reclaims with
the teams' answers (issue #25 section 2). Everyone sees the policies (teams should know
the rule); members see their teams' reclaims, admins every team's and set the policies."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from inventory.models import Cluster, GpuClass
from quotas import reclaim as rules
from quotas.models import GrantReclaim
from quotas.models_reclaim import MAX_HOURS
from quotas.scoping import visible_to

from . import reclaim

PER_PAGE = 25


def _hours(label: str, initial: int) -> forms.IntegerField:
    return forms.IntegerField(label=label, min_value=1, max_value=MAX_HOURS, initial=initial)


class PolicyForm(forms.Form):
    cluster = forms.ModelChoiceField(Cluster.objects.order_by("name"), to_field_name="slug")
    gpu_class = forms.ModelChoiceField(
        GpuClass.objects.select_related("cluster").order_by("cluster__name", "name"),
        required=False, label="GPU class", empty_label="every class (the cluster's policy)",
    )  # fmt: skip
    enabled = forms.BooleanField(required=False, label="On (off: nothing is announced or lowered)")
    idle_hours = _hours("Idle hours before the warning", 24)
    grace_hours = _hours("Grace hours before the lowering", 48)
    hold_hours = _hours("Hours a 'still needed' keeps the grant", 168)

    def clean(self):
        data = super().clean()
        c, k = data.get("cluster"), data.get("gpu_class")
        if c is not None and k is not None and k.cluster_id != c.pk:
            self.add_error("gpu_class", f"{k.name} is a class of another cluster.")
        return data


@login_required
def reclaim_page(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    form = PolicyForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if not request.user.is_staff:
            raise PermissionDenied("Only portal admins set reclaim policies.")
        status = 400
        if form.is_valid():
            d = form.cleaned_data
            try:
                policy = rules.set_policy(
                    d["cluster"], d["gpu_class"], request.user, enabled=d["enabled"],
                    idle_hours=d["idle_hours"], grace_hours=d["grace_hours"],
                    hold_hours=d["hold_hours"],
                )  # fmt: skip
            except ValidationError as err:
                for field, errs in err.message_dict.items():
                    form.add_error(field if field in form.fields else None, errs)
            else:
                state = "on" if policy.enabled else "off"
                messages.success(request, f"Saved: the {policy} is {state}.")
                return redirect("telemetry:reclaim")
    qs = visible_to(
        GrantReclaim.objects.select_related(
            "namespace__team", "namespace__cluster", "gpu_class", "policy", "answered_by"
        ),
        request.user,
        "namespace__team",
    )
    show = request.GET.get("show", "open")
    if show not in ("open", "all"):
        messages.error(request, "Show 'open' or 'all' reclaims; showing the open ones.")
        show, status = "open", 400
    if show == "open":
        qs = qs.open()
    page = Paginator(qs.order_by("-warned_at"), PER_PAGE).get_page(request.GET.get("page"))
    rules.annotated(page.object_list, request.user)
    return render(
        request,
        "telemetry/reclaim.html",
        {"states": reclaim.policy_states(now), "form": form, "page": page, "show": show},
        status=status,
    )  # fmt: skip
