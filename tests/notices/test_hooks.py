"""Where the portal already e-mails, it also notifies in the app: quota requests through
the real services, a failed apply against the simulated cluster, membership, MIG."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from mig import services as mig_services
from mig.models import MigRequest
from notices.models import Notification, Webhook, WebhookDelivery
from quotas import membership, services
from quotas.apply import run_operation
from quotas.models import NotificationOptOut, Operation
from quotas.services import RequestData
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
WHY = "training the vision model for the paper"


@pytest.fixture
def world(db):
    cluster = make_cluster("prod")
    make_node(cluster, "a", resources={GPU: (8, 8, 0)})
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    admin = make_user("root", staff=True)
    vision = make_team("vision", members=[alice], managers=[bob])
    make_team("nlp", members=[carol])
    return {"alice": alice, "bob": bob, "carol": carol, "admin": admin, "vision": vision,
            "ns": make_namespace(vision, cluster)}  # fmt: skip


def submit(w, amount=2):
    data = RequestData(team=w["vision"], namespace=w["ns"], resource=GPU, amount=amount,
                       justification=WHY)  # fmt: skip
    return services.submit(w["alice"], data)


def notices_of(event: str) -> list[tuple[str, str]]:
    rows = Notification.objects.filter(event=event).select_related("recipient")
    return sorted((n.recipient.username, n.title) for n in rows)


def test_a_new_request_notifies_the_admins(world):
    req = submit(world)
    assert notices_of("new_request") == [("root", "Vision asks for 2 nvidia.com/gpu")]
    row = Notification.objects.get(event="new_request")
    assert row.url == f"/requests/{req.pk}/" and row.team == world["vision"]
    assert f"/requests/{req.pk}/" not in row.body  # the link is the notice's, not its text


def test_approval_notifies_the_requester_and_the_managers(world):
    services.approve(submit(world), world["admin"])
    title = "request approved: 2 nvidia.com/gpu for Vision"
    assert notices_of("approved") == [("alice", title), ("bob", title)]
    assert not Notification.objects.filter(recipient=world["carol"]).exists()


def test_rejection_notifies_them_with_the_reason(world):
    services.reject(submit(world), world["admin"], "The cluster is booked for the demo.")
    rows = Notification.objects.filter(event="rejected")
    assert sorted(r.recipient.username for r in rows) == ["alice", "bob"]
    assert all("booked for the demo" in r.body for r in rows)


def test_email_opt_outs_are_email_only(world, mailoutbox, on_commit):
    world["alice"].email, world["bob"].email = "alice@example.com", "bob@example.com"
    NotificationOptOut.objects.create(user=world["alice"], kind="approved")
    with on_commit(execute=True):
        services.approve(submit(world), world["admin"])
    assert [m.to for m in mailoutbox if "approved" in m.subject] == [["bob@example.com"]]
    assert [u for u, _ in notices_of("approved")] == ["alice", "bob"]


def test_a_failed_apply_notifies_the_team_and_the_admins(setup, sim):
    other_admin = make_user("root2", staff=True)
    sim.faults.update(error_rate=1.0, error_code=422, path_regex="resourcequotas")
    data = RequestData(team=setup["team"], namespace=setup["ns"], resource=GPU, amount=3,
                       justification=WHY)  # fmt: skip
    services.approve(services.submit(setup["alice"], data), setup["admin"])
    assert run_operation(Operation.objects.get(status="pending").pk) == "failed"
    rows = notices_of("failed")
    assert [u for u, _ in rows] == ["alice", "root", other_admin.username]
    assert rows[0][1] == "applying the quota in sim/vision failed"


def test_an_applied_quota_notifies_the_team(setup):
    data = RequestData(team=setup["team"], namespace=setup["ns"], resource=GPU, amount=3,
                       justification=WHY)  # fmt: skip
    services.approve(services.submit(setup["alice"], data), setup["admin"])
    assert run_operation(Operation.objects.get(status="pending").pk) == "succeeded"
    assert notices_of("applied") == [("alice", "quota applied in sim/vision")]


def test_membership_changes_notify_the_person_and_managers_one_webhook(world):
    """One webhook delivery per change, in the managers' wording (not "added you")."""
    Webhook.objects.create(name="all", url="https://hooks.example/", secret="s")
    membership.add_member(world["vision"], "carol", "member", world["bob"])
    # the person; bob, the only manager, did it and is not told of his own action
    assert notices_of("membership") == [("carol", "bob added you to Vision as member")]
    (delivery,) = WebhookDelivery.objects.all()
    assert delivery.payload["title"] == "Vision: bob added carol as member"


def mig_request(w) -> MigRequest:
    return MigRequest.objects.create(
        team=w["vision"], namespace=w["ns"], cluster=w["ns"].cluster, product="A100-80GB",
        layout={"3g.40gb": 1, "1g.10gb": 4}, gpus=1, justification="Notebooks for the course.",
        requested_by=w["alice"],
    )  # fmt: skip


def test_a_mig_decision_notifies_the_requester_and_managers(world):
    req = mig_services.reject(mig_request(world), world["admin"], "No A100 free this week.")
    rows = Notification.objects.filter(event="mig_decided")
    assert sorted(r.recipient.username for r in rows) == ["alice", "bob"]
    assert {r.url for r in rows} == {f"/mig/requests/{req.pk}/"}
    assert all(r.title.startswith("MIG request rejected") for r in rows)


def test_a_failed_mig_run_notifies_admins_even_without_email(world, mailoutbox, on_commit):
    req = mig_request(world)
    req.node = make_node(req.cluster, "mig-0")
    req.error = "mig-manager reported failed"
    make_user("root2", staff=True)
    get_user_model().objects.filter(is_staff=True).update(email="")
    with on_commit(execute=True):
        mig_services.alert_admins(req)
    assert mailoutbox == []  # no admin has an address: no e-mail, as before
    rows = notices_of("mig_failed")
    assert [u for u, _ in rows] == ["alice", "bob", "root", "root2"]
    assert rows[0][1] == "MIG reconfiguration of mig-0 failed"
