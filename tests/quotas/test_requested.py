"""What a namespace's pods request, summed by PostgreSQL (quotas.limits.requested_by_namespace),
is what the pod rows say: the sums behind "used" and the count of pods a lowering affects
equal the per-pod definitions (limits.pods_over) they replaced on the pages."""

from __future__ import annotations

import pytest

from quotas import limits
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team

GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"


@pytest.mark.django_db
def test_sums_and_affected_pods_equal_the_pod_rows():
    cluster, other = make_cluster("one"), make_cluster("two")
    node, far = make_node(cluster, "n1"), make_node(other, "m1")
    team = make_team("vision")
    ns, quiet = make_namespace(team, cluster, "ml-vision"), make_namespace(team, cluster, "empty")
    make_pod(node, "a", gpus=2)
    make_pod(node, "b", requests={GPU: 1, MIG: 3})  # one pod asking for two resources
    pending = make_pod(node, "c", phase="Pending", requests={MIG: 2})
    type(pending).objects.filter(pk=pending.pk).update(node=None, node_name="")
    make_pod(node, "d", namespace="nlp", gpus=5)  # another namespace
    make_pod(far, "e", gpus=7)  # the same name on another cluster

    found = limits.requested_by_namespace([ns, quiet])
    rows = limits.pods_by_namespace([ns])[ns.pk]
    assert sorted(p.name for p in rows) == ["a", "b", "c"]
    want: dict[str, int] = {}
    for p in rows:
        for resource, amount in p.requests.items():
            want[limits.PREFIX + resource] = want.get(limits.PREFIX + resource, 0) + amount
    assert found[ns.pk].totals == want == {f"requests.{GPU}": 3, f"requests.{MIG}": 5}
    for keys in ([GPU], [MIG], [GPU, MIG], ["nvidia.com/mig-2g.20gb"]):
        prefixed = [limits.PREFIX + k for k in keys]
        assert limits.affected(found[ns.pk], keys) == len(limits.pods_over(rows, prefixed))
    assert limits.affected(found[ns.pk], [GPU, MIG]) == 3  # "b" counted once
    assert found[quiet.pk].totals == {} and limits.affected(found[quiet.pk], [GPU]) == 0
    assert limits.usage(ns, found[ns.pk])[f"requests.{MIG}"] == 5
