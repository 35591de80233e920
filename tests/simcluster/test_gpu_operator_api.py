"""The GPU Operator's ClusterPolicy as the simulator serves it, and the sim clock endpoint.

Real sources followed: NVIDIA/gpu-operator v26.7.0
``deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml`` (group ``nvidia.com``,
cluster-scoped, ``subresources.status``, ``additionalPrinterColumns`` Status/Age, the
``spec.mig.strategy`` enum, the required spec fields) and ``controllers/object_controls.go``
(``createConfigMap``: the default ``default-mig-parted-config`` is owned by the
ClusterPolicy, updated back to its stock content, and not created when
``spec.migManager.config.name`` names a custom ConfigMap); kubernetes/kubernetes v1.32
``staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning`` (unknown fields
of a custom resource are dropped; ``fieldValidation=Strict`` turns them into a 400).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster
from simcluster.gpuoperator import DEFAULT_CONFIGMAP, stock_config_text
from tests import kubesim

from .helpers import Kubectl, make_api, wait_until

A100 = {
    "name": "a100-00",
    "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2, "mig": {"strategy": "mixed"}},
}
CP = ("nvidia.com", "v1", "clusterpolicies")


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster.from_fleet({"nodes": [A100]}, mig_step_s=0.01) as s:
        yield s


@pytest.fixture
def crd(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def test_served_with_discovery_and_openapi(sim: SimCluster, api: client.ApiClient) -> None:
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups["nvidia.com"].preferred_version.group_version == "nvidia.com/v1"
    req = urllib.request.Request(
        sim.url + "/apis/nvidia.com/v1", headers={"Authorization": f"Bearer {sim.token}"}
    )
    res = json.loads(urllib.request.urlopen(req).read())
    by_name = {r["name"]: r for r in res["resources"]}
    assert by_name["clusterpolicies"]["namespaced"] is False
    assert by_name["clusterpolicies"]["kind"] == "ClusterPolicy"
    assert "watch" in by_name["clusterpolicies"]["verbs"]
    assert "clusterpolicies/status" in by_name
    req = urllib.request.Request(
        sim.url + "/openapi/v3/apis/nvidia.com/v1",
        headers={"Authorization": f"Bearer {sim.token}"},
    )
    doc = json.loads(urllib.request.urlopen(req).read())
    assert "/apis/nvidia.com/v1/clusterpolicies/{name}" in doc["paths"]
    spec = doc["components"]["schemas"]["com.nvidia.v1.ClusterPolicySpec"]
    assert "migManager" in spec["properties"] and "driver" in spec["required"]


def test_fleet_without_the_key_has_a_policy_without_custom_config(
    sim: SimCluster, crd: client.CustomObjectsApi
) -> None:
    items = crd.list_cluster_custom_object(*CP)["items"]
    assert [i["metadata"]["name"] for i in items] == ["cluster-policy"]
    mig_manager = items[0]["spec"]["migManager"]
    assert "name" not in mig_manager["config"]
    assert items[0]["status"]["state"] == "ready"


def test_unknown_fields_pruned_strict_refused_enum_checked(
    crd: client.CustomObjectsApi,
) -> None:
    body = {"spec": {"migManager": {"config": {"name": "x"}, "bogus": 1}}}
    got = crd.patch_cluster_custom_object(*CP, "cluster-policy", body)
    assert got["spec"]["migManager"]["config"]["name"] == "x"
    assert "bogus" not in got["spec"]["migManager"]
    with pytest.raises(ApiException) as ei:
        crd.patch_cluster_custom_object(
            *CP, "cluster-policy", {"spec": {"nope": 1}}, field_validation="Strict"
        )
    assert ei.value.status == 422 and 'unknown field \\"spec.nope\\"' in ei.value.body
    with pytest.raises(ApiException) as ei:
        crd.patch_cluster_custom_object(
            *CP, "cluster-policy", {"spec": {"mig": {"strategy": "weird"}}}
        )
    assert ei.value.status == 422
    assert 'spec.mig.strategy: Unsupported value: \\"weird\\"' in ei.value.body
    with pytest.raises(ApiException) as ei:  # a required field of the CRD
        crd.patch_cluster_custom_object(*CP, "cluster-policy", {"spec": {"driver": None}})
    assert ei.value.status == 422 and "spec.driver: Required value" in ei.value.body


def test_status_is_a_subresource(crd: client.CustomObjectsApi) -> None:
    got = crd.patch_cluster_custom_object(*CP, "cluster-policy", {"status": {"state": "notReady"}})
    assert got["status"]["state"] == "ready"  # the main resource ignores status
    got = crd.patch_cluster_custom_object_status(
        *CP, "cluster-policy", {"status": {"state": "notReady"}}
    )
    assert got["status"]["state"] == "notReady"


def test_default_config_owned_by_the_policy_and_reverted(
    sim: SimCluster, v1: client.CoreV1Api, crd: client.CustomObjectsApi
) -> None:
    cm = v1.read_namespaced_config_map(DEFAULT_CONFIGMAP, "gpu-operator")
    assert cm.data["config.yaml"] == stock_config_text()
    policy = crd.get_cluster_custom_object(*CP, "cluster-policy")
    assert cm.metadata.owner_references[0].uid == policy["metadata"]["uid"]
    v1.patch_namespaced_config_map(
        DEFAULT_CONFIGMAP, "gpu-operator", {"data": {"config.yaml": "version: v1\n"}}
    )
    wait_until(
        lambda: (
            v1.read_namespaced_config_map(DEFAULT_CONFIGMAP, "gpu-operator").data
            == {"config.yaml": stock_config_text()}
        )
    )
    v1.delete_namespaced_config_map(DEFAULT_CONFIGMAP, "gpu-operator")
    wait_until(lambda: _exists(v1, DEFAULT_CONFIGMAP))


def test_custom_config_named_default_not_created() -> None:
    fleet = {"nodes": [A100], "gpuOperator": {"migConfigName": "portal-mig"}}
    with SimCluster.from_fleet(fleet) as s, make_api(s) as a:
        core = client.CoreV1Api(a)
        assert not _exists(core, DEFAULT_CONFIGMAP)
        crd = client.CustomObjectsApi(a)
        # the ClusterPolicy no longer names a custom config: the operator creates the default
        body = {"spec": {"migManager": {"config": {"name": None}}}}
        crd.patch_cluster_custom_object(*CP, "cluster-policy", body)
        wait_until(lambda: _exists(core, DEFAULT_CONFIGMAP))


def test_fleet_without_operator() -> None:
    with SimCluster.from_fleet({"nodes": [A100], "gpuOperator": False}) as s, make_api(s) as a:
        assert client.CustomObjectsApi(a).list_cluster_custom_object(*CP)["items"] == []


def test_portal_reads_but_cannot_change_the_policy(tmp_path: Path) -> None:
    """deploy/kubernetes/rbac.yaml grants list on clusterpolicies, nothing more."""
    sim = kubesim.start({"nodes": [A100]}, tmp_path)
    try:
        from kubernetes import config

        portal = client.CustomObjectsApi(
            config.new_client_from_config(config_file=str(sim.kubeconfig_path))
        )
        assert len(portal.list_cluster_custom_object(*CP)["items"]) == 1
        with pytest.raises(ApiException) as ei:
            portal.patch_cluster_custom_object(*CP, "cluster-policy", {"spec": {"mig": {}}})
        assert ei.value.status == 403
        assert 'cannot patch resource \\"clusterpolicies\\" in API group \\"nvidia.com\\"' in (
            ei.value.body
        )
    finally:
        sim.stop()


def test_kubectl_get_and_apply(kubectl: Kubectl) -> None:
    out = kubectl("get", "clusterpolicies").stdout
    assert out.split("\n")[0].split() == ["NAME", "STATUS", "AGE"]
    assert out.split("\n")[1].split()[:2] == ["cluster-policy", "ready"]
    manifest = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            **{k: {} for k in ("daemonsets", "dcgm", "dcgmExporter", "devicePlugin", "driver")},
            **{k: {} for k in ("gfd", "nodeStatusExporter", "operator", "toolkit")},
            "mig": {"strategy": "mixed"},
            "migManager": {"enabled": True, "config": {"name": "custom-mig-config"}},
        },
    }
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(manifest))
    got = json.loads(kubectl("get", "clusterpolicy", "cluster-policy", "-o", "json").stdout)
    assert got["spec"]["migManager"]["config"] == {
        "default": "all-disabled",
        "name": "custom-mig-config",
    }
    manifest["spec"]["mig"] = {"strategy": "single"}  # client-side apply: a merge patch
    kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    got = json.loads(kubectl("get", "clusterpolicy", "cluster-policy", "-o", "json").stdout)
    assert got["spec"]["mig"] == {"strategy": "single"}


def test_sim_clock_endpoint_is_the_admins(sim: SimCluster) -> None:
    def post(body: Any, token: str | None) -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(
            sim.url + "/_sim/clock", data=json.dumps(body).encode(), headers=headers
        )
        try:
            with urllib.request.urlopen(req) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    before = sim.clock.now()
    assert post({"advance_s": 90}, None)[0] == 403
    assert post({"advance_s": -1}, sim.token)[0] == 400
    assert post({"advance_s": "60"}, sim.token)[0] == 400
    code, body = post({"advance_s": 90}, sim.token)
    assert code == 200 and body["offset_s"] == 90
    assert sim.clock.now() - before >= 90


def _exists(v1: client.CoreV1Api, name: str) -> bool:
    try:
        v1.read_namespaced_config_map(name, "gpu-operator")
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True
