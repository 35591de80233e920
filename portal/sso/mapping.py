"""From IdP groups to team roles and portal admin rights: pure functions, no database.

``groups_from_claims`` reads the groups claim (a list, one string, or a dotted path such as
``realm_access.roles``); ``team_grants`` and ``grants_staff`` say what the rules give for a
list of groups; ``plan_memberships`` and ``plan_staff`` compare that with what the person
holds and say what to change. ``grants.py`` carries the plan out.

The rules of the plan:
- a team a rule grants and the person is not in: added with the rule's role (manager wins
  when several rules name the team);
- a membership single sign-on granted ("managed"): its role follows the rules, and it is
  removed when no rule grants it any more;
- a membership added by hand (not managed): left alone, whatever the rules say;
- a team keeps one manager: demoting or removing its last manager is not done, and the
  plan says so (``KEEP_LAST_MANAGER``) so it can be audited as a warning;
- ``is_staff``: granted when a rule grants it, revoked only when single sign-on had granted
  it; a portal admin made by hand stays one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

MEMBER, MANAGER = "member", "manager"
TEAM, STAFF = "team", "staff"
ADD, ROLE, REMOVE, KEEP_LAST_MANAGER = "added", "role_changed", "removed", "last_manager_kept"
GRANT, REVOKE = "grant", "revoke"
GLOB_CHARS = frozenset("*?[")
MAX_GROUPS = 1000
MAX_GROUP_LENGTH = 255


@dataclass(frozen=True)
class Rule:
    group: str  # exact name or glob
    grants: str  # TEAM or STAFF
    team: Hashable | None = None
    role: str = MEMBER


@dataclass(frozen=True)
class TeamGrant:
    role: str
    groups: tuple[str, ...]  # the person's groups that grant it


@dataclass(frozen=True)
class Held:
    role: str
    managed: bool  # granted by single sign-on (else added by hand)


@dataclass(frozen=True)
class Change:
    action: str  # ADD, ROLE, REMOVE or KEEP_LAST_MANAGER
    team: Hashable
    before: str | None  # role before (None: not a member)
    after: str | None  # role after (None: removed; KEEP_LAST_MANAGER: the role wanted)
    groups: tuple[str, ...] = ()


def claim(claims: Mapping, name: str):
    """``claims[name]``, or the value at the dotted path ``name`` (``realm_access.roles``)."""
    if name in claims:
        return claims[name]
    value = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def groups_from_claims(claims: Mapping, name: str) -> list[str]:
    """The person's groups: unique, in order, non-empty strings; anything else ignored."""
    value = claim(claims, name)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return []
    seen: dict[str, None] = {}
    for item in value:
        if isinstance(item, bool) or not isinstance(item, str | int):
            continue
        group = str(item).strip()
        if group and len(group) <= MAX_GROUP_LENGTH:
            seen.setdefault(group, None)
        if len(seen) >= MAX_GROUPS:
            break
    return list(seen)


def matches(pattern: str, group: str) -> bool:
    """Exact, case-sensitive; a pattern with ``* ? [`` is a glob (``fnmatchcase``)."""
    if pattern == group:
        return True
    return bool(GLOB_CHARS & set(pattern)) and fnmatchcase(group, pattern)


def _matching(groups: Iterable[str], rule: Rule) -> tuple[str, ...]:
    return tuple(g for g in groups if matches(rule.group, g))


def team_grants(groups: list[str], rules: Iterable[Rule]) -> dict[Hashable, TeamGrant]:
    """Each team the rules give for ``groups``, with the highest role and the groups."""
    found: dict[Hashable, TeamGrant] = {}
    for rule in rules:
        if rule.grants != TEAM or rule.team is None:
            continue
        hit = _matching(groups, rule)
        if not hit:
            continue
        prior = found.get(rule.team)
        role = MANAGER if MANAGER in (rule.role, prior and prior.role) else MEMBER
        merged = tuple(dict.fromkeys((*(prior.groups if prior else ()), *hit)))
        found[rule.team] = TeamGrant(role=role, groups=merged)
    return found


def grants_staff(groups: list[str], rules: Iterable[Rule]) -> tuple[str, ...]:
    """The person's groups that make them a portal admin, in their order (empty: none)."""
    patterns = [rule.group for rule in rules if rule.grants == STAFF]
    return tuple(g for g in groups if any(matches(p, g) for p in patterns))


def plan_memberships(
    wanted: Mapping[Hashable, TeamGrant],
    held: Mapping[Hashable, Held],
    other_managers: Mapping[Hashable, int],
) -> list[Change]:
    """What to change so the managed memberships match ``wanted``.

    ``other_managers[team]``: the team's managers besides this person.
    """
    changes: list[Change] = []

    def last_manager(team) -> bool:
        return other_managers.get(team, 0) < 1

    for team, grant in wanted.items():
        current = held.get(team)
        if current is None:
            changes.append(Change(ADD, team, None, grant.role, grant.groups))
        elif not current.managed or current.role == grant.role:
            continue
        elif current.role == MANAGER and last_manager(team):
            changes.append(Change(KEEP_LAST_MANAGER, team, MANAGER, grant.role, grant.groups))
        else:
            changes.append(Change(ROLE, team, current.role, grant.role, grant.groups))
    for team, current in held.items():
        if team in wanted or not current.managed:
            continue
        if current.role == MANAGER and last_manager(team):
            changes.append(Change(KEEP_LAST_MANAGER, team, MANAGER, None))
        else:
            changes.append(Change(REMOVE, team, current.role, None))
    return changes


def plan_staff(wanted: bool, is_staff: bool, managed: bool) -> str | None:
    """GRANT, REVOKE or None (nothing to do) for ``is_staff``."""
    if wanted and not is_staff:
        return GRANT
    if not wanted and is_staff and managed:
        return REVOKE
    return None
