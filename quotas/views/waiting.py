"""Why is my job waiting? One team's waiting pods and queued workloads (quotas/waiting.py)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from ..waiting_service import team_waiting
from .common import visible_teams

POLL_EVERY = "15s"


@login_required
def waiting(request: HttpRequest, slug: str) -> HttpResponse:
    """The page, and its live part on its own (htmx asks for it every POLL_EVERY). Names of
    pods are shown to the team's members and admins only: another team's page is a 404."""
    team = get_object_or_404(visible_teams(request.user), slug=slug)
    report = team_waiting(team)
    partial = request.headers.get("HX-Request") == "true"
    return render(
        request,
        "quotas/_waiting.html" if partial else "quotas/waiting.html",
        {"team": team, "report": report, "poll_every": POLL_EVERY},
    )
