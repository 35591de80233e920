"""Re-apply the group rules to one person at sign-in: memberships, roles, ``is_staff``.

``mapping`` decides; this module reads the rows, locks the teams involved (in one order,
as quotas/membership.py locks a team for a change, so two sign-ins or a manager's edit
cannot leave a team without a manager), carries the plan out, writes one audit row per
change (``sso.member_added``, ``sso.role_changed``, ``sso.member_removed``,
``sso.last_manager_kept``, ``sso.staff_changed``) and e-mails membership changes as
quotas/membership.py does (quotas/notify.py ``membership_changed``, after commit). The
caller holds the transaction.
"""

from __future__ import annotations

import logging

from django.db.models import Count

from quotas import notify
from quotas.audit import record
from quotas.models import Membership, Team

from . import mapping
from .models import GroupRule, ManagedMembership, SsoIdentity

log = logging.getLogger(__name__)
SSO_NOTE = "single sign-on"


def rules() -> list[mapping.Rule]:
    return [
        mapping.Rule(group=r.group, grants=r.grants, team=r.team_id, role=r.role)
        for r in GroupRule.objects.filter(enabled=True).order_by("pk")
    ]


def _because(groups) -> str:
    groups = list(groups)
    if not groups:
        return "no rule grants it any more"
    word = "group" if len(groups) == 1 else "groups"
    return f"IdP {word} {', '.join(groups)}"


def apply(user, identity: SsoIdentity, groups: list[str]) -> list[mapping.Change]:
    """Bring ``user``'s managed memberships and ``is_staff`` in line with ``groups``."""
    active = rules()
    wanted = mapping.team_grants(groups, active)
    mine = set(Membership.objects.filter(user=user).values_list("team_id", flat=True))
    # Lock every team involved, in one order, before reading its managers.
    locked = Team.objects.select_for_update().filter(pk__in={*wanted, *mine}).order_by("pk")
    teams = {t.pk: t for t in locked}
    current = {m.team_id: m for m in Membership.objects.filter(user=user, team_id__in=teams)}
    managed = set(
        ManagedMembership.objects.filter(membership__user=user).values_list(
            "membership__team_id", flat=True
        )
    )
    others = dict(
        Membership.objects.filter(team_id__in=teams, role=Membership.Role.MANAGER)
        .exclude(user=user)
        .values("team_id")
        .annotate(n=Count("id"))
        .values_list("team_id", "n")
    )
    held = {t: mapping.Held(m.role, t in managed) for t, m in current.items()}
    wanted = {t: g for t, g in wanted.items() if t in teams}
    changes = mapping.plan_memberships(wanted, held, others)
    for change in changes:
        _carry_out(change, user, teams[change.team], current.get(change.team))
    # Managed memberships that stay: remember which groups grant them now.
    for team, grant in wanted.items():
        m = current.get(team)
        if m is not None and team in managed:
            ManagedMembership.objects.filter(membership=m).exclude(
                groups=list(grant.groups)
            ).update(groups=list(grant.groups))
    _apply_staff(user, identity, mapping.grants_staff(groups, active))
    return changes


def _state(user, role, groups=()) -> dict:
    state = {"user": user.get_username(), "role": role}
    if groups:
        state["groups"] = list(groups)
    return state


def _carry_out(change: mapping.Change, user, team: Team, m: Membership | None) -> None:
    name = user.get_username()
    why = _because(change.groups)
    if change.action == mapping.ADD:
        m = Membership.objects.create(team=team, user=user, role=change.after)
        ManagedMembership.objects.create(membership=m, groups=list(change.groups))
        record(None, "sso.member_added", m, team=team, after=_state(user, m.role, change.groups),
               note=f"{SSO_NOTE}: {why}")  # fmt: skip
        notify.membership_changed(
            team, user, None, f"added you to {team.name} as {m.role} ({SSO_NOTE}, {why})",
            f"added {name} as {m.role} ({SSO_NOTE}, {why})",
        )  # fmt: skip
    elif change.action == mapping.ROLE:
        before = _state(user, m.role)
        m.role = change.after
        m.save(update_fields=["role"])
        ManagedMembership.objects.filter(membership=m).update(groups=list(change.groups))
        record(None, "sso.role_changed", m, team=team, before=before,
               after=_state(user, m.role, change.groups), note=f"{SSO_NOTE}: {why}")  # fmt: skip
        notify.membership_changed(
            team, user, None, f"made you a {m.role} of {team.name} ({SSO_NOTE}, {why})",
            f"made {name} a {m.role} (was {before['role']}; {SSO_NOTE}, {why})",
        )  # fmt: skip
    elif change.action == mapping.REMOVE:
        before = _state(user, m.role)
        record(None, "sso.member_removed", m, team=team, before=before,
               note=f"{SSO_NOTE}: {why}")  # fmt: skip
        m.delete()
        notify.membership_changed(
            team, user, None, f"removed you from {team.name} ({SSO_NOTE}, {why})",
            f"removed {name} (was {before['role']}; {SSO_NOTE}, {why})",
        )  # fmt: skip
    elif change.action == mapping.KEEP_LAST_MANAGER:
        wanted = f"make {name} a {change.after}" if change.after else f"remove {name}"
        note = (f"{SSO_NOTE}: the rules would {wanted}, but {name} is the last manager of "
                f"{team.name}; kept as manager until the team has another one")  # fmt: skip
        log.warning("%s", note)
        record(None, "sso.last_manager_kept", m, team=team, before=_state(user, m.role),
               after={"wanted": change.after}, note=note)  # fmt: skip


def _apply_staff(user, identity: SsoIdentity, staff_groups: tuple[str, ...]) -> None:
    step = mapping.plan_staff(bool(staff_groups), user.is_staff, identity.staff_managed)
    if step is None:
        return
    user.is_staff = step == mapping.GRANT
    user.save(update_fields=["is_staff"])
    identity.staff_managed = user.is_staff
    identity.save(update_fields=["staff_managed"])
    record(
        None, "sso.staff_changed", user, before={"is_staff": not user.is_staff},
        after={"is_staff": user.is_staff}, note=f"{SSO_NOTE}: {_because(staff_groups)}",
    )  # fmt: skip
