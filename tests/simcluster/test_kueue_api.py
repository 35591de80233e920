"""Kueue's API (``kueue.x-k8s.io/v1beta2``) as the simulator serves it: discovery, OpenAPI,
CRUD through the official client, validation and ``kubectl`` tables.

Real sources followed: kubernetes-sigs/kueue ``config/components/crd/bases/
kueue.x-k8s.io_{clusterqueues,localqueues,resourceflavors,cohorts,workloads}.yaml`` (scope,
short names, status subresources, printer columns, enums, CEL rules such as "flavors must
have the same number of resources as the coveredResources" and "borrowingLimit must be nil
when cohort is empty", ``spec.clusterQueue`` immutable), ``pkg/webhooks/clusterqueue_webhook.go``
(``validateFlavorQuotas``: names must match coveredResources, negative quotas, lendingLimit
only with a cohort and ≤ nominalQuota; denied as ``admission webhook "vclusterqueue.kb.io"
denied the request``), ``pkg/webhooks/resourceflavor_webhook.go``; kubernetes
``staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel`` (``Invalid value:
"object": <message>``) and ``.../schema/pruning`` (unknown fields dropped).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import Kubectl, wait_until

G, V = "kueue.x-k8s.io", "v1beta2"
H100 = {"name": "h100-00", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}}


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster.from_fleet({"nodes": [H100]}) as s:
        yield s


@pytest.fixture
def crd(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def cq(name: str, *flavors: tuple[str, Any], cohort: str = "", **res: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": q, **res}]}
                    for f, q in flavors
                ],
            }
        ]
    }
    if cohort:
        spec["cohortName"] = cohort
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def _error(exc: ApiException) -> tuple[int, str]:
    return exc.status, json.loads(exc.body)["message"]


def test_discovery_and_openapi(sim: SimCluster, api: client.ApiClient) -> None:
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups[G].preferred_version.group_version == f"{G}/{V}"
    req = urllib.request.Request(
        f"{sim.url}/apis/{G}/{V}", headers={"Authorization": f"Bearer {sim.token}"}
    )
    res = {r["name"]: r for r in json.loads(urllib.request.urlopen(req).read())["resources"]}
    assert res["clusterqueues"]["namespaced"] is False and res["clusterqueues"]["shortNames"] == [
        "cq"
    ]
    assert res["localqueues"]["namespaced"] is True
    assert res["localqueues"]["shortNames"] == ["queue", "queues", "lq"]
    assert res["workloads"]["shortNames"] == ["kwl", "kueueworkload", "kueueworkloads"]
    assert "clusterqueues/status" in res and "workloads/status" in res
    assert "resourceflavors/status" not in res  # the CRD has no status subresource
    req = urllib.request.Request(
        f"{sim.url}/openapi/v3/apis/{G}/{V}", headers={"Authorization": f"Bearer {sim.token}"}
    )
    doc = json.loads(urllib.request.urlopen(req).read())
    assert f"/apis/{G}/{V}/namespaces/{{namespace}}/localqueues/{{name}}" in doc["paths"]
    rq = doc["components"]["schemas"]["io.x-k8s.kueue.v1beta2.ResourceQuota"]
    assert set(rq["required"]) == {"name", "nominalQuota"}


def test_crud_defaults_and_pruning(crd: client.CustomObjectsApi) -> None:
    body = cq("team-a", ("h100", 4))
    body["spec"]["bogus"] = 1
    made = crd.create_cluster_custom_object(G, V, "clusterqueues", body)
    assert "bogus" not in made["spec"]  # pruned, as apiextensions does
    assert made["spec"]["queueingStrategy"] == "BestEffortFIFO"  # CRD defaults
    assert made["spec"]["flavorFungibility"] == {
        "whenCanBorrow": "MayStopSearch",
        "whenCanPreempt": "TryNextFlavor",
    }
    assert made["metadata"]["generation"] == 1
    assert made["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]  # webhook
    # quantities are stored as sent (custom resources are not canonicalised)
    assert made["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 4
    patched = crd.patch_cluster_custom_object(
        G, V, "clusterqueues", "team-a", {"spec": {"queueingStrategy": "StrictFIFO"}}
    )
    assert patched["metadata"]["generation"] == 2
    # the finalizer goes once no admitted workload uses the queue (clusterqueue_controller.go)
    crd.delete_cluster_custom_object(G, V, "clusterqueues", "team-a")
    wait_until(lambda: not crd.list_cluster_custom_object(G, V, "clusterqueues")["items"])


@pytest.mark.parametrize(
    ("mutate", "code", "message"),
    [
        (
            lambda s: s.update(queueingStrategy="Fast"),
            422,
            # a blocking schema error skips the CEL rules and says so (apiextensions-apiserver
            # v0.36 customresource/strategy.go hasBlockingErr; the real server answers this,
            # tests/differential/test_validation.py kueue-queueing-strategy-blocks-cel)
            '[spec.queueingStrategy: Unsupported value: "Fast": supported values: '
            '"StrictFIFO", "BestEffortFIFO", <nil>: Invalid value: null: some validation rules '
            "were not checked because the object was invalid; correct the existing errors to "
            "complete validation]",
        ),
        (
            lambda s: s["resourceGroups"][0].update(coveredResources=["nvidia.com/gpu", "cpu"]),
            422,
            # an object's CEL failure shows no value (apiextensions-apiserver v0.36
            # schema/cel/validation.go; kueue-covered-resources-mismatch in the referee)
            "spec.resourceGroups[0]: Invalid value: flavors must have the same "
            "number of resources as the coveredResources",
        ),
        (
            lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(borrowingLimit=1),
            422,
            "spec: Invalid value: borrowingLimit must be nil when cohort is empty",
        ),
        (
            lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(name="cpu"),
            403,
            'admission webhook "vclusterqueue.kb.io" denied the request: '
            'spec.resourceGroups[0].flavors[0].resources[0].name: Invalid value: "cpu": must '
            "match the name in coveredResources",
        ),
        (
            lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(
                nominalQuota="-1"
            ),
            403,
            'admission webhook "vclusterqueue.kb.io" denied the request: '
            'spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: "-1": '
            "must be greater than or equal to 0",
        ),
        (
            lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(lendingLimit=1),
            403,
            'admission webhook "vclusterqueue.kb.io" denied the request: '
            'spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "1": '
            "must be nil when cohort is empty",
        ),
        (
            lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(
                nominalQuota="abc"
            ),
            422,
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: "
            '"abc": spec.resourceGroups[0].flavors[0].resources[0].nominalQuota in body should '
            "match '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE]"
            "(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'",
        ),
    ],
)
def test_cluster_queue_validation(
    crd: client.CustomObjectsApi, mutate: Any, code: int, message: str
) -> None:
    body = cq("bad", ("h100", 4))
    mutate(body["spec"])
    with pytest.raises(ApiException) as e:
        crd.create_cluster_custom_object(G, V, "clusterqueues", body)
    status, msg = _error(e.value)
    assert status == code
    prefix = 'ClusterQueue.kueue.x-k8s.io "bad" is invalid: ' if code == 422 else ""
    assert msg == prefix + message


def test_lending_limit_within_cohort(crd: client.CustomObjectsApi) -> None:
    ok = cq("lender", ("h100", 4), cohort="research", lendingLimit=2, borrowingLimit=1)
    crd.create_cluster_custom_object(G, V, "clusterqueues", ok)
    too_much = cq("greedy", ("h100", 4), cohort="research", lendingLimit=5)
    with pytest.raises(ApiException) as e:
        crd.create_cluster_custom_object(G, V, "clusterqueues", too_much)
    assert _error(e.value)[1].endswith(
        'lendingLimit: Invalid value: "5": must be less than or equal to the nominalQuota'
    )


def test_local_queue_cluster_queue_is_immutable(crd: client.CustomObjectsApi) -> None:
    lq = {"apiVersion": f"{G}/{V}", "kind": "LocalQueue", "metadata": {"name": "q"}}
    lq["spec"] = {"clusterQueue": "team-a"}
    crd.create_namespaced_custom_object(G, V, "default", "localqueues", lq)
    with pytest.raises(ApiException) as e:
        crd.patch_namespaced_custom_object(
            G, V, "default", "localqueues", "q", {"spec": {"clusterQueue": "team-b"}}
        )
    assert _error(e.value) == (
        422,
        # a scalar's CEL failure shows its value (kueue-local-queue-immutable in the referee)
        'LocalQueue.kueue.x-k8s.io "q" is invalid: spec.clusterQueue: Invalid value: '
        '"team-b": field is immutable',
    )


def test_resource_flavor_validation(crd: client.CustomObjectsApi) -> None:
    rf = {"apiVersion": f"{G}/{V}", "kind": "ResourceFlavor", "metadata": {"name": "h100"}}
    rf["spec"] = {"tolerations": [{"operator": "Exists", "value": "x"}]}
    with pytest.raises(ApiException) as e:
        crd.create_cluster_custom_object(G, V, "resourceflavors", rf)
    assert _error(e.value) == (
        422,
        'ResourceFlavor.kueue.x-k8s.io "h100" is invalid: spec.tolerations: Invalid value: '
        "a value must be empty when 'operator' is 'Exists'",
    )
    rf["spec"] = {"nodeLabels": {"bad key!": "x"}}
    with pytest.raises(ApiException) as e:
        crd.create_cluster_custom_object(G, V, "resourceflavors", rf)
    status, msg = _error(e.value)
    assert status == 403 and msg.startswith(
        'admission webhook "vresourceflavor.kb.io" denied the request: '
        'spec.nodeLabels: Invalid value: "bad key!": name part must consist of'
    )


def test_kubectl_get_columns(sim: SimCluster, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=json.dumps(cq("team-a", ("h100", 4), cohort="research")))
    out = kubectl("get", "clusterqueues").stdout.splitlines()
    assert out[0].split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
    assert out[1].split()[:2] == ["team-a", "research"]
    wide = kubectl("get", "cq", "-o", "wide").stdout.splitlines()[0]
    assert "STRATEGY" in wide and "ADMITTED WORKLOADS" in wide
    out = kubectl("get", "workloads", "-A").stdout
    assert "No resources found" in kubectl("get", "workloads", "-A").stderr or out == ""
    kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-",
        stdin=json.dumps(cq("team-a", ("h100", 6))),
    )  # fmt: skip
    got = json.loads(kubectl("get", "cq", "team-a", "-o", "json").stdout)
    assert got["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 6
