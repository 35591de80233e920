"""The account and rule side of a sign-in (portal/sso/accounts.py, grants.py), on the real
database: concurrent sign-ins, refusals, disabled rules, and the admin's audited edits."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection
from django.test import Client

from portal.sso import accounts
from portal.sso.models import GroupRule, ManagedMembership, SsoIdentity
from quotas.models import AuditEvent, Membership, Team

pytestmark = pytest.mark.django_db(transaction=True)
ISSUER = "https://idp.example.org"
MEMBER, MANAGER = Membership.Role.MEMBER, Membership.Role.MANAGER


@pytest.fixture(autouse=True)
def _issuer(settings):
    settings.SSO_ENABLED = True
    settings.SSO_ISSUER = ISSUER


def claims(sub: str, username: str, groups: list[str], **more) -> dict:
    return {"sub": sub, "preferred_username": username, "email": f"{username}@example.org",
            "groups": groups, **more}  # fmt: skip


def _at_once(*calls):
    """Run each call in its own thread (own database connection), started together."""
    barrier = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def run(call):
        try:
            barrier.wait(timeout=10)
            call()
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_two_first_sign_ins_of_one_person_at_once_make_one_account():
    team = Team.objects.create(slug="vision", name="Vision")
    GroupRule.objects.create(group="v", team=team, role=MEMBER)
    person = claims("sub-1", "tess", ["v"])
    _at_once(*[lambda: accounts.sign_in(person)] * 3)
    user = get_user_model().objects.get(username="tess")
    assert SsoIdentity.objects.get().user == user
    assert Membership.objects.get(team=team).user == user
    assert AuditEvent.objects.filter(action="sso.user_created").count() == 1
    assert AuditEvent.objects.filter(action="sso.member_added").count() == 1


def test_two_managers_demoted_at_once_leave_the_team_one_manager():
    team = Team.objects.create(slug="vision", name="Vision")
    GroupRule.objects.create(group="leads", team=team, role=MANAGER)
    GroupRule.objects.create(group="users", team=team, role=MEMBER)
    a, b = claims("sub-a", "ann", ["leads"]), claims("sub-b", "ben", ["leads"])
    accounts.sign_in(a)
    accounts.sign_in(b)
    assert set(Membership.objects.values_list("role", flat=True)) == {MANAGER}

    a["groups"] = b["groups"] = ["users"]
    _at_once(lambda: accounts.sign_in(a), lambda: accounts.sign_in(b))

    roles = sorted(Membership.objects.filter(team=team).values_list("role", flat=True))
    assert roles == [MANAGER, MEMBER]
    assert AuditEvent.objects.filter(action="sso.role_changed").count() == 1
    assert AuditEvent.objects.filter(action="sso.last_manager_kept").count() == 1


def test_refusals():
    get_user_model().objects.create_user("taken")
    with pytest.raises(accounts.Refused, match="local portal account named 'taken'"):
        accounts.sign_in(claims("sub-t", "taken", []))
    accounts.sign_in(claims("sub-x", "xena", []))
    with pytest.raises(accounts.Refused, match="another single sign-on account"):
        accounts.sign_in(claims("sub-y", "Xena", []))  # usernames compare case-insensitively
    xena = get_user_model().objects.get(username="xena")
    xena.is_active = False
    xena.save()
    with pytest.raises(accounts.Refused, match="deactivated"):
        accounts.sign_in(claims("sub-x", "xena", []))
    assert SsoIdentity.objects.count() == 1


def test_link_by_username_when_configured(settings):
    settings.SSO_LINK_EXISTING = "username"
    local = get_user_model().objects.create_user("carol", "c@old.example.org", "pw-123456")
    assert accounts.sign_in(claims("sub-c", "carol", [])) == local
    local.refresh_from_db()
    assert local.email == "carol@example.org" and local.has_usable_password()
    assert AuditEvent.objects.get(action="sso.user_linked").after["by"] == "username"


def test_a_disabled_or_deleted_rule_removes_what_it_granted_at_the_next_sign_in():
    team = Team.objects.create(slug="nlp", name="NLP")
    manager = get_user_model().objects.create_user("boss", "boss@example.org")
    Membership.objects.create(team=team, user=manager, role=MANAGER)
    rule = GroupRule.objects.create(group="nlp-*", team=team, role=MEMBER)
    person = claims("sub-n", "nia", ["nlp-x"])
    accounts.sign_in(person)
    assert ManagedMembership.objects.filter(membership__team=team).count() == 1
    rule.enabled = False
    rule.save()
    mail.outbox.clear()
    accounts.sign_in(person)
    assert list(Membership.objects.filter(team=team).values_list("user__username", flat=True)) == [
        "boss"
    ]
    removed = AuditEvent.objects.get(action="sso.member_removed")
    assert "no rule grants it any more" in removed.note
    # The person and the team's managers are told, as for a manager's change.
    assert sorted(m.to[0] for m in mail.outbox) == ["boss@example.org", "nia@example.org"]


def test_a_membership_that_changes_nothing_writes_nothing():
    team = Team.objects.create(slug="gen", name="Genomics")
    GroupRule.objects.create(group="gen", team=team, role=MEMBER)
    person = claims("sub-g", "gus", ["gen"])
    accounts.sign_in(person)
    before = AuditEvent.objects.count()
    accounts.sign_in(person)
    assert AuditEvent.objects.count() == before


def test_admin_edits_of_rules_are_audited():
    admin = get_user_model().objects.create_superuser("root", "root@example.org", "pw-root-1")
    team = Team.objects.create(slug="vision", name="Vision")
    client = Client()
    client.force_login(admin)
    response = client.post("/admin/sso/grouprule/add/", {
        "group": "vision-*", "grants": "team", "team": str(team.pk), "role": "manager",
        "enabled": "on", "note": "",
    })  # fmt: skip
    assert response.status_code == 302, response.content[:2000]
    rule = GroupRule.objects.get()
    added = AuditEvent.objects.get(action="sso.rule_added")
    assert added.actor == admin and added.team == team and added.after["role"] == "manager"
    # A staff rule with a team is refused with a message, not a 500.
    response = client.post(f"/admin/sso/grouprule/{rule.pk}/change/", {
        "group": "vision-*", "grants": "staff", "team": str(team.pk), "role": "member",
        "enabled": "on",
    })  # fmt: skip
    assert response.status_code == 200 and b"A portal admin rule names no team" in response.content
    client.post(f"/admin/sso/grouprule/{rule.pk}/delete/", {"post": "yes"})
    assert not GroupRule.objects.exists()
    assert AuditEvent.objects.get(action="sso.rule_deleted").before["group"] == "vision-*"
