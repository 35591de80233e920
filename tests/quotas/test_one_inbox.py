"""One inbox: the approval queue lists pending quota AND MIG requests, filtered (team, GPU
class, kind, age), searched (team, requester, justification), sorted and paginated; a
team's request list includes its MIG requests, and nobody sees another team's.

Before: pending MIG requests were missing from the queue and from the request list.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from inventory.classes import refresh
from inventory.models import GpuClass
from mig import services as mig_services
from mig.models import MigRequest
from quotas import services
from quotas.models import QuotaRequest, TeamNamespace
from quotas.views.queue import QUEUE_PER_PAGE
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_team, make_user

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def world(researcher, admin_user):
    """Cluster gpu-a: an H100 node (8 GPUs) and a MIG-capable A100 node (2 GPUs), one
    GPU class per product; team vision (rob) and team nlp (olga)."""
    cluster = make_cluster("gpu-a")
    make_node(cluster, "h1", product=H100, gpus=8)
    make_node(cluster, "a1", product=A100, gpus=2, mig_capable=True, mig_strategy="mixed",
              mig_config="all-disabled", mig_config_state="success")  # fmt: skip
    refresh(cluster)
    olga = make_user("olga")
    vision = make_team("vision", members=[researcher])
    nlp = make_team("nlp", members=[olga])
    classes = {c.selector["nvidia.com/gpu.product"]: c for c in GpuClass.objects.all()}
    return {
        "cluster": cluster, "olga": olga, "vision": vision, "nlp": nlp,
        "ns": TeamNamespace.objects.create(team=vision, cluster=cluster, name="ml-vision"),
        "nlp_ns": TeamNamespace.objects.create(team=nlp, cluster=cluster, name="ml-nlp"),
        "a100": classes[A100], "h100": classes[H100],
    }  # fmt: skip


def quota(ns, user, amount=1, why="Training the vision model for the spring paper.", **kw):
    data = services.RequestData(
        team=ns.team, namespace=ns, resource=GPU, amount=amount, justification=why, **kw
    )
    return services.submit(user, data)


def mig(ns, user, gpus=1, why="Inference servers need isolated slices."):
    return mig_services.submit(
        user,
        mig_services.MigRequestData(
            team=ns.team, namespace=ns, product="A100-80GB", layout={"3g.40gb": 2}, gpus=gpus,
            justification=why,
        ),
    )  # fmt: skip


def age(req, days: float):
    type(req).objects.filter(pk=req.pk).update(created_at=timezone.now() - timedelta(days=days))
    req.refresh_from_db()
    return req


def queue(client, admin_user, **params):
    client.force_login(admin_user)
    response = client.get(reverse("quotas:queue"), params)
    assert response.status_code == 200
    return response


def pks(response) -> list:
    return [row["req"].pk for row in response.context["rows"]]


# -- the queue: both kinds -------------------------------------------------------------


def test_queue_lists_pending_quota_and_mig_requests(client, world, researcher, admin_user):
    q = age(quota(world["ns"], researcher, amount=3), 2)
    m = age(mig(world["nlp_ns"], world["olga"]), 1)
    decided = mig(world["ns"], researcher)
    mig_services.reject(decided, admin_user, "Use the shared pool.")
    response = queue(client, admin_user)
    assert pks(response) == [q.pk, m.pk]  # oldest first; the rejected one is gone
    quota_row, mig_row = response.context["rows"]
    # The quota row keeps its facts: namespace now, capacity, the effect of approving.
    assert not quota_row["is_mig"]
    assert (quota_row["granted"], quota_row["used"], quota_row["after"]) == (0, 0, 7)
    assert {"room", "change", "effective", "pending", "state"} <= set(quota_row)
    assert mig_row["is_mig"]
    html = response.content.decode()
    assert "2 pending requests" in html
    # A MIG row links to its page, where it is decided; no second decision form here.
    assert reverse("mig:request", args=[m.pk]) in html
    assert reverse("mig:request-approve", args=[m.pk]) not in html
    assert reverse("quotas:request-approve", args=[q.pk]) in html


def test_queue_filters_by_team_kind_class_and_age(client, world, researcher, admin_user):
    vision_new = age(quota(world["ns"], researcher, gpu_class=world["h100"]), 4)
    grant = make_grant(world["ns"], 2, days=3)
    renewal = quota(
        world["ns"], researcher, amount=2, kind=QuotaRequest.Kind.RENEWAL, target_grant=grant,
        ends_at=grant.ends_at + timedelta(days=7),
    )  # fmt: skip
    vision_mig = age(mig(world["ns"], researcher), 8)
    nlp_new = quota(world["nlp_ns"], world["olga"], gpu_class=world["a100"])
    nlp_mig = mig(world["nlp_ns"], world["olga"])

    def listed(**params) -> set:
        return set(pks(queue(client, admin_user, **params)))

    assert listed() == {vision_new.pk, renewal.pk, vision_mig.pk, nlp_new.pk, nlp_mig.pk}
    assert listed(team="nlp") == {nlp_new.pk, nlp_mig.pk}
    assert listed(kind="mig") == {vision_mig.pk, nlp_mig.pk}
    assert listed(kind="new") == {vision_new.pk, nlp_new.pk}
    assert listed(kind="renewal") == {renewal.pk}
    assert listed(team="vision", kind="mig") == {vision_mig.pk}
    # A GPU class: quota requests naming it, MIG requests for its product on its cluster.
    assert listed(gpu_class=str(world["a100"].pk)) == {nlp_new.pk, vision_mig.pk, nlp_mig.pk}
    assert listed(gpu_class=str(world["h100"].pk)) == {vision_new.pk}
    assert listed(age="3") == {vision_new.pk, vision_mig.pk}
    assert listed(age="7") == {vision_mig.pk}


def test_queue_sorts_oldest_newest_and_by_amount(client, world, researcher, admin_user):
    small = age(quota(world["ns"], researcher, amount=1), 3)
    slices = age(mig(world["ns"], researcher, gpus=2), 2)
    big = age(quota(world["nlp_ns"], world["olga"], amount=5), 1)
    assert pks(queue(client, admin_user)) == [small.pk, slices.pk, big.pk]
    assert pks(queue(client, admin_user, sort="oldest")) == [small.pk, slices.pk, big.pk]
    assert pks(queue(client, admin_user, sort="newest")) == [big.pk, slices.pk, small.pk]
    assert pks(queue(client, admin_user, sort="amount")) == [big.pk, slices.pk, small.pk]


def test_queue_search_by_team_requester_and_justification(client, world, researcher, admin_user):
    spring = quota(world["ns"], researcher, why="Fine-tuning for the spring paper.")
    olgas = mig(world["nlp_ns"], world["olga"], why="Serving the translation demo.")
    other = quota(world["ns"], researcher, why="Batch inference.")

    def found(q) -> set:
        return set(pks(queue(client, admin_user, q=q)))

    assert found("SPRING") == {spring.pk}  # justification, any case
    assert found("translation") == {olgas.pk}
    assert found("olga") == {olgas.pk}  # requester
    assert found("nlp") == {olgas.pk}  # team slug
    assert found("Vision") == {spring.pk, other.pk}  # team name
    assert found("nothing like this") == set()
    html = queue(client, admin_user, q="nothing like this").content.decode()
    assert "No pending request matches" in html


def test_queue_paginates_both_kinds_together(client, world, researcher, admin_user):
    made = []
    for i in range(25):
        ns, user = (world["ns"], researcher) if i % 2 else (world["nlp_ns"], world["olga"])
        made.append(age(mig(ns, user) if i % 3 == 0 else quota(ns, user), 30 - i))
    first = queue(client, admin_user)
    assert first.context["page"].paginator.count == 25
    assert pks(first) == [r.pk for r in made[:QUEUE_PER_PAGE]]
    second = queue(client, admin_user, page=2)
    assert pks(second) == [r.pk for r in made[QUEUE_PER_PAGE:]]
    # The filters and the sort are kept when paging.
    html = queue(client, admin_user, sort="newest", age="1").content.decode()
    assert re.search(r'href="\?sort=newest&amp;age=1&amp;page=2" rel="next"', html)
    assert queue(client, admin_user, kind="mig").context["page"].paginator.count == 9


def test_queue_query_count_does_not_grow_with_mig_rows(client, world, researcher, admin_user):
    quota(world["ns"], researcher)
    mig(world["nlp_ns"], world["olga"])
    client.force_login(admin_user)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse("quotas:queue")).status_code == 200
        return len(ctx.captured_queries)

    two = count()
    for _ in range(3):
        quota(world["ns"], researcher)
        mig(world["nlp_ns"], world["olga"])
    assert len(client.get(reverse("quotas:queue")).context["rows"]) == 8
    assert count() == two


def test_invalid_filter_lists_nothing_and_says_why(client, world, researcher, admin_user):
    quota(world["ns"], researcher)
    response = queue(client, admin_user, kind="bogus")
    assert response.context["rows"] == []
    assert "The filter is not valid" in response.content.decode()


def test_queue_stays_admin_only(client, world, researcher):
    mig(world["ns"], researcher)
    client.force_login(researcher)
    assert client.get(reverse("quotas:queue")).status_code == 403


# -- a team's request list ---------------------------------------------------------------


def _listed(client, user, **params) -> list:
    client.force_login(user)
    response = client.get(reverse("quotas:requests"), params)
    assert response.status_code == 200
    return [r.pk for r in response.context["page"].object_list]


def test_request_list_includes_the_teams_mig_requests(client, world, researcher, admin_user):
    q = age(quota(world["ns"], researcher), 2)
    m = age(mig(world["ns"], researcher), 1)
    theirs = mig(world["nlp_ns"], world["olga"])
    assert _listed(client, researcher) == [m.pk, q.pk]  # newest first, both kinds
    assert _listed(client, world["olga"]) == [theirs.pk]
    assert set(_listed(client, admin_user)) == {q.pk, m.pk, theirs.pk}
    assert set(_listed(client, admin_user, team="nlp")) == {theirs.pk}
    assert _listed(client, researcher, team="nlp") == []  # no peeking at another team
    client.force_login(researcher)
    html = client.get(reverse("quotas:requests")).content.decode()
    assert reverse("mig:request", args=[m.pk]) in html
    assert reverse("mig:request", args=[theirs.pk]) not in html
    assert re.search(r'data-kind="mig"', html) and re.search(r'data-kind="quota"', html)


def test_request_list_status_filter_covers_mig(client, world, researcher):
    pending = mig(world["ns"], researcher)
    cancelled = mig(world["ns"], researcher)
    mig_services.cancel(cancelled, researcher)
    q = quota(world["ns"], researcher)
    assert set(_listed(client, researcher, status="open")) == {pending.pk, q.pk}
    assert _listed(client, researcher, status="cancelled") == [cancelled.pk]
    assert set(_listed(client, researcher, status="pending")) == {pending.pk, q.pk}
    assert MigRequest.objects.filter(team=world["vision"]).count() == 2
