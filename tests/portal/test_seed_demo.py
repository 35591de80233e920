"""seed_demo against the demo fleet: accounts, teams, sample requests; safe to run twice."""

import pytest
from django.core.management import call_command

from quotas.models import Grant, Membership, QuotaRequest, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_sim(tmp_path):
    from simcluster import SimCluster

    sim = SimCluster.from_fleet("simcluster/fleets/demo.yaml")
    sim.start(host="127.0.0.1", port=0)
    path = tmp_path / "kubeconfig"
    sim.write_kubeconfig(path)
    yield path
    sim.stop()


def test_seed_demo_is_idempotent_and_makes_the_roles_visible(demo_sim, capsys):
    call_command("seed_demo", kubeconfig=str(demo_sim))
    out = capsys.readouterr().out
    assert "alice / alice-demo-pass" in out and "admin / admin-demo-pass" in out
    assert set(Team.objects.values_list("slug", flat=True)) == {
        "vision", "nlp", "genomics", "robotics",
    }  # fmt: skip
    assert Membership.objects.get(user__username="bob").role == "manager"
    statuses = sorted(QuotaRequest.objects.values_list("status", flat=True))
    assert statuses == ["approved", "pending", "pending", "rejected"]
    assert Grant.objects.filter(kind="baseline").count() == 3
    call_command("seed_demo", kubeconfig=str(demo_sim))
    assert QuotaRequest.objects.count() == 4 and Team.objects.count() == 4
