"""Core API behaviour through the official kubernetes client."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import gone, gpu_pod, pod, wait_until

CPU = {"requests": {"cpu": "1"}}


def test_discovery(api: client.ApiClient) -> None:
    assert client.VersionApi(api).get_code().git_version.startswith("v1.32")
    core = client.CoreV1Api(api).get_api_resources()
    names = {r.name for r in core.resources}
    for n in (
        "nodes",
        "nodes/status",
        "pods",
        "pods/status",
        "pods/eviction",
        "resourcequotas",
        "resourcequotas/status",
        "namespaces",
        "configmaps",
    ):
        assert n in names
    groups = client.ApisApi(api).get_api_versions()
    assert "policy" in {g.name for g in groups.groups}
    pol = client.PolicyV1Api(api).get_api_resources()
    assert "poddisruptionbudgets" in {r.name for r in pol.resources}


def test_kubeconfig_and_gfd_labels(sim: SimCluster, tmp_path) -> None:
    kc = sim.write_kubeconfig(tmp_path / "kubeconfig")
    api = config.new_client_from_config(config_file=str(kc), context="simcluster")
    nodes = client.CoreV1Api(api).list_node().items
    by = {n.metadata.name: n for n in nodes}
    a100 = by["a100-00"].metadata.labels
    assert a100["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert a100["nvidia.com/gpu.count"] == "8"
    assert a100["nvidia.com/gpu.family"] == "ampere"
    assert a100["nvidia.com/mig.capable"] == "true"
    assert by["a100-00"].metadata.resource_version
    assert by["cpu-00"].metadata.labels.get("nvidia.com/gpu.product") is None
    api.close()


def test_pagination(v1: client.CoreV1Api) -> None:
    seen, token, pages = [], None, 0
    first_rv = None
    while True:
        resp = v1.list_node(limit=2, _continue=token)
        pages += 1
        first_rv = first_rv or resp.metadata.resource_version
        assert resp.metadata.resource_version == first_rv
        seen += [n.metadata.name for n in resp.items]
        token = resp.metadata._continue
        if not token:
            break
        assert resp.metadata.remaining_item_count == 13 - len(seen)
    assert len(seen) == 13 == len(set(seen))
    assert pages == 7
    assert seen == sorted(seen)


def test_raw_list_preload_false(v1: client.CoreV1Api) -> None:
    resp = v1.list_pod_for_all_namespaces(limit=5, _preload_content=False)
    data = json.loads(resp.data)
    assert data["kind"] == "PodList" and len(data["items"]) == 5
    assert data["metadata"]["continue"]


def test_expired_continue_fault(sim: SimCluster, v1: client.CoreV1Api) -> None:
    token = v1.list_node(limit=2).metadata._continue
    sim.faults.update(expire_continue=True)
    with pytest.raises(ApiException) as ei:
        v1.list_node(limit=2, _continue=token)
    assert ei.value.status == 410
    body = json.loads(ei.value.body)
    assert body["reason"] == "Expired"
    assert "too old to display a consistent list result" in body["message"]
    sim.faults.reset()
    assert v1.list_node(limit=2, _continue=token).items


def test_expired_continue_ttl(sim: SimCluster, v1: client.CoreV1Api) -> None:
    token = v1.list_node(limit=2).metadata._continue
    sim.continue_ttl = 0.0
    with pytest.raises(ApiException) as ei:
        v1.list_node(limit=2, _continue=token)
    assert ei.value.status == 410


def test_label_patches_and_cordon(v1: client.CoreV1Api) -> None:
    v1.patch_node("a100-00", {"metadata": {"labels": {"team": "vision"}}})  # strategic
    n = v1.patch_node(
        "a100-00",
        {"metadata": {"labels": {"pool": "train"}}},
        _content_type="application/merge-patch+json",
    )
    assert n.metadata.labels["team"] == "vision" and n.metadata.labels["pool"] == "train"
    n = v1.patch_node(
        "a100-00",
        {"metadata": {"labels": {"pool": None}}},
        _content_type="application/merge-patch+json",
    )
    assert "pool" not in n.metadata.labels
    n = v1.patch_node(
        "a100-00",
        [{"op": "add", "path": "/metadata/labels/x~1y", "value": "z"}],
        _content_type="application/json-patch+json",
    )
    assert n.metadata.labels["x/y"] == "z"
    n = v1.patch_node("a100-00", {"spec": {"unschedulable": True}})
    assert n.spec.unschedulable is True
    cordoned = v1.list_node(field_selector="spec.unschedulable=true").items
    assert [x.metadata.name for x in cordoned] == ["a100-00"]
    # capacity is not changed by a main-resource patch
    n = v1.patch_node("a100-00", {"status": {"allocatable": {"nvidia.com/gpu": "16"}}})
    assert n.status.allocatable["nvidia.com/gpu"] == "8"


def test_node_status_patch(v1: client.CoreV1Api) -> None:
    n = v1.patch_node_status("h100-00", {"status": {"allocatable": {"nvidia.com/gpu": "6"}}})
    assert n.status.allocatable["nvidia.com/gpu"] == "6"
    assert n.status.capacity["nvidia.com/gpu"] == "8"
    assert v1.read_node("h100-00").status.allocatable["nvidia.com/gpu"] == "6"


def test_stale_update_conflict(v1: client.CoreV1Api) -> None:
    n = v1.read_node("v100-00")
    n.metadata.labels["a"] = "1"
    v1.replace_node("v100-00", n)
    n.metadata.labels["a"] = "2"
    with pytest.raises(ApiException) as ei:
        v1.replace_node("v100-00", n)
    assert ei.value.status == 409
    assert json.loads(ei.value.body)["reason"] == "Conflict"


def test_create_existing_and_errors(v1: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as ei:
        v1.create_namespace({"metadata": {"name": "ml-vision"}})
    assert ei.value.status == 409
    assert json.loads(ei.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as ei:
        v1.read_node("nope")
    assert ei.value.status == 404
    assert json.loads(ei.value.body)["message"] == 'nodes "nope" not found'
    req = urllib.request.Request(
        v1.api_client.configuration.host + "/api/v1/nodes/a100-00",
        data=b"{}",
        method="PATCH",
        headers={
            "Content-Type": "text/plain",
            "Authorization": v1.api_client.configuration.api_key["authorization"],
        },
    )
    with pytest.raises(urllib.error.HTTPError) as he:
        urllib.request.urlopen(req)
    assert he.value.code == 415
    assert json.loads(he.value.read())["reason"] == "UnsupportedMediaType"
    with pytest.raises(ApiException) as ei:
        v1.create_namespace({"metadata": {"name": "Bad_Name"}})
    assert ei.value.status == 422


def test_pods_field_selectors(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("robotics", gpu_pod("p1", 1, node="v100-02"))
    v1.create_namespaced_pod("robotics", gpu_pod("p2", 1))
    on = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=v100-02").items
    assert [p.metadata.name for p in on] == ["p1"]
    assert on[0].status.phase == "Running"
    v1.patch_namespaced_pod_status("p1", "robotics", {"status": {"phase": "Succeeded"}})
    active = v1.list_namespaced_pod(
        "robotics", field_selector="status.phase!=Succeeded,metadata.namespace==robotics"
    ).items
    assert "p1" not in {p.metadata.name for p in active}
    assert "p2" in {p.metadata.name for p in active}
    pending = v1.list_pod_for_all_namespaces(field_selector="status.phase=Pending").items
    assert {"p2", "tokenizer-train"} <= {p.metadata.name for p in pending}
    sel = v1.list_pod_for_all_namespaces(label_selector="app in (llama,bert),app!=bert").items
    assert {p.metadata.name for p in sel} == {"llama-pretrain-0", "llama-pretrain-1"}
    with pytest.raises(ApiException) as ei:
        v1.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert ei.value.status == 400


def test_gpu_limit_required(v1: client.CoreV1Api) -> None:
    body = pod("nolimit", resources={"requests": {"nvidia.com/gpu": "1"}})
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("robotics", body)
    assert ei.value.status == 422


def test_eviction(sim: SimCluster, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("robotics", gpu_pod("victim", 1, node="v100-02"))
    ev = client.V1Eviction(metadata=client.V1ObjectMeta(name="victim", namespace="robotics"))
    v1.create_namespaced_pod_eviction("victim", "robotics", ev)
    # graceful: Terminating until the kubelet emulation has stopped it (pod_stop_s)
    assert v1.read_namespaced_pod("victim", "robotics").metadata.deletion_timestamp
    assert sim.wait_for_controllers()
    with pytest.raises(ApiException) as ei:
        v1.read_namespaced_pod("victim", "robotics")
    assert ei.value.status == 404


def test_eviction_pdb(api: client.ApiClient, v1: client.CoreV1Api) -> None:
    pol = client.PolicyV1Api(api)
    pol.create_namespaced_pod_disruption_budget(
        "robotics",
        {
            "metadata": {"name": "isaac"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "isaac"}}},
        },
    )
    ev = client.V1Eviction(metadata=client.V1ObjectMeta(name="sim-rl-0", namespace="robotics"))
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod_eviction("sim-rl-0", "robotics", ev)
    assert ei.value.status == 429


def test_configmap_crud_and_apply(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_config_map("genomics", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    cm = v1.patch_namespaced_config_map("c", "genomics", {"data": {"b": "2"}})
    assert cm.data == {"a": "1", "b": "2"}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"k": "v"}}
    cm = v1.patch_namespaced_config_map(
        "d",
        "genomics",
        body,
        field_manager="portal",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    assert cm.data == {"k": "v"}
    assert any(m.manager == "portal" and m.operation == "Apply" for m in cm.metadata.managed_fields)
    v1.delete_namespaced_config_map("d", "genomics")
    with pytest.raises(ApiException):
        v1.read_namespaced_config_map("d", "genomics")


def test_namespace_lifecycle(sim: SimCluster, v1: client.CoreV1Api) -> None:
    sim.namespace_controller.sync_s = 0.05  # the real controller waits 5 s
    v1.create_namespace({"metadata": {"name": "tmp-ns", "labels": {"a": "b"}}})
    ns = v1.read_namespace("tmp-ns")
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == "tmp-ns"
    v1.create_namespaced_pod("tmp-ns", pod("x", resources=CPU))
    v1.delete_namespace("tmp-ns")  # Terminating; the namespace controller empties it
    wait_until(lambda: gone(v1.read_namespace, "tmp-ns"))
    assert not v1.list_pod_for_all_namespaces(field_selector="metadata.namespace=tmp-ns").items
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("tmp-ns", pod("y", resources=CPU))
    assert ei.value.status == 404


def test_token_auth(tmp_path) -> None:
    with SimCluster.from_fleet({"nodes": [{"name": "n1"}]}, token="sekret") as s:
        cfg = client.Configuration()  # no token
        cfg.host = s.url
        with client.ApiClient(cfg) as a, pytest.raises(ApiException) as ei:
            client.CoreV1Api(a).list_node()
        assert ei.value.status == 401
        kc = s.write_kubeconfig(tmp_path / "kc")
        a = config.new_client_from_config(config_file=str(kc))
        assert [n.metadata.name for n in client.CoreV1Api(a).list_node().items] == ["n1"]
        a.close()
