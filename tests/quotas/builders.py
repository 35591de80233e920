"""Builders for quota rows: teams with members, namespaces, grants."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from quotas.models import Grant, Membership, Team, TeamNamespace


def make_user(username: str, *, staff: bool = False):
    return get_user_model().objects.create_user(
        username, f"{username}@example.com", "pw-" + username, is_staff=staff
    )


def make_team(slug: str, *, members=(), managers=()) -> Team:
    team = Team.objects.create(slug=slug, name=slug.replace("-", " ").title())
    for user in members:
        Membership.objects.create(team=team, user=user, role=Membership.Role.MEMBER)
    for user in managers:
        Membership.objects.create(team=team, user=user, role=Membership.Role.MANAGER)
    return team


def make_namespace(team: Team, cluster, name: str | None = None) -> TeamNamespace:
    return TeamNamespace.objects.create(team=team, cluster=cluster, name=name or team.slug)


def make_grant(namespace, amount: int, resource: str = "nvidia.com/gpu", *, days=None,
               start_in=timedelta(0), **kw) -> Grant:  # fmt: skip
    start = timezone.now() + start_in
    return Grant.objects.create(
        namespace=namespace, resource=resource, amount=amount, starts_at=start,
        ends_at=None if days is None else start + timedelta(days=days),
        start_applied=start_in <= timedelta(0), **kw,
    )  # fmt: skip
