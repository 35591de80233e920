"""Leftovers: quantities in server-side apply, PUT without a name, and watch routing.

Server-side apply: ``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go``
(``applyPatcher`` unmarshals the patch into an *Unstructured*) and
``staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/structuredmerge.go``
(``Apply``: ``ObjectToTyped(patchObj)`` of that unstructured object, so structured-merge-diff
compares the applied ``"1000m"`` with the live, canonical ``"1"`` as different strings; only
the merged result is converted into the Go type, which stores ``"1"``), and
``managedfields_updater.go`` (the applier's time moves whenever SMD saw a change, so such an
apply is written in a new second). PUT: ``handlers/update.go`` + ``handlers/rest.go``
(``checkName``, before the object is read). Watch: ``endpoints/request/requestinfo.go``,
``endpoints/handlers/get.go`` (``ListResource``: a named watch is a ``metadata.name``
selector) and ``apis/meta/v1/conversion.go`` (``Convert_Slice_string_To_bool``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

APPLY = "application/apply-patch+yaml"


def _apply(api: client.ApiClient, manager: str, cpu: Any, force: bool = False) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "namespace": "robotics"},
        "spec": {"hard": {"requests.cpu": cpu}},
    }
    resp = client.CoreV1Api(api).patch_namespaced_resource_quota(
        "q", "robotics", body, field_manager=manager, force=force or None,
        _content_type=APPLY, _preload_content=False,
    )  # fmt: skip
    return json.loads(resp.data)


def _spec_managers(obj: dict[str, Any]) -> list[str]:
    """The managers of the main resource (the quota controller owns ``status``)."""
    return sorted(
        m["manager"] for m in obj["metadata"]["managedFields"] if not m.get("subresource")
    )


def _conflict(err: ApiException) -> str:
    assert err.status == 409
    return json.loads(err.body)["message"]


def _next_second() -> None:
    time.sleep(1.05 - (time.time() % 1.0))  # managedFields times have one-second resolution


def _settled(sim: SimCluster, api: client.ApiClient) -> dict[str, Any]:
    """The quota after the quota controller has written its status."""
    assert sim.wait_for_controllers()
    resp = client.CoreV1Api(api).read_namespaced_resource_quota(
        "q", "robotics", _preload_content=False
    )
    return json.loads(resp.data)


def test_applied_quantities_are_compared_as_sent(sim: SimCluster, api: client.ApiClient) -> None:
    created = _apply(api, "a", "1000m")  # create-on-apply stores the canonical form
    assert created["spec"]["hard"]["requests.cpu"] == "1"
    created = _settled(sim, api)
    with pytest.raises(ApiException) as ei:  # another owner: "1000m" is not "1" to SMD
        _apply(api, "b", "1000m")
    assert _conflict(ei.value) == (
        'Apply failed with 1 conflict: conflict with "a": .spec.hard.requests.cpu'
    )
    with pytest.raises(ApiException) as ei:  # a JSON number is not the string "1" either
        _apply(api, "b", 1)
    assert "conflict with" in _conflict(ei.value)
    shared = _apply(api, "b", "1")  # the stored value: co-owned (a new managedFields entry)
    assert shared["spec"] == created["spec"]
    assert _spec_managers(shared) == ["a", "b"]
    forced = _apply(api, "c", "2000m", force=True)
    assert forced["spec"]["hard"]["requests.cpu"] == "2"
    assert _spec_managers(forced) == ["c"]


def test_reapplying_a_non_canonical_quantity_writes_again(
    sim: SimCluster, api: client.ApiClient
) -> None:
    _apply(api, "a", "1000m")
    first = _settled(sim, api)
    _next_second()
    same = _apply(api, "a", "1")  # what is stored: SMD sees no change, no write
    assert same["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    again = _apply(api, "a", "1000m")  # SMD sees "1" -> "1000m": the applier's time moves
    assert again["spec"]["hard"]["requests.cpu"] == "1"
    assert int(again["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])

    def applier(obj: dict[str, Any]) -> dict[str, Any]:
        return next(m for m in obj["metadata"]["managedFields"] if m["manager"] == "a")

    assert applier(again)["time"] > applier(first)["time"]


def test_put_needs_the_name_of_the_url(v1: client.CoreV1Api) -> None:
    cm = v1.read_namespaced_config_map("gpu-quota-portal-mig-config", "gpu-operator")
    cm.metadata.name = None
    with pytest.raises(ApiException) as ei:
        v1.replace_namespaced_config_map("gpu-quota-portal-mig-config", "gpu-operator", cm)
    assert ei.value.status == 400
    status = json.loads(ei.value.body)
    assert (status["reason"], status["message"]) == (
        "BadRequest",
        "the name of the object () does not match the name on the URL "
        "(gpu-quota-portal-mig-config)",
    )
    with pytest.raises(ApiException) as ei:  # checked before the object is looked up
        v1.replace_namespaced_config_map("missing", "gpu-operator", {"metadata": {}})
    assert ei.value.status == 400
    body = {"metadata": {"name": "missing", "namespace": "robotics"}}
    with pytest.raises(ApiException) as ei:
        v1.replace_namespaced_config_map("missing", "gpu-operator", body)
    assert json.loads(ei.value.body)["message"] == (
        "the namespace of the provided object does not match the namespace sent on the request"
    )
    with pytest.raises(ApiException) as ei:  # a named object that does not exist: 404
        v1.replace_namespaced_config_map(
            "missing", "gpu-operator", {"metadata": {"name": "missing"}}
        )
    assert ei.value.status == 404


def _get(sim: SimCluster, path: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(
        sim.url + path, method=method, headers={"Authorization": f"Bearer {sim.token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _events(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        e = json.loads(line)
        out.append((e["type"], e["object"]["metadata"].get("name", "")))
    return out


@pytest.mark.parametrize("value", ["0", "false", "False", "FALSE"])
def test_watch_false_is_a_list(sim: SimCluster, value: str) -> None:
    code, text = _get(sim, f"/api/v1/namespaces/ml-vision/pods?watch={value}")
    assert code == 200 and json.loads(text)["kind"] == "PodList"


@pytest.mark.parametrize("value", ["", "1", "true", "yes"])
def test_any_other_watch_value_watches(sim: SimCluster, value: str) -> None:
    code, text = _get(sim, f"/api/v1/namespaces/genomics/pods?watch={value}&timeoutSeconds=1")
    assert code == 200
    assert {t for t, _ in _events(text)} == {"ADDED"}


def test_legacy_watch_paths(sim: SimCluster) -> None:
    code, text = _get(sim, "/api/v1/watch/namespaces/genomics/pods?timeoutSeconds=1")
    assert code == 200 and {n for _, n in _events(text)} == {
        p["metadata"]["name"] for p in sim.list("pods", "genomics")
    }
    code, text = _get(sim, "/api/v1/watch/namespaces/genomics/pods/alphafold-0?timeoutSeconds=1")
    assert code == 200 and _events(text) == [("ADDED", "alphafold-0")]
    code, text = _get(sim, "/api/v1/watch/nodes/a100-00?timeoutSeconds=1&watch=false")
    assert code == 200 and _events(text) == [("ADDED", "a100-00")]  # forced: still a watch
    path = "/api/v1/watch/namespaces/genomics/pods/alphafold-0?fieldSelector=metadata.name%3Dx"
    code, text = _get(sim, path)
    assert code == 400
    assert json.loads(text)["message"] == "fieldSelector metadata.name doesn't match requested name"
    same = "/api/v1/watch/namespaces/genomics/pods/alphafold-0?timeoutSeconds=1"
    code, text = _get(sim, same + "&fieldSelector=metadata.name%3Dalphafold-0")
    assert code == 200 and _events(text) == [("ADDED", "alphafold-0")]
    code, _ = _get(sim, "/api/v1/watch/namespaces/genomics/pods/alphafold-0/status")
    assert code == 404


def test_watch_query_on_an_item_is_a_get(sim: SimCluster) -> None:
    code, text = _get(sim, "/api/v1/namespaces/genomics/pods/alphafold-0?watch=true")
    assert code == 200
    assert json.loads(text)["metadata"]["name"] == "alphafold-0"  # GetResource ignores it
