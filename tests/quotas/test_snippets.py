"""How to use a grant: the lines shown for each active grant (quotas/snippets.py)."""

from __future__ import annotations

import pytest
import yaml
from django.urls import reverse

from inventory.models import Cluster, GpuClass
from quotas.snippets import grant_snippets
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def cluster(slug: str, enforcement: str) -> Cluster:
    return Cluster.objects.create(slug=slug, name=slug.title(), enforcement=enforcement)


def test_a_resourcequota_grant_of_a_class_is_used_by_its_node_selector():
    c = cluster("rq", Cluster.Enforcement.RESOURCEQUOTA)
    h100 = GpuClass.objects.create(cluster=c, slug="h100", name="H100", selector=H100)
    ns = make_namespace(make_team("vision"), c, "ml-vision")
    grants = [make_grant(ns, 4, gpu_class=h100), make_grant(ns, 2, gpu_class=h100),
              make_grant(ns, 3, "nvidia.com/mig-1g.10gb")]  # fmt: skip
    first, mig = grant_snippets(ns, grants)  # one per resource and class
    pod = yaml.safe_load(first.text)
    assert pod["metadata"] == {"namespace": "ml-vision"}
    assert pod["spec"]["nodeSelector"] == H100
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert "nodeSelector" not in yaml.safe_load(mig.text)["spec"]
    assert mig.title == "nvidia.com/mig-1g.10gb of any class"


def test_a_kueue_grant_names_the_local_queue_and_the_page_has_a_copy_button(client, settings):
    c = cluster("kq", Cluster.Enforcement.KUEUE)
    h100 = GpuClass.objects.create(cluster=c, slug="h100", name="H100", selector=H100)
    alice = make_user("alice")
    ns = make_namespace(make_team("vision", members=[alice]), c, "ml-vision")
    make_grant(ns, 4, gpu_class=h100)
    [snippet] = grant_snippets(ns, list(ns.grants.all()))
    labels = yaml.safe_load(snippet.text)["metadata"]["labels"]
    assert labels == {"kueue.x-k8s.io/queue-name": settings.KUEUE_LOCAL_QUEUE}
    client.force_login(alice)
    page = client.get(reverse("quotas:teams")).content.decode()
    assert f'id="{snippet.key}"' in page and f'data-copy="{snippet.key}"' in page
    assert "kueue.x-k8s.io/queue-name: default" in page
