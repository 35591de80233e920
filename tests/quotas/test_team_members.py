"""Team managers run their team's members (issue #12 section 1): add, set a role, remove,
in the portal and the API; the last manager is protected; every change is audited and
e-mailed after commit.

Personas: ``mia`` (manager of vision), ``rob`` (member of vision), ``olga`` (manager of
nlp, the other team), ``nina`` (an account in no team yet), ``alice-admin`` (portal admin).
"""

from __future__ import annotations

import pytest
from django.core import mail

from quotas.models import AuditEvent, Membership
from tests.conftest import api_for
from tests.quotas.builders import make_team, make_user

pytestmark = pytest.mark.django_db

MEMBERS = "/api/v1/teams/{}/members/"


@pytest.fixture
def w(db, researcher, admin_user):
    mia, olga, nina = make_user("mia"), make_user("olga"), make_user("nina")
    vision = make_team("vision", members=[researcher], managers=[mia])
    nlp = make_team("nlp", managers=[olga])
    w = type("World", (), {})()
    w.mia, w.rob, w.olga, w.nina, w.admin = mia, researcher, olga, nina, admin_user
    w.vision, w.nlp = vision, nlp
    return w


def roles(team) -> dict[str, str]:
    return dict(Membership.objects.filter(team=team).values_list("user__username", "role"))


def mails() -> list[tuple[list[str], str]]:
    return sorted((m.to, m.subject) for m in mail.outbox)


# -- API ------------------------------------------------------------------------------


def test_manager_adds_promotes_and_removes(w, on_commit):
    api = api_for(w.mia)
    with on_commit(execute=True):
        r = api.post(MEMBERS.format("vision"), {"user": "nina"}, format="json")
    assert r.status_code == 201 and r.json() == {"username": "nina", "role": "member"}
    # mia did it: she is not told of her own action (issue #21 section 6)
    assert mails() == [
        (["nina@example.com"], "[GPU portal] mia added you to Vision as member"),
    ]
    assert "/teams/vision/members/" in mail.outbox[0].body

    mail.outbox.clear()
    with on_commit(execute=True):
        r = api.patch(MEMBERS.format("vision") + "nina/", {"role": "manager"}, format="json")
    assert r.status_code == 200 and r.json()["role"] == "manager"
    assert mails() == [
        (["nina@example.com"], "[GPU portal] mia made you a manager of Vision"),
    ]

    mail.outbox.clear()
    with on_commit(execute=True):
        r = api.delete(MEMBERS.format("vision") + "rob/")
    assert r.status_code == 204
    assert roles(w.vision) == {"mia": "manager", "nina": "manager"}
    assert mails() == [
        (["nina@example.com"], "[GPU portal] Vision: mia removed rob (was member)"),
        (["rob@example.com"], "[GPU portal] mia removed you from Vision"),
    ]

    events = AuditEvent.objects.filter(action__startswith="team.").order_by("id")
    assert [(e.action, e.actor_name, e.team_id, e.before, e.after) for e in events] == [
        ("team.member_added", "mia", w.vision.pk, None, {"user": "nina", "role": "member"}),
        ("team.role_changed", "mia", w.vision.pk, {"user": "nina", "role": "member"},
         {"user": "nina", "role": "manager"}),
        ("team.member_removed", "mia", w.vision.pk, {"user": "rob", "role": "member"}, None),
    ]  # fmt: skip
    # Members see the list (and so does the team detail).
    listed = api_for(w.nina).get(MEMBERS.format("vision")).json()
    assert listed == [
        {"username": "mia", "role": "manager"},
        {"username": "nina", "role": "manager"},
    ]


def test_last_manager_cannot_be_removed_or_demoted(w, on_commit):
    api = api_for(w.mia)
    r = api.delete(MEMBERS.format("vision") + "mia/")
    assert r.status_code == 409 and "last manager" in r.json()["detail"]
    r = api.patch(MEMBERS.format("vision") + "mia/", {"role": "member"}, format="json")
    assert r.status_code == 409 and "Make someone else a manager first" in r.json()["detail"]
    # Admins are held to the same rule.
    r = api_for(w.admin).delete(MEMBERS.format("vision") + "mia/")
    assert r.status_code == 409
    assert roles(w.vision) == {"mia": "manager", "rob": "member"}
    assert not AuditEvent.objects.filter(action__startswith="team.").exists()
    # With a second manager, mia may step down.
    r = api.patch(MEMBERS.format("vision") + "rob/", {"role": "manager"}, format="json")
    assert r.status_code == 200
    r = api.patch(MEMBERS.format("vision") + "mia/", {"role": "member"}, format="json")
    assert r.status_code == 200 and roles(w.vision) == {"mia": "member", "rob": "manager"}


def test_a_member_gets_403_before_any_validation(w):
    rob = api_for(w.rob)
    assert rob.get(MEMBERS.format("vision")).status_code == 200
    for r in (
        rob.post(MEMBERS.format("vision"), {"role": "nonsense"}, format="json"),
        rob.post(MEMBERS.format("vision"), {"user": "nina"}, format="json"),
        rob.patch(MEMBERS.format("vision") + "mia/", {"role": "x"}, format="json"),
        rob.delete(MEMBERS.format("vision") + "mia/"),
        rob.delete(MEMBERS.format("vision") + "nobody/"),
    ):
        assert r.status_code == 403, r.content
        assert "managers and portal admins" in r.json()["detail"]
    assert roles(w.vision) == {"mia": "manager", "rob": "member"}


def test_another_teams_manager_gets_the_404_of_an_unknown_team(w):
    olga = api_for(w.olga)
    unknown = olga.post(MEMBERS.format("no-such-team"), {"user": "nina"}, format="json")
    assert unknown.status_code == 404
    for r in (
        olga.get(MEMBERS.format("vision")),
        olga.post(MEMBERS.format("vision"), {"user": "olga", "role": "manager"}, format="json"),
        olga.patch(MEMBERS.format("vision") + "mia/", {"role": "member"}, format="json"),
        olga.delete(MEMBERS.format("vision") + "rob/"),
    ):
        assert r.status_code == 404, r.content
    assert roles(w.vision) == {"mia": "manager", "rob": "member"}


def test_adding_refuses_unknown_inactive_and_existing_members(w, on_commit):
    api, url = api_for(w.mia), MEMBERS.format("vision")
    r = api.post(url, {"user": "ghost"}, format="json")
    assert r.status_code == 404 and "must sign in to the portal once first" in r.json()["user"][0]
    r = api.post(url, {"user": "nina", "role": "owner"}, format="json")
    assert r.status_code == 400 and "role" in r.json()
    r = api.post(url, {"user": "rob"}, format="json")
    assert r.status_code == 409 and "already in Vision" in r.json()["detail"]
    gone = make_user("gone")
    gone.is_active = False
    gone.save()
    r = api.post(url, {"user": "gone"}, format="json")
    assert r.status_code == 400 and "deactivated" in r.json()["user"][0]
    assert not AuditEvent.objects.filter(action__startswith="team.").exists()
    # By e-mail address, case-insensitively; an admin may add to any team.
    with on_commit(execute=True):
        r = api.post(url, {"user": "NINA@example.com", "role": "manager"}, format="json")
    assert r.status_code == 201 and r.json() == {"username": "nina", "role": "manager"}
    r = api_for(w.admin).post(MEMBERS.format("nlp"), {"user": "rob"}, format="json")
    assert r.status_code == 201 and roles(w.nlp) == {"olga": "manager", "rob": "member"}
    # Unknown member of a known team: 404.
    assert api.delete(url + "nobody/").status_code == 404


def test_schema_documents_the_member_endpoints(w):
    paths = api_for(w.rob).get("/api/schema/", {"format": "json"}).json()["paths"]
    add = paths["/api/v1/teams/{slug}/members/"]["post"]["responses"]
    one = paths["/api/v1/teams/{slug}/members/{username}/"]
    assert {"201", "400", "403", "404", "409"} <= set(add)
    assert {"200", "400", "403", "404", "409"} <= set(one["patch"]["responses"])
    assert {"204", "403", "404", "409"} <= set(one["delete"]["responses"])


# -- pages ----------------------------------------------------------------------------


def test_members_page_shows_the_list_to_members_and_forms_to_managers(client, w):
    url = "/teams/vision/members/"
    client.force_login(w.rob)
    r = client.get(url)
    body = r.content.decode()
    assert r.status_code == 200 and "<code>mia</code>" in body and "<code>rob</code>" in body
    assert "Add someone" not in body and 'name="role"' not in body and "/remove/" not in body
    assert client.post(url, {"action": "add", "add-user": "nina"}).status_code == 403
    assert client.get(url + "mia/remove/").status_code == 403
    # The team page links to it.
    assert url in client.get("/teams/").content.decode()

    client.force_login(w.mia)
    body = client.get(url).content.decode()
    assert "Add someone" in body and 'name="role"' in body and url + "rob/remove/" in body

    client.force_login(w.olga)
    assert client.get(url).status_code == 404


def test_members_page_marks_the_memberships_single_sign_on_manages(client, w):
    from portal.sso.models import ManagedMembership

    rob = Membership.objects.get(team__slug="vision", user=w.rob)
    ManagedMembership.objects.create(membership=rob, groups=["vision-researchers"])
    client.force_login(w.mia)
    body = client.get("/teams/vision/members/").content.decode()
    assert body.count("data-sso-managed") == 1  # rob's row only; mia was added by hand
    assert "via SSO: vision-researchers" in body


def test_manager_runs_the_team_from_the_page(client, w, on_commit):
    url = "/teams/vision/members/"
    client.force_login(w.mia)
    r = client.post(url, {"action": "add", "add-user": "ghost", "add-role": "member"})
    assert r.status_code == 200 and "must sign in to the portal once first" in r.content.decode()
    with on_commit(execute=True):
        r = client.post(url, {"action": "add", "add-user": "nina", "add-role": "member"})
    assert r.status_code == 302 and roles(w.vision)["nina"] == "member"
    assert len(mail.outbox) == 1  # nina; not mia, who did it

    r = client.post(url, {"action": "role", "username": "nina", "role": "manager"}, follow=True)
    assert "nina is now a manager of Vision" in r.content.decode()

    # Removal asks first; the GET changes nothing.
    confirm = client.get(url + "rob/remove/")
    assert confirm.status_code == 200 and "Remove from Vision" in confirm.content.decode()
    assert "rob" in roles(w.vision)
    r = client.post(url + "rob/remove/")
    assert r.status_code == 302 and "rob" not in roles(w.vision)

    # Last manager: the page refuses and says why.
    Membership.objects.filter(team=w.vision, user=w.nina).update(role="member")
    page = client.get(url + "mia/remove/").content.decode()
    assert "last manager of Vision" in page and "Remove from Vision" not in page
    r = client.post(url + "mia/remove/")
    assert r.status_code == 200 and "last manager" in r.content.decode()
    r = client.post(url, {"action": "role", "username": "mia", "role": "member"}, follow=True)
    assert "last manager" in r.content.decode() and roles(w.vision)["mia"] == "manager"
    actions = list(
        AuditEvent.objects.filter(action__startswith="team.")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["team.member_added", "team.role_changed", "team.member_removed"]


def test_a_manager_demoting_himself_confirms_first_and_is_not_told_of_it(client, w, on_commit):
    Membership.objects.create(team=w.vision, user=w.olga, role="manager")
    url = "/teams/vision/members/"
    client.force_login(w.mia)
    page = client.post(url, {"action": "role", "username": "mia", "role": "member"})
    assert page.status_code == 200 and "data-confirm-demote" in page.content.decode()
    assert roles(w.vision)["mia"] == "manager"  # asked, nothing changed yet
    with on_commit(execute=True):
        r = client.post(url, {"action": "role", "username": "mia", "role": "member",
                              "confirm": "yes"})  # fmt: skip
    assert r.status_code == 302 and roles(w.vision)["mia"] == "member"
    # olga, the other manager, is told; mia, who did it, is not
    assert [to for to, _ in mails()] == [[w.olga.email]]
