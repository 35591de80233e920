"""Comment threads on quota and MIG requests (issue #12 section 2): who reads and posts,
validation, the transaction (comment + audit row + in-app notices), who is e-mailed, and
the request pages that show the thread. Real Postgres rows, real HTTP through the client.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.core import mail
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from discussion import services
from discussion.models import BODY_MAX, Comment
from quotas.models import AuditEvent

pytestmark = pytest.mark.django_db


def _login(client, user):
    client.force_login(user)
    return client


def _page(kind: str, w) -> str:
    if kind == "quota":
        return reverse("quotas:request", args=[w["req"].pk])
    return reverse("mig:request", args=[w["mig"].pk])


def _form_url(kind: str, w) -> str:
    if kind == "quota":
        return reverse("discussion:request-comment", args=[w["req"].pk])
    return reverse("discussion:mig-request-comment", args=[w["mig"].pk])


def _target(kind: str, w):
    return w["req"] if kind == "quota" else w["mig"]


def _to(outbox) -> list[str]:
    return sorted(address for m in outbox for address in m.to)


# -- the model --------------------------------------------------------------------------


def test_a_comment_belongs_to_exactly_one_request(world):
    author = world["requester"]
    with pytest.raises(IntegrityError), transaction.atomic():
        Comment.objects.create(author=author, body="neither")
    with pytest.raises(IntegrityError), transaction.atomic():
        Comment.objects.create(
            author=author, body="both", quota_request=world["req"], mig_request=world["mig"]
        )
    Comment.objects.create(author=author, body="one", quota_request=world["req"])
    assert Comment.objects.count() == 1


# -- pages ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["quota", "mig"])
def test_thread_is_shown_oldest_first_with_the_admin_badge(client, world, kind):
    target = _target(kind, world)
    services.post(world["requester"], target, "Can we get them by Friday?")
    services.post(world["admin"], target, "Checking capacity now.")
    response = _login(client, world["member"]).get(_page(kind, world))
    assert response.status_code == 200
    html = response.content.decode()
    first, second = html.index("Can we get them by Friday?"), html.index("Checking capacity now.")
    assert first < second
    assert html.count("data-admin-badge") == 1
    assert [c.body for c in response.context["comments"]] == [
        "Can we get them by Friday?", "Checking capacity now."
    ]  # fmt: skip
    assert f'action="{_form_url(kind, world)}"' in html
    assert 'name="csrfmiddlewaretoken"' in html


@pytest.mark.parametrize("kind", ["quota", "mig"])
def test_member_posts_one_transaction_audited_and_admins_are_emailed(
    client, world, kind, on_commit
):
    target = _target(kind, world)
    services.post(world["manager"], target, "Adding context: the paper is due in May.")
    with on_commit(execute=True):
        response = _login(client, world["member"]).post(
            _form_url(kind, world), {"body": "  Is there any news?  "}
        )
    assert response.status_code == 302
    assert response["Location"] == _page(kind, world) + "#comments"
    comment = Comment.objects.get(body="Is there any news?")  # stripped
    assert comment.author == world["member"] and not comment.by_admin
    assert comment.target == target
    event = AuditEvent.objects.get(action="request.commented", actor=world["member"])
    assert (event.object_id, event.team) == (str(target.pk), world["vision"])
    assert event.after["comment"] == str(comment.pk)
    # all admins and the earlier commenter (the manager), never the author
    assert _to(mail.outbox) == ["maria@example.com", "root2@example.com", "root@example.com"]
    assert "Is there any news?" in mail.outbox[0].body
    assert _page(kind, world) + "#comments" in mail.outbox[0].body


def test_admin_posts_and_the_requester_managers_and_commenting_admins_are_emailed(world, on_commit):
    req = world["req"]
    services.post(world["member"], req, "Any news?")  # a member who is not a manager
    services.post(world["admin2"], req, "Looking at it.")
    with on_commit(execute=True):
        services.post(world["admin"], req, "Approving 2 tomorrow morning.")
    # requester, the team's managers, the other admin who commented; not the author, not
    # the member (a plain member who commented earlier hears from the team's side only)
    assert _to(mail.outbox) == ["maria@example.com", "rob@example.com", "root2@example.com"]
    assert mail.outbox[0].subject.startswith("[GPU portal] root (admin) commented on")


def test_an_admin_who_never_commented_is_not_emailed_of_an_admin_comment(world, on_commit):
    with on_commit(execute=True):
        services.post(world["admin"], world["mig"], "Which node do you prefer?")
    assert _to(mail.outbox) == ["maria@example.com", "rob@example.com"]


def test_comment_e_mails_can_be_turned_off_and_the_notice_stays(world, on_commit, client):
    from notices.models import Notification
    from quotas.models import NotificationOptOut

    client.force_login(world["requester"])
    kinds = client.get(reverse("quotas:notifications")).content.decode()
    assert 'name="comment"' in kinds  # on the E-mail settings page
    NotificationOptOut.objects.create(user=world["requester"], kind="comment")
    with on_commit(execute=True):
        services.post(world["admin"], world["mig"], "Which node do you prefer?")
    assert "rob@example.com" not in _to(mail.outbox)  # opted out of comment e-mails
    assert Notification.objects.filter(recipient=world["requester"], event="comment").exists()


@pytest.mark.skipif(not apps.is_installed("notices"), reason="the notices app is not installed")
def test_the_other_party_gets_an_in_app_notice(world):
    from notices.models import Notification

    services.post(world["requester"], world["req"], "Please hurry.")
    rows = Notification.objects.filter(event="comment")
    assert sorted(n.recipient.username for n in rows) == ["root", "root2"]
    notice = rows.first()
    assert notice.url == reverse("quotas:request", args=[world["req"].pk]) + "#comments"
    assert notice.team == world["vision"] and "rob commented" in notice.title


@pytest.mark.parametrize("kind", ["quota", "mig"])
@pytest.mark.parametrize(
    "body, message",
    [("", "Write a comment first."), ("   \n ", "Write a comment first."),
     ("x" * (BODY_MAX + 1), f"At most {BODY_MAX:,} characters")],
)  # fmt: skip
def test_empty_or_too_long_is_a_form_error_and_nothing_is_stored(
    client, world, kind, body, message
):
    response = _login(client, world["requester"]).post(_form_url(kind, world), {"body": body})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert response.context["comment_form"].errors["body"]
    assert not Comment.objects.exists()
    assert not AuditEvent.objects.filter(action="request.commented").exists()


def test_missing_field_is_a_form_error_too(client, world):
    response = _login(client, world["requester"]).post(_form_url("quota", world), {})
    assert response.status_code == 400
    assert not Comment.objects.exists()


def test_exactly_the_limit_is_accepted(client, world):
    body = "y" * BODY_MAX
    response = _login(client, world["requester"]).post(_form_url("quota", world), {"body": body})
    assert response.status_code == 302
    assert Comment.objects.get().body == body


@pytest.mark.parametrize("kind", ["quota", "mig"])
def test_another_teams_member_gets_404_everywhere(client, world, kind):
    services.post(world["requester"], _target(kind, world), "Secret plans.")
    client = _login(client, world["outsider"])
    assert client.get(_page(kind, world)).status_code == 404
    assert client.post(_form_url(kind, world), {"body": "hello"}).status_code == 404
    assert Comment.objects.count() == 1


def test_the_form_needs_login_and_post(client, world):
    url = _form_url("quota", world)
    response = client.post(url, {"body": "hi"})
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert _login(client, world["requester"]).get(url).status_code == 405


def test_the_form_is_csrf_protected(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world["requester"])
    response = client.post(_form_url("quota", world), {"body": "no token"})
    assert response.status_code == 403
    assert not Comment.objects.exists()


def test_admins_see_and_post_on_any_teams_request(client, world):
    response = _login(client, world["admin"]).post(_form_url("mig", world), {"body": "Noted."})
    assert response.status_code == 302
    assert Comment.objects.get().by_admin


def test_the_requester_who_left_the_team_may_still_discuss_it_over_the_api(world):
    world["vision"].memberships.filter(user=world["requester"]).delete()
    qs = services.discussable(type(world["req"]), world["requester"])
    assert list(qs) == [world["req"]]
    assert list(services.discussable(type(world["req"]), world["outsider"])) == []


def test_an_admins_invalid_comment_on_a_pending_request_keeps_the_decision_forms(client, world):
    response = _login(client, world["admin"]).post(_form_url("quota", world), {"body": " "})
    assert response.status_code == 400
    assert response.context["approve_form"] is not None  # the whole admin page, re-drawn
    assert "Write a comment first." in response.content.decode()


@pytest.mark.parametrize("kind", ["quota", "mig"])
def test_the_thread_costs_the_same_queries_whatever_its_length(client, world, kind):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    target = _target(kind, world)
    client = _login(client, world["requester"])
    services.post(world["requester"], target, "one")
    client.get(_page(kind, world))  # warm the session
    with CaptureQueriesContext(connection) as one:
        client.get(_page(kind, world))
    for user in ("member", "manager", "admin", "admin2"):
        services.post(world[user], target, f"from {user}")
    with CaptureQueriesContext(connection) as five:
        response = client.get(_page(kind, world))
    assert len(response.context["comments"]) == 5
    assert len(five) == len(one)
