"""Comment threads: who may read and post, posting (one transaction, audited), who is told.

A thread belongs to one request, a quota request (``quotas.QuotaRequest``) or a MIG
request (``mig.MigRequest``). The requester, the members of the request's team and portal
admins may read and post; for anyone else the request does not exist (404).

Who is told of a new comment (e-mail after commit, and an in-app notice where the
``notices`` app is installed), never the author:
- an admin posts: the requester, the team's managers and the admins who commented;
- anyone else posts: every active admin and everyone who commented before.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Q, QuerySet
from django.urls import reverse

from mig.models import MigRequest
from quotas import audit, notify
from quotas.models import Membership, NotificationOptOut, QuotaRequest, Team

from .models import BODY_MAX, Comment

ACTION = "request.commented"
# The notification kind of a comment (in-app, webhooks, e-mail; its e-mails can be turned
# off on the E-mail settings page like every other kind).
EVENT = NotificationOptOut.Kind.COMMENT

Target = QuotaRequest | MigRequest


def _field(target: Target | type) -> str:
    model = target if isinstance(target, type) else type(target)
    return "quota_request" if model is QuotaRequest else "mig_request"


def discussable(model: type[models.Model], user) -> QuerySet:
    """Requests of ``model`` whose thread ``user`` may read and post in."""
    qs = model.objects.select_related("team", "requested_by")
    if user.is_staff:
        return qs
    mine = Team.objects.filter(memberships__user=user).values("pk")
    return qs.filter(Q(team__in=mine) | Q(requested_by=user))


def thread(target: Target) -> QuerySet[Comment]:
    """The request's comments, oldest first."""
    return Comment.objects.filter(**{_field(target): target}).select_related("author")


def clean_body(text: str | None) -> str:
    """A comment says something, in at most 5,000 characters (shared by form and API)."""
    text = (text or "").strip()
    if not text:
        raise ValidationError({"body": "Write a comment first."})
    if len(text) > BODY_MAX:
        raise ValidationError({"body": f"At most {BODY_MAX:,} characters ({len(text):,} written)."})
    return text


@transaction.atomic
def post(author, target: Target, body: str) -> Comment:
    """Store a comment, audit it, tell the other party (in-app now, e-mail on commit)."""
    body = clean_body(body)
    if not discussable(type(target), author).filter(pk=target.pk).exists():
        raise PermissionError("Only the requester, the team and portal admins may comment.")
    earlier = list(thread(target))
    comment = Comment.objects.create(
        **{_field(target): target}, author=author, by_admin=author.is_staff, body=body
    )
    audit.record(
        author, ACTION, target, team=target.team,
        after={"comment": str(comment.pk), "by_admin": comment.by_admin, "length": len(body)},
        note=body[:200],
    )  # fmt: skip
    people = recipients(target, comment, earlier)
    _tell(people, target, comment)
    return comment


def recipients(target: Target, comment: Comment, earlier: list[Comment]) -> list:
    """The other party of ``comment`` (see the module docstring), without its author."""
    if comment.by_admin:
        managers = Membership.objects.filter(team=target.team, role=Membership.Role.MANAGER)
        people = [target.requested_by, *(m.user for m in managers.select_related("user"))]
        people += [c.author for c in earlier if c.by_admin]
    else:
        people = list(get_user_model().objects.filter(is_staff=True))
        people += [c.author for c in earlier]
    out, seen = [], {comment.author_id}
    for user in people:
        if user is not None and user.is_active and user.pk not in seen:
            seen.add(user.pk)
            out.append(user)
    return out


def page_url(target: Target) -> str:
    name = "quotas:request" if isinstance(target, QuotaRequest) else "mig:request"
    return reverse(name, args=[target.pk]) + "#comments"


def describe(target: Target) -> str:
    if isinstance(target, QuotaRequest):
        return f"the request for {target.amount} {target.resource} in {target.namespace}"
    return f"the MIG request {target.gpus} x {target.product} {target.layout_text}"


def _tell(people: list, target: Target, comment: Comment) -> None:
    if not people:
        return
    who = comment.author.get_username() + (" (admin)" if comment.by_admin else "")
    title = f"{who} commented on {describe(target)}"
    url = page_url(target)
    link = settings.PORTAL_URL.rstrip("/") + url
    # The in-app notice, the webhooks and the e-mail (opt-out kind "comment"), as every
    # other notification (quotas/notify.py).
    notify.send(
        EVENT, people, f"[GPU portal] {title}",
        f"{comment.body[:BODY_MAX]}\n\nReply on the request's page:\n{link}\n",
        url=link, team=target.team,
    )  # fmt: skip
