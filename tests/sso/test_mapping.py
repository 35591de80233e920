"""The group rules as pure functions (portal/sso/mapping.py): no database, no provider."""

from __future__ import annotations

import pytest

from portal.sso.mapping import (
    ADD,
    GRANT,
    KEEP_LAST_MANAGER,
    MANAGER,
    MEMBER,
    REMOVE,
    REVOKE,
    ROLE,
    STAFF,
    TEAM,
    Change,
    Held,
    Rule,
    TeamGrant,
    grants_staff,
    groups_from_claims,
    matches,
    plan_memberships,
    plan_staff,
    team_grants,
)

RULES = [
    Rule("vision-users", TEAM, "vision", MEMBER),
    Rule("vision-leads", TEAM, "vision", MANAGER),
    Rule("nlp-*", TEAM, "nlp", MEMBER),
    Rule("/org/*/gpu", TEAM, "org", MEMBER),
    Rule("gpu-admins", STAFF),
    Rule("ops-[ab]", STAFF),
]


@pytest.mark.parametrize(
    ("pattern", "group", "hit"),
    [
        ("vision-users", "vision-users", True),
        ("vision-users", "Vision-Users", False),  # case-sensitive
        ("vision-users", "vision-users-x", False),  # exact means exact
        ("nlp-*", "nlp-research", True),
        ("nlp-*", "xnlp-research", False),
        ("/org/*/gpu", "/org/ml/gpu", True),
        ("ops-[ab]", "ops-b", True),
        ("ops-[ab]", "ops-c", False),
        ("team?", "team1", True),
    ],
)
def test_matches(pattern, group, hit):
    assert matches(pattern, group) is hit


@pytest.mark.parametrize(
    ("claims", "name", "groups"),
    [
        ({"groups": ["a", "b", "a", " c ", "", None, 7, True, {"x": 1}]}, "groups",
         ["a", "b", "c", "7"]),
        ({"groups": "solo"}, "groups", ["solo"]),
        ({"groups": {"not": "a list"}}, "groups", []),
        ({}, "groups", []),
        ({"realm_access": {"roles": ["gpu-admins"]}}, "realm_access.roles", ["gpu-admins"]),
        ({"realm_access": ["no-dict"]}, "realm_access.roles", []),
        # a namespaced claim name with dots is read as a whole first
        ({"https://example.org/groups": ["x"]}, "https://example.org/groups", ["x"]),
        ({"groups": ["g" * 256, "ok"]}, "groups", ["ok"]),
    ],
)  # fmt: skip
def test_groups_from_claims(claims, name, groups):
    assert groups_from_claims(claims, name) == groups


def test_groups_are_capped():
    assert len(groups_from_claims({"groups": [f"g{i}" for i in range(5000)]}, "groups")) == 1000


def test_team_grants_highest_role_and_the_groups_that_grant_it():
    found = team_grants(["vision-users", "vision-leads", "nlp-a", "nlp-b", "other"], RULES)
    assert found == {
        "vision": TeamGrant(MANAGER, ("vision-users", "vision-leads")),
        "nlp": TeamGrant(MEMBER, ("nlp-a", "nlp-b")),
    }
    # The manager rule first, the member rule after: still manager.
    reversed_rules = list(reversed(RULES))
    assert team_grants(["vision-users", "vision-leads"], reversed_rules)["vision"].role == MANAGER
    assert team_grants([], RULES) == {}


def test_grants_staff():
    assert grants_staff(["ops-a", "gpu-admins", "x"], RULES) == ("ops-a", "gpu-admins")
    assert grants_staff(["vision-users"], RULES) == ()


def test_plan_adds_changes_and_removes_only_what_single_sign_on_manages():
    wanted = {"vision": TeamGrant(MANAGER, ("vision-leads",)), "new": TeamGrant(MEMBER, ("n",)),
              "hand": TeamGrant(MANAGER, ("h",))}  # fmt: skip
    held = {
        "vision": Held(MEMBER, managed=True),
        "hand": Held(MEMBER, managed=False),  # added by hand: the rules do not touch it
        "gone": Held(MEMBER, managed=True),
        "hand-only": Held(MANAGER, managed=False),
    }
    assert plan_memberships(wanted, held, {"vision": 1, "gone": 1, "hand-only": 0}) == [
        Change(ROLE, "vision", MEMBER, MANAGER, ("vision-leads",)),
        Change(ADD, "new", None, MEMBER, ("n",)),
        Change(REMOVE, "gone", MEMBER, None),
    ]


def test_plan_keeps_a_teams_last_manager():
    held = {"solo": Held(MANAGER, True), "pair": Held(MANAGER, True), "down": Held(MANAGER, True)}
    wanted = {"down": TeamGrant(MEMBER, ("d",))}
    plan = plan_memberships(wanted, held, {"solo": 0, "pair": 1, "down": 0})
    assert plan == [
        Change(KEEP_LAST_MANAGER, "down", MANAGER, MEMBER, ("d",)),
        Change(KEEP_LAST_MANAGER, "solo", MANAGER, None),
        Change(REMOVE, "pair", MANAGER, None),
    ]
    # With another manager the demotion goes ahead.
    assert plan_memberships(wanted, {"down": Held(MANAGER, True)}, {"down": 2}) == [
        Change(ROLE, "down", MANAGER, MEMBER, ("d",))
    ]


def test_plan_nothing_to_do():
    held = {"vision": Held(MEMBER, True)}
    assert plan_memberships({"vision": TeamGrant(MEMBER, ("v",))}, held, {}) == []


@pytest.mark.parametrize(
    ("wanted", "is_staff", "managed", "step"),
    [
        (True, False, False, GRANT),
        (True, True, False, None),  # an admin by hand stays (and stays unmanaged)
        (True, True, True, None),
        (False, True, True, REVOKE),
        (False, True, False, None),  # never revoke an admin made by hand
        (False, False, True, None),
        (False, False, False, None),
    ],
)
def test_plan_staff(wanted, is_staff, managed, step):
    assert plan_staff(wanted, is_staff, managed) == step
