"""Single sign-on end to end: a real OpenID provider, the live portal, real HTTP.

The provider (panva's oidc-provider, tests/sso/conftest.py) signs people in through its
development login and consent forms; the portal runs the authorization code flow (PKCE,
nonce, state) against it, creates accounts and re-applies the group rules at every
sign-in.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core import mail

from portal.sso.models import GroupRule, ManagedMembership, SsoIdentity
from quotas.models import AuditEvent, Membership, Team

from .conftest import person, sign_in, signed_in_as

pytestmark = pytest.mark.django_db(transaction=True)
MEMBER, MANAGER = Membership.Role.MEMBER, Membership.Role.MANAGER


@pytest.fixture
def teams():
    vision = Team.objects.create(slug="vision", name="Computer Vision")
    nlp = Team.objects.create(slug="nlp", name="NLP Research")
    genomics = Team.objects.create(slug="genomics", name="Genomics")
    rule = GroupRule.objects.create
    rule(group="vision-users", team=vision, role=MEMBER)
    rule(group="vision-leads", team=vision, role=MANAGER)
    rule(group="nlp-*", team=nlp, role=MEMBER)  # a glob
    rule(group="gpu-admins", grants=GroupRule.Grants.STAFF)
    return vision, nlp, genomics


def _roles(user) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))


def _actions(user) -> list[str]:
    """The sso.* audit actions about ``user``, oldest first."""
    found = []
    for e in AuditEvent.objects.filter(action__startswith="sso.").order_by("id"):
        about = {(e.before or {}).get("user"), (e.after or {}).get("user")}
        if (e.object_type == "user" and e.object_id == str(user.pk)) or user.username in about:
            found.append(e.action)
    return found


def test_first_sign_in_creates_the_account_its_memberships_and_audit_rows(
    sso_on, live_server, teams
):
    sso_on.people({"sub-ursula": person("ursula", ["vision-users", "nlp-research", "other"])})
    mail.outbox.clear()

    session, landed = sign_in(live_server.url, "sub-ursula")

    assert landed.status_code == 200 and landed.url == live_server.url + "/", landed.url
    user = get_user_model().objects.get(username="ursula")
    assert signed_in_as(session) == user
    assert (user.email, user.first_name, user.last_name) == (
        "ursula@idp.example.org",
        "Ursula",
        "Tester",
    )
    assert not user.has_usable_password() and not user.is_staff
    identity = SsoIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject) == (sso_on.issuer, "sub-ursula")
    assert identity.groups == ["vision-users", "nlp-research", "other"]
    assert _roles(user) == {"vision": MEMBER, "nlp": MEMBER}
    assert ManagedMembership.objects.filter(membership__user=user).count() == 2
    created = AuditEvent.objects.get(action="sso.user_created")
    assert created.object_id == str(user.pk) and created.after["subject"] == "sub-ursula"
    added = AuditEvent.objects.filter(action="sso.member_added").order_by("team__slug")
    assert [(e.team.slug, e.after["role"], e.actor_name) for e in added] == [
        ("nlp", MEMBER, "system"), ("vision", MEMBER, "system"),
    ]  # fmt: skip
    assert added[0].after["groups"] == ["nlp-research"]
    # The person is told, as for a manager's change (quotas/notify.py).
    to_ursula = [m for m in mail.outbox if m.to == ["ursula@idp.example.org"]]
    assert len(to_ursula) == 2
    assert any("added you to Computer Vision as member" in m.subject for m in to_ursula)


def test_group_changes_between_sign_ins_change_roles_memberships_and_staff(
    sso_on, live_server, teams
):
    vision, nlp, genomics = teams
    sso_on.people({"sub-vic": person("vic", ["vision-users", "nlp-a", "gpu-admins"])})
    sign_in(live_server.url, "sub-vic")
    vic = get_user_model().objects.get(username="vic")
    assert _roles(vic) == {"vision": MEMBER, "nlp": MEMBER} and vic.is_staff
    # A manager adds vic to genomics by hand in the portal: single sign-on leaves it alone.
    Membership.objects.create(team=genomics, user=vic, role=MEMBER)

    sso_on.people({"sub-vic": person("vic", ["vision-users", "vision-leads"])})
    session, landed = sign_in(live_server.url, "sub-vic")

    assert landed.status_code == 200 and signed_in_as(session) == vic
    vic.refresh_from_db()
    assert _roles(vic) == {"vision": MANAGER, "genomics": MEMBER}
    assert not vic.is_staff
    assert not ManagedMembership.objects.filter(membership__team=genomics).exists()
    assert _actions(vic) == [
        "sso.user_created", "sso.member_added", "sso.member_added", "sso.staff_changed",
        "sso.role_changed", "sso.member_removed", "sso.staff_changed",
    ]  # fmt: skip
    revoked = AuditEvent.objects.filter(action="sso.staff_changed").order_by("id").last()
    assert (revoked.before, revoked.after) == ({"is_staff": True}, {"is_staff": False})
    removed = AuditEvent.objects.get(action="sso.member_removed")
    assert removed.team == nlp and removed.before == {"user": "vic", "role": MEMBER}

    # Out of every group: vic is vision's only manager, so that stays (audited warning).
    sso_on.people({"sub-vic": person("vic", [])})
    sign_in(live_server.url, "sub-vic")
    assert _roles(vic) == {"vision": MANAGER, "genomics": MEMBER}
    kept = AuditEvent.objects.get(action="sso.last_manager_kept")
    assert kept.team == vision and "last manager" in kept.note
    # Once the team has another manager, the next sign-in removes vic.
    other = get_user_model().objects.create_user("olga")
    Membership.objects.create(team=vision, user=other, role=MANAGER)
    sign_in(live_server.url, "sub-vic")
    assert _roles(vic) == {"genomics": MEMBER}


def test_a_hand_made_admin_stays_one_and_a_manager_role_from_the_rules_wins(
    sso_on, live_server, teams
):
    sso_on.people({"sub-hank": person("hank", ["vision-users", "vision-leads"])})
    sign_in(live_server.url, "sub-hank")
    hank = get_user_model().objects.get(username="hank")
    assert _roles(hank) == {"vision": MANAGER}
    hank.is_staff = True  # an admin makes hank a portal admin by hand
    hank.save()
    sign_in(live_server.url, "sub-hank")
    hank.refresh_from_db()
    assert hank.is_staff
    assert not AuditEvent.objects.filter(action="sso.staff_changed").exists()


def test_profile_follows_the_provider_and_the_account_is_found_by_subject(
    sso_on, live_server, teams
):
    sso_on.people({"sub-pat": person("pat", [])})
    sign_in(live_server.url, "sub-pat")
    # The provider renames pat and changes the e-mail: same account (matched by sub).
    sso_on.people({"sub-pat": person("patricia", [], email="pat@new.example.org",
                                     given_name="Patricia")})  # fmt: skip
    session, _ = sign_in(live_server.url, "sub-pat")
    user = signed_in_as(session)
    assert user.username == "pat" and user.email == "pat@new.example.org"
    assert user.first_name == "Patricia"
    updated = AuditEvent.objects.get(action="sso.user_updated")
    assert updated.before == {"email": "pat@idp.example.org", "first_name": "Pat"}
    assert get_user_model().objects.filter(sso_identity__subject="sub-pat").count() == 1


def test_no_preferred_username_falls_back_to_sub(sso_on, live_server, teams):
    sso_on.people({"7f3c-sub": {"email": "anon@idp.example.org", "groups": ["nlp-x"]}})
    session, _ = sign_in(live_server.url, "7f3c-sub")
    user = signed_in_as(session)
    assert user.username == "7f3c-sub" and _roles(user) == {"nlp": MEMBER}


def test_a_local_account_is_not_taken_over_by_username_or_email(sso_on, live_server, teams):
    local = get_user_model().objects.create_user("lena", "lena@idp.example.org", "local-pw-123")
    sso_on.people({"sub-lena": person("lena", ["gpu-admins"])})

    session, page = sign_in(live_server.url, "sub-lena")

    assert page.status_code == 403
    assert "A local portal account named" in page.text and "lena" in page.text
    assert signed_in_as(session) is None
    local.refresh_from_db()
    assert not local.is_staff and not SsoIdentity.objects.exists()
    # Another IdP person whose verified e-mail is the local account's: a new account.
    sso_on.people({"sub-l2": person("lena2", [], email="lena@idp.example.org")})
    session, _ = sign_in(live_server.url, "sub-l2")
    assert signed_in_as(session).username == "lena2"


def test_linking_by_verified_email_when_configured(sso_on, settings, live_server, teams):
    settings.SSO_LINK_EXISTING = "email"
    local = get_user_model().objects.create_user("mia.local", "mia@idp.example.org", "pw-12345")
    sso_on.people({
        "sub-unverified": person("mia-u", [], email="mia@idp.example.org", email_verified=False),
        "sub-mia": person("mia", ["vision-users"]),
    })  # fmt: skip
    session, _ = sign_in(live_server.url, "sub-unverified")
    assert signed_in_as(session).username == "mia-u"  # not verified: no link, a new account
    session, _ = sign_in(live_server.url, "sub-mia")
    assert signed_in_as(session) == local
    assert _roles(local) == {"vision": MEMBER}
    linked = AuditEvent.objects.get(action="sso.user_linked")
    assert linked.object_id == str(local.pk) and linked.after["by"] == "email"
    local.refresh_from_db()
    assert local.has_usable_password()  # its password still works (break-glass)


def test_local_sign_in_still_works_with_sso_on(sso_on, live_server, teams):
    import requests

    get_user_model().objects.create_user("breakglass", "", "break-glass-pw", is_staff=True)
    session = requests.Session()
    page = session.get(f"{live_server.url}/login/", timeout=30)
    assert "Sign in with Test IdP" in page.text
    assert page.text.index("Sign in with Test IdP") < page.text.index('name="password"')
    response = session.post(
        f"{live_server.url}/login/",
        data={"username": "breakglass", "password": "break-glass-pw",
              "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        headers={"Referer": f"{live_server.url}/login/"}, timeout=30,
    )  # fmt: skip
    assert response.status_code == 200 and response.url == live_server.url + "/"
    assert signed_in_as(session).username == "breakglass"


def test_next_is_kept_through_the_provider(sso_on, live_server, teams):
    sso_on.people({"sub-nia": person("nia", [])})
    _, landed = sign_in(live_server.url, "sub-nia", next_url="/account/")
    assert landed.status_code == 200 and landed.url == live_server.url + "/account/"
