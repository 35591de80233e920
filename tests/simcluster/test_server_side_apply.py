"""Server-side apply and managedFields as the v1.32 field manager keeps them.

Real sources followed (kubernetes/kubernetes, v1.32):
``staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/`` (``structuredmerge.go``,
``managedfieldsupdater.go``, ``stripmeta.go``, ``capmanagers.go``, ``managedfields.go``,
``conflict.go``), sigs.k8s.io/structured-merge-diff v4 (``merge/update.go``,
``typed/tofieldset.go``, ``typed/compare.go``, ``fieldpath/serialize.go``),
``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go``
ValidatePatchOptions, and the Server-Side Apply documentation (merge strategy per
``+listType``/``+mapType``, "an empty map keeps other managers' keys").
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import Kubectl

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def cm(
    labels: dict[str, str] | None = None, data: dict[str, str] | None = None, **meta: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default", **meta},
    }
    if labels is not None:
        body["metadata"]["labels"] = labels
    if data is not None:
        body["data"] = data
    return body


def apply_cm(v1: client.CoreV1Api, body: dict[str, Any], manager: str, **kw: Any) -> Any:
    return v1.patch_namespaced_config_map(
        "settings", "default", body, field_manager=manager, _content_type=APPLY, **kw
    )


def fields(obj: Any, manager: str, subresource: str | None = None) -> dict[str, Any]:
    for m in obj.metadata.managed_fields or []:
        if m.manager == manager and m.subresource == subresource:
            return m.fields_v1
    raise AssertionError(f"no managedFields entry for {manager}")


def error(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(exc.value.body)


def test_empty_map_keeps_other_managers_keys(v1: client.CoreV1Api) -> None:
    """The portal applies ``labels: {}`` (inventory/kube/base.py apply_resource_quota)."""
    apply_cm(v1, cm(labels={}, data={"a": "1"}), "portal")
    v1.patch_namespaced_config_map(
        "settings", "default", {"metadata": {"labels": {"team": "vision"}}},
        field_manager="kubectl-label", _content_type=MERGE,
    )  # fmt: skip
    out = apply_cm(v1, cm(labels={}, data={"a": "1"}), "portal", force=True)
    assert out.metadata.labels == {"team": "vision"}
    # the applier owns the map itself; the hand edit added the map (".") and its key
    assert fields(out, "portal")["f:metadata"] == {"f:labels": {}}
    assert fields(out, "kubectl-label")["f:metadata"] == {"f:labels": {".": {}, "f:team": {}}}


def test_portal_quota_apply_and_drift_revert(sim: SimCluster, v1: client.CoreV1Api) -> None:
    """inventory/kube/base.py apply_resource_quota: labels {}, spec.hard, force=True."""

    def portal_apply(gpus: str) -> Any:
        body = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu-quota", "namespace": "robotics", "labels": {}},
            "spec": {"hard": {"requests.nvidia.com/gpu": gpus}},
        }
        return v1.patch_namespaced_resource_quota(
            "gpu-quota", "robotics", body, field_manager="gpu-quota-portal", force=True,
            _content_type=APPLY,
        )  # fmt: skip

    portal_apply("4")
    # a hand edit: changes the GPU key, adds a label and a CPU key
    v1.patch_namespaced_resource_quota(
        "gpu-quota", "robotics",
        {"metadata": {"labels": {"owner": "ops"}},
         "spec": {"hard": {"requests.nvidia.com/gpu": "9", "requests.cpu": "8"}}},
        field_manager="kubectl-edit", _content_type=MERGE,
    )  # fmt: skip
    rq = portal_apply("4")  # the portal reverts its drifted key, leaves the rest
    assert rq.spec.hard == {"requests.nvidia.com/gpu": "4", "requests.cpu": "8"}
    assert rq.metadata.labels == {"owner": "ops"}
    assert fields(rq, "kubectl-edit")["f:spec"] == {"f:hard": {"f:requests.cpu": {}}}


def test_smaller_map_drops_only_own_keys(v1: client.CoreV1Api) -> None:
    apply_cm(v1, cm(labels={"a": "1", "b": "2"}), "portal")
    apply_cm(v1, cm(labels={"c": "3"}), "other")
    out = apply_cm(v1, cm(labels={"a": "1"}), "portal")  # b dropped
    assert out.metadata.labels == {"a": "1", "c": "3"}
    out = apply_cm(v1, cm(labels={}), "portal")
    assert out.metadata.labels == {"c": "3"}
    # a key another manager also owns survives when one of them drops it
    apply_cm(v1, cm(labels={"c": "3"}), "portal")
    out = apply_cm(v1, cm(), "other")
    assert out.metadata.labels == {"c": "3"}
    # an applier that owns nothing any more has no entry
    assert "other" not in [m.manager for m in out.metadata.managed_fields]


def test_update_managers_own_what_they_change(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_config_map(
        "default", cm(labels={"x": "1"}, data={"k": "v"}), field_manager="creator"
    )
    out = v1.patch_namespaced_config_map(
        "settings", "default", {"data": {"k": "w", "n": "1"}}, field_manager="editor",
        _content_type=MERGE,
    )  # fmt: skip
    # created maps carry "." (the map itself was added); keys moved to the editor
    assert fields(out, "creator") == {
        "f:data": {},  # owns the map, no key: a member without children
        "f:metadata": {"f:labels": {".": {}, "f:x": {}}},
    }
    assert fields(out, "editor") == {"f:data": {"f:k": {}, "f:n": {}}}
    out = v1.patch_namespaced_config_map(
        "settings", "default", {"data": {"n": None}}, field_manager="editor", _content_type=MERGE
    )
    assert fields(out, "editor") == {"f:data": {"f:k": {}}}  # removed fields are nobody's
    editors = [m for m in out.metadata.managed_fields if m.manager == "editor"]
    assert len(editors) == 1 and editors[0].operation == "Update" and editors[0].time


def test_conflict_messages(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_config_map(
        "default", cm(data={"a": "1", "b": "2"}), field_manager="kubectl-edit"
    )
    apply_cm(v1, cm(data={"c": "3"}), "other-applier")
    with pytest.raises(ApiException) as ei:
        apply_cm(v1, cm(data={"a": "9"}), "portal")
    st = error(ei)
    assert (ei.value.status, st["reason"]) == (409, "Conflict")
    assert st["message"] == (
        'Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.a'
    )
    assert st["details"] == {
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kubectl-edit" using v1',
                "field": ".data.a",
            }
        ]
    }
    with pytest.raises(ApiException) as ei:
        apply_cm(v1, cm(data={"a": "9", "b": "9", "c": "9"}), "portal")
    assert error(ei)["message"] == (
        "Apply failed with 3 conflicts: "
        'conflicts with "kubectl-edit" using v1:\n- .data.a\n- .data.b\n'
        'conflicts with "other-applier":\n- .data.c'
    )
    # the same value is no conflict: both own it
    out = apply_cm(v1, cm(data={"a": "1"}), "portal")
    assert "f:a" in fields(out, "portal")["f:data"]
    assert "f:a" in fields(out, "kubectl-edit")["f:data"]
    # force takes the fields
    out = apply_cm(v1, cm(data={"a": "9", "c": "9"}), "portal", force=True)
    assert fields(out, "kubectl-edit") == {"f:data": {".": {}, "f:b": {}}}
    # an applier left with nothing has no entry
    assert "other-applier" not in [m.manager for m in out.metadata.managed_fields]


def test_apply_patch_options_and_body_checks(sim: SimCluster, v1: client.CoreV1Api) -> None:
    v1.create_namespaced_config_map("default", cm(data={"a": "1"}))
    with pytest.raises(ApiException) as ei:
        v1.patch_namespaced_config_map(
            "settings", "default", {"data": {"a": "2"}}, force=True, _content_type=MERGE
        )
    assert (ei.value.status, error(ei)["message"]) == (
        422,
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for '
        "non-apply patch",
    )
    body = {**cm(data={"a": "2"}), "apiVersion": "v2"}
    with pytest.raises(ApiException) as ei:
        apply_cm(v1, body, "portal")
    assert (ei.value.status, error(ei)["message"]) == (  # the referee: apply-version-mismatch
        400,
        "invalid object type: /v2, Kind=ConfigMap",
    )
    body = cm(data={"a": "2"})
    body["metadata"]["managedFields"] = []
    with pytest.raises(ApiException) as ei:
        apply_cm(v1, body, "portal")
    assert (ei.value.status, error(ei)["message"]) == (400, "metadata.managedFields must be nil")


def test_status_writes_are_recorded_with_their_subresource(
    sim: SimCluster, v1: client.CoreV1Api
) -> None:
    sim.set_pod_phase("genomics", "variant-call", "Failed")  # patches /status as "kubelet"
    pod = v1.read_namespaced_pod("variant-call", "genomics")
    entry = next(m for m in pod.metadata.managed_fields if m.manager == "kubelet")
    assert (entry.operation, entry.subresource) == ("Update", "status")
    assert list(entry.fields_v1) == ["f:status"] and "f:phase" in entry.fields_v1["f:status"]
    # apply to /status: conditions merged by type, one per manager
    status = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-00"}}
    for who, kind in (("probe-a", "ProbeA"), ("probe-b", "ProbeB")):
        body = {**status, "status": {"conditions": [{"type": kind, "status": "True"}]}}
        node = v1.patch_node_status("cpu-00", body, field_manager=who, _content_type=APPLY)
    types = [c.type for c in node.status.conditions]
    assert "ProbeA" in types and "ProbeB" in types and "Ready" in types
    assert fields(node, "probe-b", "status") == {
        "f:status": {
            "f:conditions": {
                'k:{"type":"ProbeB"}': {".": {}, "f:status": {}, "f:type": {}},
            }
        }
    }
    # a status applier's field is not the main resource's: conflicts name the subresource
    body = {**status, "status": {"conditions": [{"type": "ProbeB", "status": "False"}]}}
    with pytest.raises(ApiException) as ei:
        v1.patch_node_status("cpu-00", body, field_manager="probe-a", _content_type=APPLY)
    assert error(ei)["message"] == (
        'Apply failed with 1 conflict: conflict with "probe-b" with subresource "status": '
        '.status.conditions[type="ProbeB"].status'
    )
    # dropping its condition prunes it
    body = {**status, "status": {"conditions": []}}
    node = v1.patch_node_status("cpu-00", body, field_manager="probe-a", _content_type=APPLY)
    assert "ProbeA" not in [c.type for c in node.status.conditions]
    # the main resource's applier owns no status
    body = {**status, "metadata": {"name": "cpu-00", "labels": {"rack": "r1"}}}
    node = v1.patch_node("cpu-00", body, field_manager="labeler", _content_type=APPLY)
    assert fields(node, "labeler") == {"f:metadata": {"f:labels": {"f:rack": {}}}}


def test_managed_fields_order_and_sets(v1: client.CoreV1Api) -> None:
    apply_cm(v1, cm(data={"a": "1"}, finalizers=["example.com/a"]), "zeta")
    apply_cm(v1, cm(finalizers=["example.com/b"]), "alpha")
    out = v1.patch_namespaced_config_map(
        "settings", "default", {"data": {"b": "2"}}, field_manager="editor", _content_type=MERGE
    )
    ops = [(m.operation, m.manager) for m in out.metadata.managed_fields]
    assert ops[-1] == ("Update", "editor") and {o for o, _ in ops[:2]} == {"Apply"}
    assert sorted(out.metadata.finalizers) == ["example.com/a", "example.com/b"]
    assert fields(out, "alpha")["f:metadata"] == {"f:finalizers": {'v:"example.com/b"': {}}}
    out = apply_cm(v1, cm(data={"a": "1"}), "zeta")  # drops its finalizer
    assert out.metadata.finalizers == ["example.com/b"]
    apply_cm(v1, cm(), "alpha")  # let the test's namespace go away cleanly


def test_update_managers_are_capped(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_config_map("default", cm(data={}), field_manager="m0")
    for i in range(12):
        out = v1.patch_namespaced_config_map(
            "settings", "default", {"data": {f"k{i}": "v"}}, field_manager=f"m{i}",
            _content_type=MERGE,
        )  # fmt: skip
    managers = [m.manager for m in out.metadata.managed_fields]
    assert len(managers) == 10 and "ancient-changes" in managers


def test_kubectl_apply_server_side_conflict(sim: SimCluster, kubectl: Kubectl) -> None:
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: default\n"
    kubectl("apply", "--server-side", "-f", "-", stdin=doc + "data:\n  key: one\n")
    r = kubectl(
        "apply", "--server-side", "--field-manager=other", "-f", "-",
        stdin=doc + "data:\n  key: two\n", ok=False,
    )  # fmt: skip
    assert r.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.key' in r.stderr
    kubectl(
        "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-",
        stdin=doc + "data:\n  key: two\n",
    )  # fmt: skip
    assert sim.get("configmaps", "ssa", "default")["data"] == {"key": "two"}
