"""The capacity calendar (issue #25 section 1): per cluster, GPU class and resource, the
coming days or hours as slots of what is allocatable, granted, booked and free to grant.

- **limit**: allocatable times the overcommit ratio, of the class (the pool for any class).
- **granted** and **booked**: what grants reserve in the slot, at its busiest instant;
  granted are those that have started, booked those that start later (approved requests
  for a window ahead). Their sum is the slot's reserved figure.
- **free to grant**: ``Capacity.free`` over the slot, the one definition (DESIGN.md): what
  an approval of a request for exactly this slot could take (capped by the pool for a
  class, less what pods hold beyond their grants). Approval checks the same figure over a
  request's window, so two bookings cannot both take the last GPUs.
- **yours**: the viewer's teams' grants and pending requests that overlap the slot.

Pure over a loaded :class:`~quotas.capacity.Capacity` plus the viewer's rows; the views and
the API only parse and render.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta

from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from inventory.models import Cluster, GpuClass

from .capacity import Capacity
from .models import Grant, QuotaRequest
from .scoping import visible_to

# view -> (slot length, slots shown): weeks ahead by day, three days by the hour.
VIEWS = {"day": (timedelta(days=1), 42), "hour": (timedelta(hours=1), 72)}


@dataclass(frozen=True)
class Mark:
    """One of the viewer's teams' grants or pending requests in a slot."""

    kind: str  # "granted", "booked" or "pending"
    team: str
    namespace: str
    amount: int
    starts_at: datetime
    ends_at: datetime | None
    url: str


@dataclass(frozen=True)
class Slot:
    start: datetime
    end: datetime
    limit: int
    granted: int
    booked: int
    free: int
    yours: list[Mark] = field(default_factory=list)

    @property
    def reserved(self) -> int:
        return self.granted + self.booked


def first_slot(view: str, at: datetime) -> datetime:
    """The start of the slot holding ``at``: its hour, or its day (UTC)."""
    at = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return at if view == "hour" else at.replace(hour=0)


def start_of(view: str, day) -> datetime:
    """Where a calendar starts: ``day``'s midnight (UTC), or the slot holding now."""
    if day is None:
        return first_slot(view, timezone.now())
    return datetime.combine(day, time(), tzinfo=UTC)


def default_resource(resources: list[str]) -> str:
    """Whole GPUs where the cluster advertises them, else its first GPU resource ("")."""
    if "nvidia.com/gpu" in resources:
        return "nvidia.com/gpu"
    return resources[0] if resources else ""


def _split(windows, start: datetime, end: datetime, now: datetime) -> tuple[int, int]:
    """(granted, booked) at the busiest instant of [start, end): the slot's start or a
    grant's start inside it (reservations only grow at a start)."""
    instants = {start} | {s for s, _, _ in windows if start < s < end}
    best = (-1, 0, 0)
    for t in sorted(instants):
        granted = booked = 0
        for s, e, amount in windows:
            if s <= t and (e is None or e > t):
                if s <= now:
                    granted += amount
                else:
                    booked += amount
        if granted + booked > best[0]:
            best = (granted + booked, granted, booked)
    return best[1], best[2]


def slots(
    cap: Capacity,
    cluster: Cluster,
    gpu_class: GpuClass | None,
    resource: str,
    view: str,
    start: datetime,
    marks: list[Mark] = (),
) -> list[Slot]:
    """The calendar's slots from ``start`` (a slot boundary), by the view's length."""
    length, count = VIEWS[view]
    windows = cap.windows_of(cluster.pk, gpu_class, resource)
    out = []
    for n in range(count):
        s = start + n * length
        e = s + length
        room = cap.free(cluster.pk, gpu_class, resource, s, e)
        granted, booked = _split(windows, s, e, cap.now)
        yours = _grouped(
            m for m in marks if m.starts_at < e and (m.ends_at is None or m.ends_at > s)
        )
        out.append(Slot(s, e, room.limit, granted, booked, room.free, yours))
    return out


def _grouped(marks) -> list[Mark]:
    """One mark per kind and namespace, amounts summed (two grants of a namespace are one
    line: "vision/ml-vision: 24 granted"), from the earliest start to the latest end."""
    groups: dict[tuple, Mark] = {}
    for m in marks:
        key = (m.kind, m.team, m.namespace)
        if key in groups:
            g = groups[key]
            ends = None if m.ends_at is None or g.ends_at is None else max(m.ends_at, g.ends_at)
            m = Mark(m.kind, m.team, m.namespace, g.amount + m.amount,
                     min(m.starts_at, g.starts_at), ends, g.url)  # fmt: skip
        groups[key] = m
    return list(groups.values())


# -- loading for one viewer --------------------------------------------------------------


def marks_for(user, cluster: Cluster, gpu_class: GpuClass | None, resource: str, start, end,
              now: datetime) -> list[Mark]:  # fmt: skip
    """The viewer's teams' grants (granted or booked) and pending requests of ``resource``
    on ``cluster`` overlapping [start, end) (admins: every team's). A class calendar marks
    that class's and any-class rows: both can run on the class's GPUs."""
    same_class = Q() if gpu_class is None else Q(gpu_class=gpu_class) | Q(gpu_class__isnull=True)
    grants = (
        visible_to(Grant.objects.overlapping(start, end), user, "namespace__team")
        .filter(same_class, namespace__cluster=cluster, resource=resource)
        .select_related("namespace__team")
    )
    marks = [
        Mark("granted" if g.starts_at <= now else "booked", g.namespace.team.slug,
             g.namespace.name, g.amount, g.starts_at, g.ends_at,
             reverse("quotas:namespace", args=[g.namespace_id]))
        for g in grants
    ]  # fmt: skip
    pending = (
        visible_to(QuotaRequest.objects.filter(status=QuotaRequest.Status.PENDING), user)
        .filter(same_class, namespace__cluster=cluster, resource=resource, starts_at__lt=end)
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gt=start))
        .select_related("team", "namespace")
    )
    marks += [
        Mark("pending", r.team.slug, r.namespace.name, r.amount, r.starts_at or now,
             r.ends_at, reverse("quotas:request", args=[r.pk]))
        for r in pending
    ]  # fmt: skip
    return sorted(marks, key=lambda m: (m.starts_at, m.team, m.namespace))


def calendar_for(user, cluster: Cluster, gpu_class: GpuClass | None, resource: str,
                 view: str, start: datetime) -> list[Slot]:  # fmt: skip
    """Three queries and a capacity load: the slots as ``user`` sees them."""
    length, count = VIEWS[view]
    end = start + length * count
    cap = Capacity([cluster.pk], [resource])
    marks = marks_for(user, cluster, gpu_class, resource, start, end, cap.now)
    return slots(cap, cluster, gpu_class, resource, view, start, marks)


def bookings(user):
    """Time-bound grants of ``user``'s teams (admins: every team's) that have not ended: the
    API's bookings and the iCalendar feed."""
    qs = Grant.objects.filter(ended_at__isnull=True, ends_at__gt=timezone.now()).select_related(
        "namespace__team", "namespace__cluster", "gpu_class"
    )
    return visible_to(qs, user, "namespace__team").order_by("starts_at", "id")


def ical(user, link) -> bytes:
    """``user``'s bookings as an iCalendar (RFC 5545) document; ``link(grant)`` gives each
    event's URL. One event per grant, its UID stable, so calendar apps update it in place."""
    import icalendar

    cal = icalendar.Calendar()
    cal.add("prodid", "-//GPU quota portal//bookings//EN")
    cal.add("version", "2.0")
    cal.add("x-wr-calname", f"GPU bookings of {user.get_username()}")
    now = timezone.now()
    for grant in bookings(user):
        ns = grant.namespace
        kind = grant.gpu_class.name if grant.gpu_class else "any class"
        event = icalendar.Event()
        event.add("uid", f"grant-{grant.pk}@gpu-quota-portal")
        event.add("dtstamp", now)
        event.add("dtstart", grant.starts_at)
        event.add("dtend", grant.ends_at)
        event.add("summary", f"{grant.amount} {grant.resource} ({kind}) for {ns.team.slug}")
        event.add("location", f"{ns.cluster.slug}/{ns.name}")
        event.add("url", link(grant))
        cal.add_component(event)
    return cal.to_ical()
