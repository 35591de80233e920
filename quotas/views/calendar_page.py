"""The capacity calendar page (issue #25 section 1): pick a cluster, class, resource and
view; see each slot's figures (quotas/calendar.py) and book a free window through the
request form, prefilled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from inventory.models import Cluster, GpuClass

from ..audit import record
from ..calendar import VIEWS, calendar_for, default_resource, ical, start_of
from ..capacity import advertised_resources
from ..models import CalendarFeed, TeamNamespace
from ..scoping import visible_to

# How far ahead the calendar may be paged: a request starts at most QUOTA_MAX_START_DAYS ahead.
MAX_AHEAD = timedelta(days=400)


class CalendarQuery(forms.Form):
    """What the calendar shows; every field has a default, a bad value is a 400 page."""

    cluster = forms.ModelChoiceField(
        Cluster.objects.order_by("name"), to_field_name="slug", required=False, empty_label=None
    )
    gpu_class = forms.ModelChoiceField(
        GpuClass.objects.none(), to_field_name="slug", required=False,
        empty_label="Any class (the pool)", label="GPU class",
    )  # fmt: skip
    resource = forms.ChoiceField(choices=(), required=False)
    view = forms.ChoiceField(choices=[("day", "Days"), ("hour", "Hours")], required=False)
    start = forms.DateField(required=False, label="From (UTC)")
    namespace = forms.ModelChoiceField(
        TeamNamespace.objects.none(), required=False, label="Book for",
        empty_label="Choose a namespace",
    )  # fmt: skip

    def __init__(self, data, *, user):
        super().__init__(data)
        cluster = self._cluster(data, user)
        self.cluster = cluster
        if cluster is None:
            return
        self.fields["gpu_class"].queryset = GpuClass.objects.filter(cluster=cluster).order_by(
            "name"
        )
        resources = advertised_resources(cluster)
        self.fields["resource"].choices = [(r, r) for r in resources]
        namespaces = visible_to(
            TeamNamespace.objects.filter(cluster=cluster).select_related("team"), user
        ).order_by("name")
        self.fields["namespace"].queryset = namespaces
        self.fields["namespace"].label_from_instance = lambda ns: f"{ns.name} ({ns.team.slug})"
        self.resources = resources

    def _cluster(self, data, user) -> Cluster | None:
        """The chosen cluster; by default the first where the user's teams have a
        namespace (admins and people without one: the first)."""
        clusters = Cluster.objects.order_by("name")
        slug = data.get("cluster") if data else None
        if slug:
            return clusters.filter(slug=slug).first() or clusters.first()
        own = visible_to(TeamNamespace.objects.all(), user).values("cluster_id")
        return (None if user.is_staff else clusters.filter(pk__in=own).first()) or clusters.first()

    def clean_start(self):
        start = self.cleaned_data.get("start")
        if start is not None and not (
            timezone.now().date() - timedelta(days=1)
            <= start
            <= (timezone.now() + MAX_AHEAD).date()
        ):
            raise forms.ValidationError("Pick a day from yesterday to about a year ahead.")
        return start


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


def book_url(namespace, resource: str, gpu_class, start: datetime, end: datetime) -> str:
    """The request form for this window, prefilled (quotas/views/requests.py PREFILLED)."""
    query = {
        "namespace": namespace.pk, "resource": resource, "duration": "window",
        "starts_at": _iso(start), "ends_at": _iso(end), "amount": 1,
    }  # fmt: skip
    if gpu_class is not None:
        query["gpu_class"] = gpu_class.pk
    return f"{reverse('quotas:request-new')}?{urlencode(query)}"


@login_required
def calendar(request: HttpRequest) -> HttpResponse:
    form = CalendarQuery(request.GET or None, user=request.user)
    cluster = form.cluster
    context = {"form": form, "cluster": cluster}
    if cluster is None:
        return render(request, "quotas/calendar.html", context)
    if request.GET and not form.is_valid():
        return render(request, "quotas/calendar.html", context, status=400)
    data = form.cleaned_data if request.GET else {}
    view = data.get("view") or "day"
    resource = data.get("resource") or default_resource(form.resources)
    gpu_class = data.get("gpu_class")
    namespace = data.get("namespace")
    if namespace is None and len(form.fields["namespace"].queryset) == 1:
        namespace = form.fields["namespace"].queryset[0]
    start = start_of(view, data.get("start"))
    length, count = VIEWS[view]
    slots = (
        calendar_for(request.user, cluster, gpu_class, resource, view, start) if resource else []
    )
    now = timezone.now()
    cells = [
        {"slot": s, "past": s.end <= now,
         "book": book_url(namespace, resource, gpu_class, max(s.start, now), s.end)
         if namespace is not None and s.free > 0 and s.end > now else ""}
        for s in slots
    ]  # fmt: skip
    shift = length * count

    def page(at: datetime) -> str:
        query = {k: v for k, v in request.GET.items() if k != "start"}
        query.update(cluster=cluster.slug, view=view, start=at.date().isoformat())
        return f"?{urlencode(query)}"

    context.update(
        view=view, resource=resource, gpu_class=gpu_class, namespace=namespace, cells=cells,
        start=start, end=start + shift, length=length,
        earlier=page(start - shift) if start - shift >= now - timedelta(days=1) else "",
        later=page(start + shift) if start + shift <= now + MAX_AHEAD else "",
    )  # fmt: skip
    return render(request, "quotas/calendar.html", context)


# -- the iCalendar feed --------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def calendar_feed(request: HttpRequest) -> HttpResponse:
    """GET: the feed in use, if any. POST: a new feed URL (the one in use stops working),
    shown once: only its hash is kept."""
    feed = CalendarFeed.objects.filter(user=request.user, revoked_at__isnull=True).first()
    url = ""
    if request.method == "POST":
        feed, raw = CalendarFeed.issue(request.user)
        record(request.user, "calendar_feed.issued", feed, after={"prefix": feed.prefix})
        url = request.build_absolute_uri(reverse("quotas:calendar-ics", args=[raw]))
    return render(request, "quotas/calendar_feed.html", {"feed": feed, "url": url})


@login_required
@require_http_methods(["GET", "POST"])
def calendar_feed_revoke(request: HttpRequest) -> HttpResponse:
    feed = CalendarFeed.objects.filter(user=request.user, revoked_at__isnull=True).first()
    if feed is None:
        messages.info(request, "You have no calendar feed in use.")
        return redirect("quotas:calendar-feed")
    if request.method == "POST":
        feed.revoked_at = timezone.now()
        feed.save(update_fields=["revoked_at"])
        record(request.user, "calendar_feed.revoked", feed, after={"prefix": feed.prefix})
        messages.success(request, "Calendar feed revoked: calendar apps reading it stop updating.")
        return redirect("quotas:calendar-feed")
    return render(request, "quotas/calendar_feed_revoke.html", {"feed": feed})


def calendar_ics(request: HttpRequest, secret: str) -> HttpResponse:
    """The feed itself: no session (calendar apps have none), the URL is the credential."""
    feed = CalendarFeed.find(secret)
    if feed is None:
        raise Http404("No such calendar feed.")
    now = timezone.now()
    if feed.last_used_at is None or now - feed.last_used_at > timedelta(minutes=5):
        CalendarFeed.objects.filter(pk=feed.pk).update(last_used_at=now)

    def link(grant) -> str:
        return request.build_absolute_uri(reverse("quotas:namespace", args=[grant.namespace_id]))

    response = HttpResponse(ical(feed.user, link), content_type="text/calendar; charset=utf-8")
    response["Cache-Control"] = "private, no-store"
    return response
