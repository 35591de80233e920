"""E-mail notifications, sent after the transaction commits, honouring opt-outs."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mass_mail
from django.db import transaction
from django.urls import reverse

from .models import Membership, NotificationOptOut, QuotaRequest

log = logging.getLogger(__name__)
Kind = NotificationOptOut.Kind


def _recipients(users, kind: str) -> list[str]:
    ids = {u.pk for u in users if u is not None and u.email}
    opted_out = set(
        NotificationOptOut.objects.filter(user_id__in=ids, kind=kind).values_list(
            "user_id", flat=True
        )
    )
    return sorted({u.email for u in users if u is not None and u.email and u.pk not in opted_out})


def send(kind: str, users, subject: str, body: str, *, url: str = "", team=None,
         webhook: bool = True) -> None:  # fmt: skip
    """Tell ``users``: an in-app notice each (and the event's webhooks), and an e-mail to
    those who have not opted out of ``kind``, sent after the transaction commits."""
    users = list(users)
    _in_app(kind, users, subject, body, url, team, webhook)
    to = _recipients(users, kind)
    if not to:
        return
    messages = [(subject, body, settings.DEFAULT_FROM_EMAIL, [address]) for address in to]

    def deliver() -> None:
        try:
            send_mass_mail(messages, fail_silently=False)
        except Exception:  # a mail outage must not break the workflow
            log.exception("could not send %s notification to %s", kind, to)

    transaction.on_commit(deliver)


def _in_app(kind: str, users, subject: str, body: str, url: str, team, webhook: bool) -> None:
    """The same people get an in-app notice (notices/), whatever their e-mail opt-outs;
    ``webhook``: also tell the event's webhooks."""
    import notices

    text = "\n".join(line for line in body.splitlines() if not url or line.strip() != url)
    notices.notify(users, event=kind, title=subject.removeprefix("[GPU portal] "),
                   body=text.strip(), url=url, team=team, webhook=webhook)  # fmt: skip


def _link(req: QuotaRequest) -> str:
    return settings.PORTAL_URL.rstrip("/") + reverse("quotas:request", args=[req.pk])


def _members(team) -> list:
    """Everyone in the team (grant reminders and reclaims go to all of them)."""
    return [m.user for m in Membership.objects.filter(team=team).select_related("user")]


def _team_people(req: QuotaRequest):
    managers = [
        m.user
        for m in Membership.objects.filter(
            team=req.team, role=Membership.Role.MANAGER
        ).select_related("user")
    ]
    return [req.requested_by, *managers]


@dataclass(frozen=True)
class Granted:
    """What an approval gave, as decided (QuotaRequest.granted_*): the grant row itself
    changes later (a renewal extends it), the decision does not."""

    amount: int
    starts_at: datetime
    ends_at: datetime | None


def granted(req: QuotaRequest) -> Granted | None:
    """What an approval gave: for a new grant or a renewal once approved; None before
    approval, after a rejection or cancellation, and for releases (they give nothing)."""
    if req.kind == QuotaRequest.Kind.RELEASE or req.decided_at is None:
        return None
    if req.status in (QuotaRequest.Status.REJECTED, QuotaRequest.Status.CANCELLED):
        return None
    if req.granted_amount is None:  # decided before the fields existed and not backfilled
        grant = req.grant if req.kind == QuotaRequest.Kind.NEW else req.target_grant
        return None if grant is None else Granted(grant.amount, grant.starts_at, grant.ends_at)
    return Granted(req.granted_amount, req.starts_at, req.granted_ends_at)


def _window(start, end) -> str:
    if end is None:
        return "permanently"
    return f"from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"


def amount_text(req: QuotaRequest) -> str:
    """``4 of 6`` when an admin granted less than asked, else the one amount."""
    grant = granted(req)
    if grant is not None and grant.amount != req.amount:
        return f"{grant.amount} of {req.amount}"
    return str(grant.amount if grant is not None else req.amount)


def _describe(req: QuotaRequest) -> str:
    """The request as asked, or, once approved, as granted (with what was asked)."""
    grant = granted(req)
    if grant is None:
        window = _window(req.starts_at, req.ends_at)
        return f"{req.amount} x {req.resource} in {req.namespace} {window}"
    window = _window(grant.starts_at, grant.ends_at)
    text = f"{grant.amount} x {req.resource} in {req.namespace} {window}"
    asked = []
    if grant.amount != req.amount:
        asked.append(f"{req.amount} asked")
    if grant.ends_at != req.ends_at:
        asked.append(
            "asked permanently"
            if req.ends_at is None
            else f"asked until {req.ends_at:%Y-%m-%d %H:%M} UTC"
        )
    return f"{text} ({'; '.join(asked)})" if asked else text


def new_request(req: QuotaRequest) -> None:
    admins = get_user_model().objects.filter(is_staff=True, is_active=True)
    send(
        Kind.NEW_REQUEST, admins,
        f"[GPU portal] {req.team.name} asks for {req.amount} {req.resource}",
        f"{req.requested_by} asks for {_describe(req)}.\n\n{req.justification}\n\n{_link(req)}\n",
        url=_link(req), team=req.team,
    )  # fmt: skip


def decided(req: QuotaRequest) -> None:
    kind = Kind.APPROVED if req.status == QuotaRequest.Status.APPROVED else Kind.REJECTED
    note = f"\nNote: {req.decision_note}\n" if req.decision_note else ""
    send(
        kind, _team_people(req),
        f"[GPU portal] request {req.status}: {amount_text(req)} {req.resource} for {req.team.name}",
        f"Your request for {_describe(req)} was {req.status}.{note}\n{_link(req)}\n",
        url=_link(req), team=req.team,
    )  # fmt: skip


def applied(req: QuotaRequest) -> None:
    """ "Applied" means usable: the message says what the team can use now, and what binds
    when something other than the portal's quota caps the grant (quotas/figures.py)."""
    from .figures import outcome

    out = outcome(req)
    text = out.text(req.namespace.name) if out else ""
    usable = f"\n{text[:1].upper()}{text[1:]}.\n" if out else ""
    send(
        Kind.APPLIED, _team_people(req),
        f"[GPU portal] quota applied in {req.namespace}"
        + (" (capped by another quota)" if out and out.capped else ""),
        f"The cluster holds the quota for {_describe(req)}.{usable}\n{_link(req)}\n",
        url=_link(req), team=req.team,
    )  # fmt: skip


def failed(req: QuotaRequest, error: str) -> None:
    admins = get_user_model().objects.filter(is_staff=True, is_active=True)
    send(
        Kind.FAILED, [*_team_people(req), *admins],
        f"[GPU portal] applying the quota in {req.namespace} failed",
        f"Applying {_describe(req)} failed: {error}\nAn admin has been told.\n{_link(req)}\n",
        url=_link(req), team=req.team,
    )  # fmt: skip


# What a lowering below usage does, per backend (quotas/preview.py Change.backend).
BELOW = {
    "resourcequota": "below usage, waits for an admin's confirmation",
    "kueue": "below what admitted workloads hold: they keep running, new ones queue",
    "dra": "below the devices claims hold, waits for an admin's confirmation",
}


def _below_usage(lowering: dict | None, backend: str = "resourcequota") -> str:
    if not lowering:
        return ""
    if backend == "kueue":
        what = "; ".join(f"{k} {v['hard']} while admitted workloads hold {v['used']}"
                         for k, v in lowering.items())  # fmt: skip
        return (f"\nThis lowers the team's Kueue quota below what its admitted workloads "
                f"hold ({what}): they keep running, and new workloads of that class queue "
                "until usage falls below the new quota.\n")  # fmt: skip
    holders = "claims hold" if backend == "dra" else "pods use"
    what = "; ".join(f"{k} {v['hard']} while {holders} {v['used']}" for k, v in lowering.items())
    return (f"\nThis lowers the quota below what the namespace's {holders} ({what}): the "
            "portal applies that only once an admin confirms it.\n")  # fmt: skip


def grant_expiring(
    grant, days: int, lowering: dict | None = None, backend: str = "resourcequota"
) -> None:
    team = grant.namespace.team
    people = _members(team)
    send(
        Kind.EXPIRING, people,
        f"[GPU portal] {grant.amount} {grant.resource} in {grant.namespace} ends in {days} days",
        f"The grant of {grant.amount} x {grant.resource} in {grant.namespace} ends on "
        f"{grant.ends_at:%Y-%m-%d %H:%M} UTC. Ask for a renewal on the team page if you "
        f"still need it.\n{_below_usage(lowering, backend)}",
        url=reverse("quotas:grant-renew", args=[grant.pk]), team=team,
    )  # fmt: skip


def booking_starting(grant, now: datetime) -> None:
    team = grant.namespace.team
    people = _members(team)
    hours = max(1, round((grant.starts_at - now).total_seconds() / 3600))
    kind = grant.gpu_class.name if grant.gpu_class else "any class"
    send(
        Kind.STARTING, people,
        f"[GPU portal] {grant.amount} {grant.resource} in {grant.namespace} starts in {hours} h",
        f"The booking of {grant.amount} x {grant.resource} ({kind}) in {grant.namespace} "
        f"starts on {grant.starts_at:%Y-%m-%d %H:%M} UTC"
        + (f" and ends on {grant.ends_at:%Y-%m-%d %H:%M} UTC." if grant.ends_at else ".")
        + " The quota is applied at the start; release it on the team page if you no longer "
        "need it.",
        url=reverse("quotas:namespace", args=[grant.namespace_id]), team=team,
    )  # fmt: skip


def grant_expired(grant, lowering: dict | None = None, backend: str = "resourcequota") -> None:
    team = grant.namespace.team
    people = _members(team)
    send(
        Kind.EXPIRED, people,
        f"[GPU portal] {grant.amount} {grant.resource} in {grant.namespace} has ended",
        f"The grant of {grant.amount} x {grant.resource} in {grant.namespace} ended; the "
        f"namespace's quota now counts its remaining grants.\n{_below_usage(lowering, backend)}",
        url=reverse("quotas:namespace", args=[grant.namespace_id]), team=team,
    )  # fmt: skip


def reclaim_warned(reclaim) -> None:
    """Idle GPUs of a grant go back at the grace's end unless a manager answers."""
    from .reclaim import explain

    ns = reclaim.namespace
    people = _members(ns.team)
    send(
        Kind.RECLAIM, people,
        f"[GPU portal] {reclaim.unused} idle {reclaim.resource} in {ns} go back on "
        f"{reclaim.grace_ends_at:%Y-%m-%d %H:%M} UTC",
        f"{explain(reclaim)}\nUnder the cluster's reclaim policy they go back to the pool on "
        f"{reclaim.grace_ends_at:%Y-%m-%d %H:%M} UTC; what your pods hold is never taken. "
        f"A team manager can answer 'still needed', with a reason, on the team page before "
        f"then: that holds the grant for {reclaim.policy.hold_hours} h.",
        url=reverse("quotas:teams") + f"#reclaim-{reclaim.pk}", team=ns.team,
    )  # fmt: skip


def reclaim_lowered(reclaim) -> None:
    ns = reclaim.namespace
    people = _members(ns.team)
    send(
        Kind.RECLAIM, people,
        f"[GPU portal] {reclaim.lowered_by} idle {reclaim.resource} of {ns} went back",
        f"The grace of the reclaim announced on {reclaim.warned_at:%Y-%m-%d %H:%M} UTC ended "
        f"without a 'still needed': {reclaim.lowered_by} {reclaim.resource} "
        f"({reclaim.class_name}) of {ns}'s grants went back to the pool, and the namespace's "
        "quota is being applied. Ask for more with a new request when you need it.",
        url=reverse("quotas:namespace", args=[ns.pk]), team=ns.team,
    )  # fmt: skip


def lowering_held(op, text: str) -> None:
    """An apply would set a limit below what pods use: it waits for an admin."""
    admins = get_user_model().objects.filter(is_staff=True, is_active=True)
    ns = op.namespace
    link = settings.PORTAL_URL.rstrip("/") + reverse("quotas:namespace", args=[ns.pk])
    send(
        Kind.CONFIRM, admins,
        f"[GPU portal] quota change in {ns} needs your confirmation",
        f"Applying the quota of {ns} ({op.reason}) {text}.\nRunning pods keep running; the "
        f"team's next pods would be refused. Nothing is written until an admin confirms:\n"
        f"{link}\n",
        url=link, team=ns.team,
    )  # fmt: skip


# -- team membership (issue #12 section 1: managers run their team) --------------------

# Membership changes are account notices: sent to the person and the team's managers
# whatever their opt-outs (no NotificationOptOut kind matches this one).
MEMBERSHIP = "membership"


def membership_changed(team, user, by, to_user: str, to_managers: str) -> None:
    """``by`` changed ``user``'s membership of ``team``: tell the person and the managers.

    ``to_user`` completes "<by> ... " for the person ("added you to Vision as member"),
    ``to_managers`` for the team's managers ("added alice as member").
    """
    actor = by.get_username() if by is not None and by.pk else "The portal"
    link = settings.PORTAL_URL.rstrip("/") + reverse("quotas:team-members", args=[team.slug])
    yourself = by is not None and by.pk == user.pk  # nobody is told of their own action
    send(
        MEMBERSHIP, [] if yourself else [user],
        f"[GPU portal] {actor} {to_user}",
        f"{actor} {to_user}.\n\nWho is in the team: {link}\n",
        url=link, team=team, webhook=False,  # webhooks get the managers' wording below
    )  # fmt: skip
    managers = [
        m.user
        for m in Membership.objects.filter(team=team, role=Membership.Role.MANAGER)
        .exclude(user=user)
        .exclude(user_id=getattr(by, "pk", None))
        .select_related("user")
    ]
    send(
        MEMBERSHIP, managers,
        f"[GPU portal] {team.name}: {actor} {to_managers}",
        f"{actor} {to_managers} in {team.name}.\n\nMembers and roles: {link}\n",
        url=link, team=team,
    )  # fmt: skip
