"""Team namespaces: onboarding (admins), the namespace page with its effective limits and
foreign quotas, adopting / keeping / removing them, and confirming a lowering below usage.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from inventory.kube import KubeError
from portal.validation import loads_json

from .. import adoption, kueue, lowering, preview, services
from ..figures import usable
from ..forms import DecisionForm, OnboardForm
from ..models import ForeignQuota, Operation, TeamNamespace
from .common import _staff_only, visible_teams


def _visible_namespace(user, pk) -> TeamNamespace:
    qs = TeamNamespace.objects.select_related("cluster", "team")
    return get_object_or_404(qs.filter(team__in=visible_teams(user)), pk=pk)


@login_required
def namespace_new(request: HttpRequest) -> HttpResponse:
    """Onboard a namespace: create the TeamNamespace and read its quotas at once."""
    _staff_only(request.user)
    form = OnboardForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            ns, foreign = adoption.onboard(d["team"], d["cluster"], d["name"], request.user)
        except ValidationError as err:
            form.add_service_errors(err.message_dict)
        except KubeError as err:
            form.add_error(None, f"Could not read the namespace's quotas: {err}")
        else:
            found = f"; {len(foreign)} quota(s) not owned by the portal found" if foreign else ""
            messages.success(request, f"Namespace {ns} onboarded for {ns.team}{found}.")
            return redirect("quotas:namespace", pk=ns.pk)
    return render(request, "quotas/namespace_new.html", {"form": form})


@login_required
def namespace_detail(request: HttpRequest, pk) -> HttpResponse:
    ns = _visible_namespace(request.user, pk)
    st = preview.state(ns)
    gone = ForeignQuota.objects.filter(namespace=ns, gone_at__isnull=False)
    queue = None
    if st.kueue is not None:  # Kueue enforces the grants here, not a ResourceQuota
        queue = {
            "cluster_queue": kueue.queue_name(ns.team),
            "local_queue": settings.KUEUE_LOCAL_QUEUE,
            "rows": usable(st),
        }
    return render(
        request,
        "quotas/namespace_detail.html",
        {
            "ns": ns,
            "st": st,
            "queue": queue,
            "rows": list(st.effective.values()),
            "foreign": st.foreign,
            "gone": list(gone),
            "held": list(ns.operations.filter(status=Operation.Status.CONFIRM)),
            "form": DecisionForm(),
        },
    )


def _foreign(request: HttpRequest, ns_pk, fq_pk) -> ForeignQuota:
    _staff_only(request.user)
    ns = _visible_namespace(request.user, ns_pk)
    return get_object_or_404(ForeignQuota.objects.select_related("namespace"), namespace=ns,
                             pk=fq_pk)  # fmt: skip


def _decide(request: HttpRequest, fq: ForeignQuota, act, done: str) -> HttpResponse:
    form = DecisionForm(request.POST)
    if form.is_valid():
        try:
            act(fq, request.user, form.cleaned_data["note"])
        except ValidationError as err:
            for msg in err.messages:
                messages.error(request, msg)
        except services.TransitionError as err:
            messages.warning(request, str(err))
        except PermissionError as err:
            raise PermissionDenied(str(err)) from err
        else:
            messages.success(request, done.format(fq=fq))
    else:
        messages.error(request, "The note is too long (2,000 characters at most).")
    return redirect("quotas:namespace", pk=fq.namespace_id)


@require_POST
@login_required
def foreign_adopt(request: HttpRequest, pk, quota) -> HttpResponse:
    fq = _foreign(request, pk, quota)
    return _decide(request, fq, adoption.adopt,
                   "Adopted {fq.name}: its limits are now the namespace's baselines.")  # fmt: skip


@require_POST
@login_required
def foreign_keep(request: HttpRequest, pk, quota) -> HttpResponse:
    fq = _foreign(request, pk, quota)
    return _decide(request, fq, adoption.keep, "Kept {fq.name} as an outside limit.")


@login_required
def foreign_remove(request: HttpRequest, pk, quota) -> HttpResponse:
    """GET asks for confirmation; POST deletes the adopted quota from the cluster."""
    fq = _foreign(request, pk, quota)
    form = DecisionForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            adoption.remove(fq, request.user, form.cleaned_data["note"])
        except ValidationError as err:
            form.add_service_errors({"__all__": err.messages})
        except KubeError as err:
            form.add_error(None, f"Could not reach the cluster: {err}")
        else:
            messages.success(request, f"Removed ResourceQuota {fq.name} from {fq.namespace}.")
            return redirect("quotas:namespace", pk=fq.namespace_id)
    blockers = adoption.removal_blockers(fq, {"status": fq.namespace.quota_status})
    return render(request, "quotas/foreign_remove.html",
                  {"fq": fq, "ns": fq.namespace, "form": form, "blockers": blockers})  # fmt: skip


@login_required
def lowering_confirm(request: HttpRequest, pk) -> HttpResponse:
    """GET lists the pods over the lower limits; POST (admins) lets the apply go ahead."""
    _staff_only(request.user)
    ns = _visible_namespace(request.user, pk)
    form = DecisionForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            expected = loads_json(form.cleaned_data["expected"] or "null")
            if expected is not None and not isinstance(expected, dict):
                raise ValueError
        except ValueError:
            form.add_error(None, "The confirmation form was malformed; reload the page.")
        else:
            try:
                n = lowering.confirm_lowering(
                    ns, request.user, expected=expected, note=form.cleaned_data["note"]
                )
            except lowering.NothingToConfirm as err:
                messages.warning(request, str(err))
            else:
                messages.success(request, f"Confirmed: {n} apply(s) of {ns} go ahead.")
                return redirect("quotas:namespace", pk=ns.pk)
    st = preview.state(ns)
    low = st.awaiting
    expected = json.dumps({k: v["hard"] for k, v in sorted(low.items())})
    return render(
        request,
        "quotas/lowering_confirm.html",
        {
            "ns": ns,
            "lowering": sorted(low.items()),
            "pods": preview.limits.pods_over(st.pods, low),
            "form": form,
            "expected": expected,
        },
    )
