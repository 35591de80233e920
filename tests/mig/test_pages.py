"""MIG pages: the fleet's MIG nodes, a node's GPUs drawn slice by slice (current vs
proposed), the new-request form, and request list/detail with decisions and steps.

Personas: a team member (``rob``), a member of another team, and an admin.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from mig import services
from mig.models import MigRequest, MigStep
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

A100 = "NVIDIA-A100-SXM4-80GB"
MIG_LABELS = {
    "nvidia.com/gpu.product": A100,
    "nvidia.com/mig-3g.40gb.count": "2",
    "nvidia.com/mig-1g.10gb.count": "4",
}


@pytest.fixture
def world(researcher, admin_user):
    cluster = make_cluster("lab")
    team = make_team("vision", members=[researcher])
    ns = make_namespace(team, cluster, "ml-vision")
    other_user = make_user("olga")
    other_team = make_team("nlp", members=[other_user])
    other_ns = make_namespace(other_team, cluster, "nlp")
    node = make_node(cluster, "a100-00", product=A100, gpus=2, mig_capable=True,
                     mig_strategy="mixed", mig_config="all-disabled",
                     mig_config_state="success")  # fmt: skip
    return {
        "cluster": cluster, "team": team, "ns": ns, "node": node, "other_user": other_user,
        "other_team": other_team, "other_ns": other_ns,
    }  # fmt: skip


def _login(client, user):
    client.force_login(user)
    return client


def _submit(user, ns, layout=None, gpus=1, node=None):
    return services.submit(
        user,
        services.MigRequestData(
            team=ns.team, namespace=ns, product="A100-80GB",
            layout=layout or {"3g.40gb": 2}, gpus=gpus,
            justification="Inference servers need isolation.", node=node,
        ),
    )  # fmt: skip


def _blocks(html: str) -> list[tuple[str, int, int]]:
    """(profile, start, end) of every memory block drawn, in page order."""
    return [
        (m[1], int(m[2]), int(m[3]))
        for m in re.finditer(r'data-profile="([^"]+)" data-start="(\d+)" data-end="(\d+)"', html)
    ]


# -- login -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mig:index", "mig:requests", "mig:request-new"])
def test_login_required(client, world, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert "/login" in response["Location"] or "login" in response["Location"]


def test_node_page_login_required(client, world):
    response = client.get(reverse("mig:node", args=[world["node"].pk]))
    assert response.status_code == 302


# -- index -------------------------------------------------------------------------------


def test_index_groups_nodes_by_product_with_state_and_profiles(client, researcher, world):
    make_node(world["cluster"], "h100-00", product="NVIDIA-H100-80GB-HBM3", gpus=8,
              mig_capable=True, mig_strategy="single", mig_config="all-1g.10gb",
              mig_config_state="pending",
              resources={"nvidia.com/gpu": (56, 56, 3)})  # fmt: skip
    make_node(world["cluster"], "plain", product="NVIDIA-L40S", gpus=4)
    html = _login(client, researcher).get(reverse("mig:index")).content.decode()
    assert "A100-80GB" in html and "H100-80GB" in html
    assert reverse("mig:node", args=[world["node"].pk]) in html
    assert "pending" in html and "all-1g.10gb" in html
    assert "plain" not in html  # not MIG-capable
    assert "<code>3g.40gb</code>" in html  # the profiles table
    assert "nvidia.com/mig-1g.10gb" in html


def test_index_query_count_is_bounded(client, researcher, world, django_assert_max_num_queries):
    for i in range(6):
        make_node(world["cluster"], f"extra-{i}", product=A100, gpus=8, mig_capable=True,
                  mig_strategy="mixed", mig_config="all-balanced",
                  resources={"nvidia.com/mig-3g.40gb": (8, 8, 1)})  # fmt: skip
    _login(client, researcher)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("mig:index"))
    for i in range(10):
        make_node(world["cluster"], f"more-{i}", product=A100, mig_capable=True)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert client.get(reverse("mig:index")).status_code == 200


# -- node view ---------------------------------------------------------------------------


def test_node_view_draws_stock_config(client, researcher, world):
    node = world["node"]
    node.mig_config = "all-3g.40gb"
    node.save()
    html = _login(client, researcher).get(reverse("mig:node", args=[node.pk])).content.decode()
    assert _blocks(html) == [("3g.40gb", 0, 3), ("3g.40gb", 4, 7)] * 2
    assert "stock mig-parted config all-3g.40gb" in html
    assert 'aria-label="GPU 0: 3g.40gb on memory slices 0-3 and compute slices 0-2; ' in html
    assert "3g.40gb on memory slices 4-7 and compute slices 4-6" in html
    # the same placements as a table
    rows = re.findall(r'<td class="mig-slices">([\d-]+)</td>', html)
    assert rows == ["0-3", "4-7", "0-3", "4-7"]


def test_node_view_all_disabled_and_balanced(client, researcher, world):
    node = world["node"]
    _login(client, researcher)
    html = client.get(reverse("mig:node", args=[node.pk])).content.decode()
    assert _blocks(html) == [] and "MIG off · whole GPU" in html
    node.mig_config = "all-balanced"
    node.save()
    html = client.get(reverse("mig:node", args=[node.pk])).content.decode()
    balanced = [("2g.20gb", 0, 1), ("1g.10gb", 2, 2), ("1g.10gb", 3, 3), ("3g.40gb", 4, 7)]
    assert _blocks(html) == balanced * 2


def test_node_view_unknown_config_says_so(client, researcher, world):
    node = world["node"]
    node.mig_config = "site-custom"
    node.save()
    html = _login(client, researcher).get(reverse("mig:node", args=[node.pk])).content.decode()
    assert "Layout not known" in html
    assert _blocks(html) == []


def test_node_view_portal_config_from_gfd_labels(client, researcher, world):
    node = world["node"]
    node.mig_config = "portal-somewhere-else"
    node.labels = MIG_LABELS
    node.save()
    html = _login(client, researcher).get(reverse("mig:node", args=[node.pk])).content.decode()
    assert "GPU Feature Discovery" in html
    blocks = _blocks(html)
    assert sorted(b[0] for b in blocks) == ["1g.10gb"] * 4 + ["3g.40gb"] * 2


def test_node_view_portal_config_from_the_request_that_wrote_it(client, admin_user, world):
    node = world["node"]
    req = _submit(admin_user, world["ns"], {"3g.40gb": 1, "1g.10gb": 2}, gpus=1)
    config = services.config_name_for(req, node)
    MigRequest.objects.filter(pk=req.pk).update(
        status=MigRequest.Status.SUCCEEDED, node=node, drain_policy="wait", config_name=config
    )
    node.mig_config = config
    node.save()
    html = _login(client, admin_user).get(reverse("mig:node", args=[node.pk])).content.decode()
    assert f"MIG request {str(req.pk)[:8]}" in html
    # GPU 0 has the layout, GPU 1 is MIG-disabled (devices [0])
    assert _blocks(html) == [("3g.40gb", 0, 3), ("1g.10gb", 4, 4), ("1g.10gb", 5, 5)]
    assert "MIG off · whole GPU" in html


def test_node_view_draws_proposed_layout(client, researcher, world):
    url = reverse("mig:node", args=[world["node"].pk])
    html = _login(client, researcher).get(url, {"layout": "3g.40gb:2"}).content.decode()
    # current (2 GPUs, MIG off) has no blocks; the proposed GPU has both 3g.40gb
    assert _blocks(html) == [("3g.40gb", 0, 3), ("3g.40gb", 4, 7)]
    assert "Request this layout" in html


def test_node_view_proposed_layout_placement_is_by_position(client, researcher, world):
    url = reverse("mig:node", args=[world["node"].pk])
    html = _login(client, researcher).get(url, {"layout": "3g.40gb:1,1g.10gb:4"}).content.decode()
    # a 1g cannot start at slice 7, so the 3g goes to 4-7
    assert _blocks(html) == [("1g.10gb", i, i) for i in range(4)] + [("3g.40gb", 4, 7)]


def test_node_view_invalid_proposed_layout_shows_validator_message(client, researcher, world):
    url = reverse("mig:node", args=[world["node"].pk])
    html = _login(client, researcher).get(url, {"layout": "4g.40gb:1,2g.20gb:2"}).content.decode()
    assert "does not fit" in html
    assert "need 8 compute slices; one A100-80GB GPU has 7." in html
    assert "4g.40gb occupies memory slices 0-3" in html
    assert _blocks(html) == []
    html = client.get(url, {"layout": "9g.1gb:1"}).content.decode()
    assert "Unknown profile" in html
    html = client.get(url, {"layout": "garbage"}).content.decode()
    assert "Cannot read" in html


def test_node_view_plus_me_from_a_query_string(client, researcher, world):
    url = reverse("mig:node", args=[world["node"].pk]) + "?layout=1g.10gb+me:1"
    html = _login(client, researcher).get(url).content.decode()
    assert _blocks(html) == [("1g.10gb+me", 0, 0)]


def test_node_view_a30_is_four_by_four(client, researcher, world):
    node = make_node(world["cluster"], "a30", product="NVIDIA-A30", gpus=1, mig_capable=True,
                     mig_strategy="mixed", mig_config="all-2g.12gb")  # fmt: skip
    html = _login(client, researcher).get(reverse("mig:node", args=[node.pk])).content.decode()
    assert "mig-grid--4" in html
    assert _blocks(html) == [("2g.12gb", 0, 1), ("2g.12gb", 2, 3)]


def test_node_view_not_mig_capable(client, researcher, world):
    node = make_node(world["cluster"], "l40s", product="NVIDIA-L40S", gpus=4)
    html = _login(client, researcher).get(reverse("mig:node", args=[node.pk])).content.decode()
    assert "Not MIG-capable" in html


def test_inventory_node_page_links_to_the_mig_view(client, researcher, world):
    node = world["node"]
    html = (
        _login(client, researcher).get(reverse("inventory:node", args=[node.pk])).content.decode()
    )
    assert reverse("mig:node", args=[node.pk]) in html


# -- new request -------------------------------------------------------------------------


def _form(world, **over):
    data = {
        "team": world["team"].pk, "namespace": world["ns"].pk, "product": "A100-80GB",
        "gpus": 1, "justification": "Inference servers need isolation.",
        "p-a100-80gb-3g-40gb": 1, "p-a100-80gb-1g-10gb": 2,
    }  # fmt: skip
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}


def test_new_request_form_offers_cluster_products_and_profiles(client, researcher, world):
    # An H100 with MIG disabled (mig.strategy none) is not offered: nothing could run there.
    make_node(world["cluster"], "h100-off", product="NVIDIA-H100-80GB-HBM3", gpus=8,
              mig_capable=True, mig_strategy="none")  # fmt: skip
    html = _login(client, researcher).get(reverse("mig:request-new")).content.decode()
    assert '<option value="H100-80GB"' not in html
    assert '<option value="A100-80GB"' in html
    assert 'name="p-a100-80gb-1g-10gb-me"' in html
    assert 'data-validate-url="/api/v1/mig-layouts/validate/"' in html
    assert "js/mig-layout.js" in html
    assert 'name="node"' not in html  # admins only
    # Quota on slices that exist, and whole GPUs, are the other form's (issue #12).
    assert reverse("quotas:request-new") in html.split('data-form-kind="mig"')[1][:600]


def test_new_request_prefills_from_the_node_page_link(client, researcher, world):
    url = reverse("mig:request-new") + "?product=A100-80GB&layout=3g.40gb:2"
    html = _login(client, researcher).get(url).content.decode()
    assert re.search(r'name="p-a100-80gb-3g-40gb" value="2"', html)


def test_new_request_valid_creates_pending_request(client, researcher, world):
    response = _login(client, researcher).post(reverse("mig:request-new"), _form(world))
    req = MigRequest.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("mig:request", args=[req.pk])
    assert req.status == MigRequest.Status.PENDING
    assert req.layout == {"3g.40gb": 1, "1g.10gb": 2}
    assert req.product == "A100-80GB" and req.requested_by == researcher


def test_new_request_bad_layout_shows_errors_and_stores_nothing(client, researcher, world):
    data = _form(world, **{"p-a100-80gb-4g-40gb": 1, "p-a100-80gb-3g-40gb": None,
                           "p-a100-80gb-1g-10gb": None, "p-a100-80gb-2g-20gb": 2})  # fmt: skip
    response = _login(client, researcher).post(reverse("mig:request-new"), data)
    html = response.content.decode()
    assert response.status_code == 200
    assert "Nothing was saved" in html
    assert "need 8 compute slices" in html
    assert 'id="id_layout_error"' in html
    assert not MigRequest.objects.exists()


@pytest.mark.parametrize(
    ("over", "field", "message"),
    [
        ({"p-a100-80gb-3g-40gb": None, "p-a100-80gb-1g-10gb": None}, "layout",
         "at least one instance"),
        ({"p-a100-80gb-3g-40gb": 3}, "p-a100-80gb-3g-40gb", "less than or equal to 2"),
        ({"gpus": 0}, "gpus", "greater than or equal to 1"),
        ({"gpus": 9}, "gpus", "at most 2 GPUs"),
        ({"justification": "short"}, "justification", "at least 10 characters"),
    ],
)  # fmt: skip
def test_new_request_field_errors(client, researcher, world, over, field, message):
    response = _login(client, researcher).post(reverse("mig:request-new"), _form(world, **over))
    form = response.context["form"]
    assert message in " ".join(form.errors[field])
    assert not MigRequest.objects.exists()


def test_new_request_other_teams_namespace_refused(client, researcher, world):
    data = _form(world, team=world["other_team"].pk, namespace=world["other_ns"].pk)
    response = _login(client, researcher).post(reverse("mig:request-new"), data)
    assert response.status_code == 200
    assert "team" in response.context["form"].errors
    assert not MigRequest.objects.exists()


def test_new_request_other_products_numbers_are_ignored(client, researcher, world):
    make_node(world["cluster"], "h100", product="NVIDIA-H100-80GB-HBM3", mig_capable=True,
              mig_strategy="mixed")  # fmt: skip
    data = _form(world, **{"p-h100-80gb-7g-80gb": 5})  # out of range, but not the product
    response = _login(client, researcher).post(reverse("mig:request-new"), data)
    assert response.status_code == 302
    assert MigRequest.objects.get().layout == {"3g.40gb": 1, "1g.10gb": 2}


def test_new_request_admin_may_name_a_node(client, admin_user, world):
    html = _login(client, admin_user).get(reverse("mig:request-new")).content.decode()
    assert 'name="node"' in html
    response = client.post(reverse("mig:request-new"), _form(world, node=world["node"].pk))
    assert response.status_code == 302
    assert MigRequest.objects.get().requested_node == world["node"]


def test_no_teams_empty_state(client, world):
    loner = make_user("loner")
    html = _login(client, loner).get(reverse("mig:request-new")).content.decode()
    assert "not in a team yet" in html


# -- list and detail: scoping ------------------------------------------------------------


def test_list_is_scoped_to_own_teams(client, researcher, world):
    mine = _submit(researcher, world["ns"])
    theirs = _submit(world["other_user"], world["other_ns"])
    html = _login(client, researcher).get(reverse("mig:requests")).content.decode()
    assert reverse("mig:request", args=[mine.pk]) in html
    assert reverse("mig:request", args=[theirs.pk]) not in html


def test_other_teams_request_is_404(client, researcher, world):
    theirs = _submit(world["other_user"], world["other_ns"])
    _login(client, researcher)
    assert client.get(reverse("mig:request", args=[theirs.pk])).status_code == 404
    assert client.get(reverse("mig:request-cancel", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("mig:request-cancel", args=[theirs.pk])).status_code == 404


def test_list_query_count_is_bounded(client, admin_user, world, django_assert_max_num_queries):
    for _ in range(3):
        _submit(admin_user, world["ns"])
    _login(client, admin_user)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("mig:requests"))
    for _ in range(10):
        _submit(admin_user, world["other_ns"])
    with django_assert_max_num_queries(len(few.captured_queries)):
        html = client.get(reverse("mig:requests")).content.decode()
    assert html.count('href="/mig/requests/') >= 13


def test_list_status_filter(client, researcher, world):
    req = _submit(researcher, world["ns"])
    services.cancel(req, researcher)
    _login(client, researcher)
    assert (
        str(req.pk) in client.get(reverse("mig:requests"), {"status": "cancelled"}).content.decode()
    )
    assert (
        str(req.pk) not in client.get(reverse("mig:requests"), {"status": "open"}).content.decode()
    )


# -- detail: drawing, proposals, decisions -----------------------------------------------


def test_detail_draws_the_layout(client, researcher, world):
    req = _submit(researcher, world["ns"], {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    html = _login(client, researcher).get(reverse("mig:request", args=[req.pk])).content.decode()
    assert _blocks(html) == [("2g.20gb", 0, 1), ("1g.10gb", 2, 2), ("1g.10gb", 3, 3),
                             ("3g.40gb", 4, 7)]  # fmt: skip
    assert "Approve or reject" not in html  # researchers do not decide
    assert "No steps yet" in html


def test_detail_admin_sees_proposals_with_pods(client, admin_user, world):
    busy = make_node(world["cluster"], "a100-busy", product=A100, gpus=2, mig_capable=True,
                     mig_strategy="mixed", mig_config="all-disabled")  # fmt: skip
    make_pod(busy, "trainer-0", namespace="nlp")
    req = _submit(admin_user, world["ns"])
    html = _login(client, admin_user).get(reverse("mig:request", args=[req.pk])).content.decode()
    assert "Node proposals" in html
    assert html.index("a100-00") < html.index("a100-busy")  # idle first
    assert "nlp/trainer-0" in html
    assert "idle" in html
    assert 'name="drain_policy"' in html and 'value="evict"' in html


def test_staff_only_actions_are_403_for_researchers(client, researcher, world):
    req = _submit(researcher, world["ns"])
    _login(client, researcher)
    for name in ("mig:request-approve", "mig:request-reject", "mig:request-revert"):
        response = client.post(reverse(name, args=[req.pk]), {"reason": "no", "node": "x"})
        assert response.status_code == 403, name
    req.refresh_from_db()
    assert req.status == MigRequest.Status.PENDING


def test_admin_approves_with_node_and_drain_policy(client, admin_user, world, on_commit):
    req = _submit(admin_user, world["ns"])
    _login(client, admin_user)
    url = reverse("mig:request-approve", args=[req.pk])
    with on_commit(execute=False):
        response = client.post(url, {"node": world["node"].pk, "drain_policy": "evict"})
    assert response.status_code == 302
    req.refresh_from_db()
    assert req.status == MigRequest.Status.APPROVED
    assert req.node == world["node"] and req.drain_policy == "evict"
    assert req.steps.count() == len(services.APPLY_STEPS)


def test_approve_without_drain_policy_shows_error(client, admin_user, world):
    req = _submit(admin_user, world["ns"])
    _login(client, admin_user)
    response = client.post(reverse("mig:request-approve", args=[req.pk]),
                           {"node": world["node"].pk})  # fmt: skip
    assert response.status_code == 400
    assert "drain_policy" in response.context["approve_form"].errors
    req.refresh_from_db()
    assert req.status == MigRequest.Status.PENDING


def test_admin_rejects_with_reason(client, admin_user, world):
    req = _submit(admin_user, world["ns"])
    _login(client, admin_user)
    url = reverse("mig:request-reject", args=[req.pk])
    assert client.post(url, {"reason": ""}).status_code == 400
    assert client.post(url, {"reason": "No capacity this month."}).status_code == 302
    req.refresh_from_db()
    assert req.status == MigRequest.Status.REJECTED


def test_requester_cancels_after_confirmation(client, researcher, world):
    req = _submit(researcher, world["ns"])
    _login(client, researcher)
    url = reverse("mig:request-cancel", args=[req.pk])
    html = client.get(url).content.decode()
    assert "Cancel this MIG request?" in html
    req.refresh_from_db()
    assert req.status == MigRequest.Status.PENDING  # GET changes nothing
    assert client.post(url, {"note": "not needed"}).status_code == 302
    req.refresh_from_db()
    assert req.status == MigRequest.Status.CANCELLED


def test_steps_rendered_with_status_attempts_and_timestamps(client, researcher, world, on_commit):
    admin = make_user("root", staff=True)
    req = _submit(researcher, world["ns"])
    with on_commit(execute=False):
        services.approve(req, admin, node=world["node"], drain_policy="wait")
    t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=5)
    MigStep.objects.filter(request=req, name=MigStep.Name.CORDON).update(
        status=MigStep.Status.DONE, attempts=1, started_at=t0,
        finished_at=t0 + timedelta(seconds=2), detail="cordoned a100-00",
    )  # fmt: skip
    MigStep.objects.filter(request=req, name=MigStep.Name.DRAIN).update(
        status=MigStep.Status.RUNNING, attempts=3, started_at=t0 + timedelta(seconds=3),
        detail="waiting for 1 GPU pod to finish",
    )  # fmt: skip
    html = _login(client, researcher).get(reverse("mig:request", args=[req.pk])).content.decode()
    assert "Coordinator steps" in html
    assert f'<time datetime="{t0.isoformat()}">{t0:%Y-%m-%d %H:%M:%S}</time>' in html
    assert f"{t0 + timedelta(seconds=2):%Y-%m-%d %H:%M:%S}" in html
    assert "cordoned a100-00" in html and "waiting for 1 GPU pod to finish" in html
    assert "Wait for mig-manager" in html  # every step listed, pending ones too
    assert html.count("<tr>") >= len(services.APPLY_STEPS)


def test_failed_run_offers_revert_to_staff_only(client, researcher, admin_user, world, on_commit):
    req = _submit(researcher, world["ns"])
    with on_commit(execute=False):
        services.approve(req, admin_user, node=world["node"], drain_policy="wait")
    req.refresh_from_db()
    MigStep.objects.filter(request=req, name=MigStep.Name.SET_LABEL).update(
        status=MigStep.Status.DONE
    )
    MigRequest.objects.filter(pk=req.pk).update(
        status=MigRequest.Status.FAILED, error="mig-manager reported failed"
    )
    html = _login(client, researcher).get(reverse("mig:request", args=[req.pk])).content.decode()
    assert "mig-manager reported failed" in html
    assert reverse("mig:request-revert", args=[req.pk]) not in html
    html = _login(client, admin_user).get(reverse("mig:request", args=[req.pk])).content.decode()
    assert reverse("mig:request-revert", args=[req.pk]) in html
    with on_commit(execute=False):
        response = client.post(reverse("mig:request-revert", args=[req.pk]))
    run = MigRequest.objects.get(kind=MigRequest.Kind.REVERT)
    assert response["Location"] == reverse("mig:request", args=[run.pk])
    assert run.config_name == "all-disabled"


def test_nav_has_mig_for_everyone(client, researcher, world):
    html = _login(client, researcher).get(reverse("mig:index")).content.decode()
    assert re.search(r'<a href="/mig/" aria-current="page">MIG</a>', html)


def test_the_only_team_is_preselected_even_with_two_namespaces(client, researcher, world):
    import re

    make_namespace(world["team"], world["cluster"], "ml-vision-batch")
    html = _login(client, researcher).get(reverse("mig:request-new")).content.decode()

    def chosen(name: str) -> str | None:
        select = re.search(rf'<select name="{name}".*?</select>', html, re.S).group(0)
        found = re.search(r'<option value="([^"]*)"[^>]*\bselected\b', select)
        return found.group(1) if found else None

    assert chosen("team") == str(world["team"].pk)
    assert chosen("namespace") in (None, "")  # two to choose from
