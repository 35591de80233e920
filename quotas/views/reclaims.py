"""A manager's "still needed" on an idle-grant reclaim (issue #25 section 2)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal.validation import CONFLICT

from .. import reclaim
from ..models import GrantReclaim
from ..scoping import visible_to


class StillNeededForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), max_length=reclaim.REASON_MAX,
        help_text="Admins read it. The grant is kept for the policy's hold time.",
    )  # fmt: skip


@login_required
def reclaim_answer(request: HttpRequest, pk) -> HttpResponse:
    """GET shows the reclaim and the form; POST holds the grants (managers and admins)."""
    qs = visible_to(GrantReclaim.objects.select_related("namespace__team", "policy", "gpu_class"),
                    request.user, "namespace__team")  # fmt: skip
    r = get_object_or_404(qs, pk=pk)
    if not reclaim.may_answer(request.user, r):
        raise PermissionDenied("Only the team's managers and portal admins answer a reclaim.")
    form = StillNeededForm(request.POST or None)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                reclaim.answer(r, request.user, form.cleaned_data["reason"])
            except ValidationError as err:
                codes = {e.code for errs in err.error_dict.values() for e in errs}
                status = 409 if CONFLICT in codes else 400
                for field, errs in err.message_dict.items():
                    form.add_error(field if field in form.fields else None, errs)
            else:
                messages.success(request, f"Held: the grants of {r.namespace} stay as they are.")
                return redirect("quotas:teams")
    reclaim.annotated([r], request.user)
    return render(request, "quotas/reclaim_answer.html", {"r": r, "form": form}, status=status)
