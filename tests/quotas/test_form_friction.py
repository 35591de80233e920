"""Friction a requester met in the quota form, the token page and the API docs (issue #12).

- a member with one namespace found it preselected in the form's state but not on the page;
- errors came one round at a time: the service's rules ran only once every field parsed;
- "End (UTC) (optional)" stayed optional-looking for a window request;
- a new token had no copy button; Swagger UI had no way back to the portal.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.models import NamespaceUsage
from quotas.forms import RequestForm
from quotas.models import Membership, QuotaRequest, TeamNamespace
from quotas.views.common import visible_teams
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_team

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
WHY = "Training the vision model for the spring paper."


@pytest.fixture
def solo(researcher):
    """A 16-GPU cluster; the researcher's team has exactly one namespace on it."""
    cluster = make_cluster("gpu-a")
    make_node(cluster, "n1", gpus=8)
    make_node(cluster, "n2", gpus=8)
    team = make_team("vision", members=[researcher])
    ns = TeamNamespace.objects.create(team=team, cluster=cluster, name="ml-vision")
    NamespaceUsage.objects.create(cluster=cluster, namespace="ml-vision", resource=GPU, requested=0)
    return {"team": team, "ns": ns, "cluster": cluster}


def _form(user, data=None):
    teams = visible_teams(user)
    ids = set(Membership.objects.filter(user=user).values_list("team_id", flat=True))
    return RequestForm(data, teams=teams, member_team_ids=ids, user=user)


def _data(ns, **kw) -> dict:
    data = {
        "team": str(ns.team_id), "namespace": str(ns.pk), "resource": GPU, "amount": "2",
        "duration": "permanent", "starts_at": "", "ends_at": "", "justification": WHY,
    }  # fmt: skip
    data.update(kw)
    return data


def _selected(html: str, name: str) -> str | None:
    select = re.search(rf'<select name="{name}".*?</select>', html, re.S)
    assert select, name
    chosen = re.search(r'<option value="([^"]*)"[^>]*\bselected\b', select.group(0))
    return chosen.group(1) if chosen else None


def test_the_only_namespace_is_selected_on_the_page(client, solo, researcher):
    client.force_login(researcher)
    html = client.get(reverse("quotas:request-new")).content.decode()
    assert _selected(html, "team") == str(solo["team"].pk)
    assert _selected(html, "namespace") == str(solo["ns"].pk)


def test_every_problem_is_reported_in_one_round(solo, researcher):
    past = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    form = _form(
        researcher,
        _data(solo["ns"], amount="99", justification="gpus", duration="window", starts_at=past),
    )
    assert not form.is_valid()
    errors = {name: " ".join(msgs) for name, msgs in form.errors.items()}
    assert "Give an end" in errors["ends_at"]  # the form's own check
    assert "More than the 16" in errors["amount"]  # the service's rules, same round
    assert "at least 10 characters" in errors["justification"]
    assert "in the past" in errors["starts_at"]
    assert not QuotaRequest.objects.exists()


def test_a_field_keeps_its_own_error_and_text_rules_run_without_a_namespace(solo, researcher):
    form = _form(researcher, _data(solo["ns"], namespace="", amount="", justification="gpus"))
    assert not form.is_valid()
    assert form.errors["amount"] == ["This field is required."]  # not "a positive number" too
    assert "namespace" in form.errors
    assert "at least 10 characters" in " ".join(form.errors["justification"])


def test_a_good_request_stays_valid(solo, researcher):
    assert _form(researcher, _data(solo["ns"])).is_valid()


def test_a_window_says_its_end_is_required(client, solo, researcher):
    client.force_login(researcher)
    html = client.get(reverse("quotas:request-new")).content.decode()
    label = re.search(r'<label for="id_ends_at">.*?</label>', html, re.S).group(0)
    assert "required for a window" in label and "(optional)" not in label
    assert "js/request-form.js" in html
    response = client.post(reverse("quotas:request-new"), _data(solo["ns"], duration="window"))
    assert "Give an end" in " ".join(response.context["form"].errors["ends_at"])
    assert 'id="id_ends_at_error"' in response.content.decode()


def test_a_new_token_has_a_copy_button(client, researcher):
    client.force_login(researcher)
    html = client.post(reverse("account"), {"name": "laptop"}, follow=True).content.decode()
    assert re.search(r'<button type="button"[^>]*data-copy="new-token"', html)
    assert 'id="new-token"' in html and "js/copy-button.js" in html


def test_swagger_ui_links_back_to_the_portal(client, researcher):
    client.force_login(researcher)
    html = client.get(reverse("api-docs")).content.decode()
    link = re.search(r'<a href="([^"]+)"[^>]*data-back-to-portal', html)
    assert link and link.group(1) == reverse("inventory:fleet")


def test_phones_get_a_menu_button_and_stacking_grant_rows(client, solo, researcher):
    make_grant(solo["ns"], 2, days=5)
    client.force_login(researcher)
    html = client.get(reverse("quotas:teams")).content.decode()
    assert 'class="nav-toggle" aria-expanded="false" aria-controls="site-nav"' in html
    assert 'id="site-nav"' in html and "js/nav-toggle.js" in html
    assert 'class="table table--compact table--grants"' in html
    actions = re.search(r'<td class="grant-row__actions">.*?</td>', html, re.S).group(0)
    assert "Renew" in actions


def test_the_page_reports_every_problem_in_one_round(client, solo, researcher):
    """Through the view: the page's form gets the user, so the service's rules run in the
    same round as the form's own checks."""
    client.force_login(researcher)
    r = client.post(reverse("quotas:request-new"),
                    _data(solo["ns"], amount="99", justification="gpus"))  # fmt: skip
    assert r.status_code == 200
    errors = r.context["form"].errors
    assert "More than the 16" in " ".join(errors["amount"])
    assert "at least 10 characters" in " ".join(errors["justification"])
    assert not QuotaRequest.objects.exists()


def test_the_quota_form_separates_whole_gpus_from_existing_slices_and_points_to_mig(
    client, solo, researcher
):
    # One form per kind of asking: whole GPUs and quota on slices nodes already advertise
    # here, a new MIG layout (a GPU reconfigured) on the MIG request form; each page says so.
    make_node(solo["cluster"], "mig-1", resources={"nvidia.com/mig-1g.10gb": (7, 7, 0)}, gpus=1)
    form = _form(researcher)
    assert form.fields["resource"].choices == [
        (GPU, GPU), (RequestForm.SLICES_GROUP, [("nvidia.com/mig-1g.10gb",) * 2]),
    ]  # fmt: skip
    bound = _form(researcher, _data(solo["ns"], resource="nvidia.com/mig-1g.10gb", amount="3"))
    assert bound.is_valid(), bound.errors
    client.force_login(researcher)
    quota_page = client.get(reverse("quotas:request-new")).content.decode()
    assert f'<optgroup label="{RequestForm.SLICES_GROUP}">' in quota_page
    assert reverse("mig:request-new") in quota_page.split('data-form-kind="quota"')[1][:600]


def test_without_mig_slices_the_quota_form_offers_gpus_only(solo, researcher):
    assert _form(researcher).fields["resource"].choices == [(GPU, GPU)]


def test_the_form_offers_the_chosen_namespaces_classes_and_any_class_only_where_enforceable(
    researcher, client
):
    from inventory.models import Cluster, GpuClass

    rq, kq = make_cluster("rq"), make_cluster("kq")
    Cluster.objects.filter(pk=kq.pk).update(enforcement=Cluster.Enforcement.KUEUE)
    for c in (rq, kq):
        GpuClass.objects.create(cluster=c, slug=f"{c.slug}-h100", name=f"{c.slug} H100",
                                selector={"nvidia.com/gpu.product": c.slug})  # fmt: skip
    team = make_team("vision", members=[researcher])
    on_rq = TeamNamespace.objects.create(team=team, cluster=rq, name="ml-vision")
    on_kq = TeamNamespace.objects.create(team=team, cluster=kq, name="ml-vision-k")
    client.force_login(researcher)

    def class_options(ns) -> list[str]:
        page = client.get(reverse("quotas:request-new"), {"namespace": ns.pk}).content.decode()
        select = re.search(r'<select name="gpu_class".*?</select>', page, re.S).group(0)
        return re.findall(r"<option[^>]*>([^<]*)</option>", select)

    assert [o.split(" (")[0] for o in class_options(on_rq)] == ["Any class", "rq: rq H100"]
    assert [o.split(" (")[0] for o in class_options(on_kq)] == ["kq: kq H100"]
