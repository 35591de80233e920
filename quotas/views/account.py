"""Notification preferences."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from ..forms import (
    NotificationForm,
)
from ..models import (
    NotificationOptOut,
)

# -- notification preferences ----------------------------------------------------------


@login_required
def notifications(request: HttpRequest) -> HttpResponse:
    user = request.user
    kinds = NotificationForm.kinds_for(user)
    opted_out = set(NotificationOptOut.objects.filter(user=user).values_list("kind", flat=True))
    initial = {k: k not in opted_out for k, _ in kinds}
    form = NotificationForm(request.POST or None, initial=initial, kinds=kinds)
    if request.method == "POST" and form.is_valid():
        off = {k for k, _ in kinds if not form.cleaned_data[k]}
        shown = {k for k, _ in kinds}
        NotificationOptOut.objects.filter(user=user, kind__in=shown - off).delete()
        NotificationOptOut.objects.bulk_create(
            [NotificationOptOut(user=user, kind=k) for k in off - opted_out],
            ignore_conflicts=True,
        )
        messages.success(request, "Notification preferences saved.")
        return redirect("quotas:notifications")
    return render(request, "quotas/notifications.html", {"form": form})
