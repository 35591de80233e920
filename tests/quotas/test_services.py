"""Quota requests in the domain layer: every validation rule and every transition."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from quotas import services
from quotas.models import AuditEvent, Grant, Operation, QuotaRequest, RequestEvent
from quotas.services import RequestData, TransitionError
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
WHY = "training the vision model for the paper"


@pytest.fixture
def world(db):
    cluster = make_cluster("prod")
    make_node(cluster, "a", resources={GPU: (8, 8, 0), MIG: (14, 14, 0)})
    other_cluster = make_cluster("lab")
    make_node(other_cluster, "l", resources={GPU: (4, 4, 0)})
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    admin = make_user("root", staff=True)
    vision = make_team("vision", members=[alice], managers=[bob])
    nlp = make_team("nlp", members=[carol])
    return {
        "cluster": cluster, "alice": alice, "bob": bob, "carol": carol, "admin": admin,
        "vision": vision, "nlp": nlp,
        "ns": make_namespace(vision, cluster), "nlp_ns": make_namespace(nlp, cluster),
        "lab_ns": make_namespace(vision, other_cluster, "vision-lab"),
    }  # fmt: skip


def data(w, **kw) -> RequestData:
    fields = {"team": w["vision"], "namespace": w["ns"], "resource": GPU, "amount": 2,
              "justification": WHY}  # fmt: skip
    fields.update(kw)
    return RequestData(**fields)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"amount": 0}, "amount"),
        ({"amount": -1}, "amount"),
        ({"amount": 9}, "amount"),  # more than the 8 allocatable
        ({"resource": "nvidia.com/foo"}, "resource"),
        ({"resource": "cpu"}, "resource"),
        ({"resource": MIG, "namespace": "lab_ns"}, "resource"),  # lab advertises no MIG
        ({"namespace": "nlp_ns"}, "namespace"),
        ({"starts_at": -1}, "starts_at"),
        ({"ends_at": -1}, "ends_at"),
        ({"ends_at": 91}, "ends_at"),  # longer than QUOTA_MAX_DURATION_DAYS
        ({"justification": ""}, "justification"),
        ({"justification": "need gpu"}, "justification"),
        ({"justification": "x" * 2001}, "justification"),
    ],
)
def test_every_rule_is_checked_before_anything_is_stored(world, change, field):
    now = timezone.now()
    if "namespace" in change:
        change["namespace"] = world[change["namespace"]]
    if change.get("starts_at") == -1:
        change["starts_at"] = now - timedelta(hours=1)
    if isinstance(change.get("ends_at"), int):
        change["ends_at"] = now + timedelta(days=change["ends_at"])
    with pytest.raises(ValidationError) as err:
        services.submit(world["alice"], data(world, **change))
    assert field in err.value.message_dict
    assert QuotaRequest.objects.count() == 0 and AuditEvent.objects.count() == 0


def test_non_member_cannot_request(world):
    with pytest.raises(ValidationError) as err:
        services.submit(world["carol"], data(world))
    assert "team" in err.value.message_dict


def test_submit_approve_records_timeline_audit_grant_and_operation(world, mailoutbox, on_commit):
    end = timezone.now() + timedelta(days=7)
    with on_commit(execute=False):
        req = services.submit(world["alice"], data(world, amount=4, ends_at=end))
    assert req.status == "pending" and not req.on_behalf
    req = services.approve(req, world["admin"], amount=3, note="3 is what we have")
    assert req.status == "approved" and req.decided_by == world["admin"]
    grant = req.grant
    assert (grant.amount, grant.ends_at, grant.state()) == (3, end, "active")
    assert "approved 3" in req.decision_note
    assert [e.to_status for e in RequestEvent.objects.filter(request=req)] == [
        "pending", "approved",
    ]  # fmt: skip
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["request.submitted", "grant.created", "request.approved"]
    op = Operation.objects.get()
    assert op.status == "pending" and list(op.requests.all()) == [req]


def test_notifications_go_to_admins_then_requester_and_managers(world, mailoutbox, on_commit):
    world["admin"].email = "root@example.com"
    world["admin"].save()
    with on_commit(execute=True):
        req = services.submit(world["alice"], data(world))
    assert [m.to for m in mailoutbox] == [["root@example.com"]]
    assert "Vision asks for 2 nvidia.com/gpu" in mailoutbox[0].subject
    from quotas.models import NotificationOptOut

    NotificationOptOut.objects.create(user=world["bob"], kind="rejected")
    with on_commit(execute=True):
        services.reject(req, world["admin"], "no budget this quarter")
    assert mailoutbox[-1].to == ["alice@example.com"]  # bob opted out of rejections
    assert "no budget this quarter" in mailoutbox[-1].body


def test_approval_refuses_more_than_the_window_headroom(world):
    make_grant(world["nlp_ns"], 6)
    req = services.submit(world["alice"], data(world, amount=3))
    with pytest.raises(services.CapacityError) as err:
        services.approve(req, world["admin"])
    message = err.value.message_dict["amount"][0]
    assert "Only 2 nvidia.com/gpu free on prod" in message and "6 of 8 reserved" in message
    req.refresh_from_db()
    assert req.status == "pending" and not Grant.objects.filter(namespace=world["ns"]).exists()
    assert services.approve(req, world["admin"], amount=2).grant.amount == 2


def test_temporary_grants_leave_room_outside_their_window(world):
    make_grant(world["nlp_ns"], 8, days=2)
    start = timezone.now() + timedelta(days=3)
    req = services.submit(world["alice"], data(world, amount=8, starts_at=start,
                                               ends_at=start + timedelta(days=1)))  # fmt: skip
    assert services.approve(req, world["admin"]).status == "approved"


@pytest.mark.parametrize("final", ["approve", "reject", "cancel"])
def test_decided_requests_cannot_move_again(world, final):
    req = services.submit(world["alice"], data(world))
    services.cancel(req, world["alice"])
    with pytest.raises(TransitionError):
        if final == "approve":
            services.approve(req, world["admin"])
        elif final == "reject":
            services.reject(req, world["admin"], "late")
        else:
            services.cancel(req, world["alice"])


def test_who_may_decide(world):
    req = services.submit(world["alice"], data(world))
    with pytest.raises(PermissionError):
        services.approve(req, world["bob"])  # a team manager is not a portal admin
    with pytest.raises(PermissionError):
        services.reject(req, world["alice"], "no")
    with pytest.raises(PermissionError):
        services.cancel(req, world["carol"])  # another team
    with pytest.raises(ValidationError):
        services.reject(req, world["admin"], "  ")
    assert services.cancel(req, world["bob"]).status == "cancelled"  # the manager may


def test_admin_files_on_behalf_of_a_team(world):
    req = services.submit(world["admin"], data(world))
    assert req.on_behalf and req.requested_by == world["admin"]
    assert AuditEvent.objects.get(action="request.submitted").note == "on behalf of the team"


def test_renewal_extends_the_grant_after_a_capacity_check(world):
    grant = make_grant(world["ns"], 4, days=5)
    new_end = grant.ends_at + timedelta(days=5)
    with pytest.raises(ValidationError) as err:
        services.submit(world["alice"], data(world, kind="renewal", target_grant=grant,
                                             ends_at=grant.ends_at))  # fmt: skip
    assert "ends_at" in err.value.message_dict
    req = services.submit(world["alice"], data(world, kind="renewal", target_grant=grant,
                                               ends_at=new_end))  # fmt: skip
    assert (req.resource, req.amount, req.starts_at) == (GPU, 4, grant.ends_at)
    make_grant(world["nlp_ns"], 5, start_in=timedelta(days=6))  # takes the room later on
    with pytest.raises(services.CapacityError):
        services.approve(req, world["admin"])
    Grant.objects.filter(namespace=world["nlp_ns"]).delete()
    with pytest.raises(ValidationError) as err:  # "less" would be accepted and ignored
        services.approve(req, world["admin"], amount=2)
    assert "extends the grant of 4 as it is" in err.value.message_dict["amount"][0]
    services.approve(req, world["admin"])
    grant.refresh_from_db()
    assert grant.ends_at == new_end and grant.amount == 4


def test_release_ends_the_grant_at_once(world):
    grant = make_grant(world["ns"], 4)
    with pytest.raises(ValidationError) as err:  # members ask; managers release
        services.submit(world["alice"], data(world, kind="release", target_grant=grant))
    assert "manager" in err.value.message_dict["target_grant"][0]
    req = services.submit(world["bob"], data(world, kind="release", target_grant=grant))
    assert req.status == "approved"
    grant.refresh_from_db()
    assert grant.state() == "released"
    assert Operation.objects.filter(namespace=world["ns"], reason="release").exists()
    with pytest.raises(ValidationError):  # nothing left to release
        services.submit(world["bob"], data(world, kind="release", target_grant=grant))


def test_grants_of_other_teams_cannot_be_renewed_or_released(world):
    theirs = make_grant(world["nlp_ns"], 2, days=3)
    for kind in ("renewal", "release"):
        later = theirs.ends_at + timedelta(days=1)
        with pytest.raises(ValidationError) as err:
            services.submit(
                world["alice"], data(world, kind=kind, target_grant=theirs, ends_at=later)
            )
        assert "target_grant" in err.value.message_dict
