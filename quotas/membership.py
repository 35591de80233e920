"""Team membership run by the team's managers: add, remove, change a role.

Who may: the team's managers and portal admins (Django staff); anyone else gets a
``PermissionError``. A team keeps at least one manager: removing or demoting the last
one is refused (``MembershipConflict``), and the team row is locked for the change so two
managers demoting each other at once cannot leave it with none.

Only existing accounts can be added. Accounts are created when a person first signs in
(locally or, with single sign-on, by the identity provider), so an unknown name or
e-mail is refused with "they must sign in once first" rather than creating an account
nobody can sign in to.

Every change is one transaction, written to the audit trail (``team.member_added``,
``team.member_removed``, ``team.role_changed``) and e-mailed after commit to the
affected person and to the team's managers (quotas/notify.py ``membership_changed``).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404

from portal.validation import NOT_FOUND

from . import notify
from .audit import record
from .models import Membership, Team
from .services import TransitionError

Role = Membership.Role

NO_SUCH_USER = (
    "No such user: {who!r}. They must sign in to the portal once first; their account is "
    "created then."
)
LAST_MANAGER = (
    "{user} is the last manager of {team}: a team keeps at least one manager. Make "
    "someone else a manager first."
)


class MembershipConflict(TransitionError):
    """The change conflicts with the team's current members (409 in the API)."""


class NotAMember(Http404):
    """The named user is not in the team (404 on pages and in the API)."""


def can_manage(user, team: Team) -> bool:
    """Portal admins and the team's managers."""
    if not (user and user.is_authenticated):
        return False
    return (
        user.is_staff or Membership.objects.filter(team=team, user=user, role=Role.MANAGER).exists()
    )


def find_user(username_or_email: str):
    """The active account with this username, or else this e-mail (case-insensitive)."""
    who = (username_or_email or "").strip()
    if not who:
        raise ValidationError({"user": "Enter a username or an e-mail address."})
    users = get_user_model().objects
    user = users.filter(username=who).first() or users.filter(username__iexact=who).first()
    if user is None and "@" in who:
        found = list(users.filter(email__iexact=who)[:2])
        if len(found) > 1:
            raise ValidationError(
                {"user": f"Several accounts have the e-mail {who!r}: enter the username."}
            )
        user = found[0] if found else None
    if user is None:
        raise ValidationError(
            {"user": ValidationError(NO_SUCH_USER.format(who=who), code=NOT_FOUND)}
        )
    if not user.is_active:
        raise ValidationError({"user": f"The account {user.get_username()!r} is deactivated."})
    return user


def _check_role(role: str) -> str:
    if role not in Role.values:
        raise ValidationError({"role": f"Choose one of: {', '.join(Role.values)}."})
    return role


def _authorize(team: Team, by) -> Team:
    """Lock the team for this change and check ``by`` may make it."""
    locked = Team.objects.select_for_update().get(pk=team.pk)
    if not can_manage(by, locked):
        raise PermissionError("Only the team's managers and portal admins can change its members.")
    return locked


def _membership(team: Team, username: str) -> Membership:
    m = Membership.objects.select_related("user").filter(team=team, user__username=username)
    found = m.first()
    if found is None:
        raise NotAMember(f"{username} is not a member of {team.name}.")
    return found


def _managers(team: Team) -> int:
    return Membership.objects.filter(team=team, role=Role.MANAGER).count()


def _state(m: Membership) -> dict:
    return {"user": m.user.get_username(), "role": m.role}


def add_member(team: Team, username_or_email: str, role: str, by) -> Membership:
    """Add an existing account to ``team`` with ``role``."""
    with transaction.atomic():
        team = _authorize(team, by)
        role = _check_role(role)
        user = find_user(username_or_email)
        current = Membership.objects.filter(team=team, user=user).first()
        if current is not None:
            raise MembershipConflict(
                f"{user.get_username()} is already in {team.name} (as {current.role})."
            )
        m = Membership.objects.create(team=team, user=user, role=role)
        record(by, "team.member_added", m, team=team, after=_state(m))
        notify.membership_changed(team, user, by, f"added you to {team.name} as {role}",
                                  f"added {user.get_username()} as {role}")  # fmt: skip
    return m


def remove_member(team: Team, username: str, by) -> None:
    """Remove ``username`` from ``team`` (not its last manager)."""
    with transaction.atomic():
        team = _authorize(team, by)
        m = _membership(team, username)
        if m.role == Role.MANAGER and _managers(team) <= 1:
            raise MembershipConflict(LAST_MANAGER.format(user=username, team=team.name))
        before = _state(m)
        record(by, "team.member_removed", m, team=team, before=before)
        m.delete()
        notify.membership_changed(team, m.user, by, f"removed you from {team.name}",
                                  f"removed {username} (was {before['role']})")  # fmt: skip


def set_role(team: Team, username: str, role: str | None, by) -> Membership:
    """Make ``username`` a member or a manager of ``team`` (not demote its last manager).
    No role (an empty PATCH) changes nothing and answers the membership as it is."""
    with transaction.atomic():
        team = _authorize(team, by)
        role = None if role is None else _check_role(role)
        m = _membership(team, username)
        if role is None or m.role == role:
            return m  # nothing changes: no audit row, no e-mail
        if m.role == Role.MANAGER and _managers(team) <= 1:
            raise MembershipConflict(LAST_MANAGER.format(user=username, team=team.name))
        before = _state(m)
        m.role = role
        m.save(update_fields=["role"])
        record(by, "team.role_changed", m, team=team, before=before, after=_state(m))
        notify.membership_changed(team, m.user, by, f"made you a {role} of {team.name}",
                                  f"made {username} a {role} (was {before['role']})")  # fmt: skip
    return m
