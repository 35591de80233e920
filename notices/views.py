"""The notifications page: the caller's own notices, opening one, marking all read."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from . import services

PER_PAGE = 20


@login_required
def notification_list(request: HttpRequest) -> HttpResponse:
    qs = services.for_user(request.user).select_related("team").order_by("-created_at")
    page = Paginator(qs, PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "notices/list.html", {"page": page})


@login_required
def notification_open(request: HttpRequest, pk) -> HttpResponse:
    """Mark one of the caller's notices read and go to its link (a portal path only)."""
    note = services.mark_read(request.user, pk)
    if note is None:
        raise Http404("No such notification.")
    if services.is_local_path(note.url):
        return redirect(note.url)
    return redirect("notices:list")


@login_required
@require_POST
def notification_read_all(request: HttpRequest) -> HttpResponse:
    count = services.mark_all_read(request.user)
    if count:
        messages.success(request, f"Marked {count} notification{'s' if count != 1 else ''} read.")
    return redirect("notices:list")
