"""Validation of ResourceQuota, ConfigMap, Secret, Namespace, Node, PodDisruptionBudget,
PriorityClass, Service, Event and LimitRange, as the v1.32 API server.

Follows ``pkg/apis/core/validation/validation.go`` (ValidateResourceQuota[Update],
validateResourceQuotaScopes, validateScopedResourceSelectorRequirement,
ValidateResourceQuantityValue, ValidateConfigMap[Update], ValidateSecret[Update],
ValidateNamespace, ValidateNode[Update], validateNodeTaints, ValidateService,
ValidateLimitRange), ``pkg/apis/core/helper/helpers.go`` (IsStandardQuotaResourceName,
IsResourceQuotaScopeValidForResource, IsIntegerResourceName),
``pkg/apis/core/validation/events.go``, ``pkg/apis/policy/validation/validation.go``,
``pkg/apis/apps/validation/validation.go`` (int-or-percent) and
``pkg/apis/scheduling/validation/validation.go``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from .helpers import Kubectl, causes, quota


def fail(call: Any, *args: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as ei:
        call(*args)
    assert ei.value.status == 422, ei.value.body
    return json.loads(ei.value.body)


def test_quota_resource_names_and_values(v1: client.CoreV1Api) -> None:
    hard = {
        "requests.nvidia.com/gpu": "1.5",  # not an integer resource: accepted
        "count/pods": "1.5",  # extended-style name: must be whole
        "pods": "-1",
        "gpu": "1",
    }
    body = fail(v1.create_namespaced_resource_quota, "robotics", quota("q", hard))
    got = causes(body)
    assert got[0][0] == "spec.hard[count/pods]" and got[0][1].endswith(": must be an integer")
    assert got[0][1].startswith('Invalid value: "1500m"')  # the referee: quota-count-fraction
    assert got[1:] == [
        ("spec.hard[pods]", 'Invalid value: "-1": must be greater than or equal to 0'),
        (
            "spec.hard[gpu]",
            'Invalid value: "gpu": must be a standard resource type or fully qualified',
        ),
        ("spec.hard[gpu]", 'Invalid value: "gpu": must be a standard resource for quota'),
    ]
    portal = {"requests.nvidia.com/gpu": "8", "requests.nvidia.com/mig-1g.10gb": "14"}
    made = v1.create_namespaced_resource_quota("robotics", quota("q", portal))
    assert made.spec.hard == portal


def test_quota_scopes(v1: client.CoreV1Api) -> None:
    body = fail(
        v1.create_namespaced_resource_quota,
        "robotics",
        quota(
            "q", {"requests.cpu": "1", "pods": "2"}, scopes=["BestEffort", "NotBestEffort", "Gold"]
        ),
    )
    scopes = '["BestEffort","NotBestEffort","Gold"]'  # JSON (the referee: quota-scopes-three)
    assert causes(body) == [
        ("spec.scopes", f"Invalid value: {scopes}: unsupported scope applied to resource"),
        ("spec.scopes", f"Invalid value: {scopes}: unsupported scope"),
        ("spec.scopes", f"Invalid value: {scopes}: conflicting scopes"),
    ]
    # Only standard quota names are checked against scopes: extended ones are not.
    ok = quota("q", {"requests.nvidia.com/gpu": "4"}, scopes=["BestEffort"])
    assert v1.create_namespaced_resource_quota("robotics", ok).spec.scopes == ["BestEffort"]
    with pytest.raises(ApiException) as ei:
        v1.patch_namespaced_resource_quota(
            "q", "robotics", {"spec": {"scopes": ["NotTerminating"]}}
        )
    assert causes(json.loads(ei.value.body)) == [
        (
            "spec.scopes",
            'Invalid value: ["NotTerminating"]: field is immutable',
        )
    ]


def test_quota_scope_selector(v1: client.CoreV1Api) -> None:
    exprs = [
        {"scopeName": "PriorityClass", "operator": "In"},
        {"scopeName": "BestEffort", "operator": "In", "values": ["x"]},
        {"scopeName": "PriorityClass", "operator": "Exists", "values": ["high"]},
    ]
    body = fail(
        v1.create_namespaced_resource_quota,
        "robotics",
        quota("q", {"requests.nvidia.com/gpu": "4"}, scopeSelector={"matchExpressions": exprs}),
    )
    mp = "spec.scopeSelector.matchExpressions"
    assert causes(body) == [
        (
            f"{mp}.values",
            "Required value: must be at least one value when `operator` is 'In' or 'NotIn' for "
            "scope selector",
        ),
        (
            f"{mp}.operator",
            "Invalid value: \"In\": must be 'Exists' when scope is any of "
            "ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, "
            "ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or "
            "ResourceQuotaScopeCrossNamespacePodAffinity",
        ),
        (
            f"{mp}.values",
            "Invalid value: [\"high\"]: must be no value when `operator` is 'Exist' or "
            "'DoesNotExist' for scope selector",
        ),
    ]


def test_configmap_and_secret(v1: client.CoreV1Api) -> None:
    cm = {
        "metadata": {"name": "cm"},
        "data": {"a b": "1", "dup": "x", "big": "x" * (1024 * 1024)},
        "binaryData": {"dup": "eA=="},
    }
    got = causes(fail(v1.create_namespaced_config_map, "robotics", cm))
    assert [f for f, _ in got] == ["data[a b]", "data[dup]", "[]"]
    assert got[1][1] == 'Invalid value: "dup": duplicate of key present in binaryData'
    assert got[2][1] == "Too long: may not be more than 1048576 bytes"
    immutable = {"metadata": {"name": "frozen"}, "data": {"k": "v"}, "immutable": True}
    v1.create_namespaced_config_map("robotics", immutable)
    body = fail(v1.patch_namespaced_config_map, "frozen", "robotics", {"data": {"k": "w"}})
    assert causes(body) == [("data", "Forbidden: field is immutable when `immutable` is set")]
    sec = v1.create_namespaced_secret(
        "robotics", {"metadata": {"name": "s"}, "stringData": {"token": "abc"}}
    )
    assert sec.data == {"token": "YWJj"} and sec.type == "Opaque" and sec.string_data is None
    body = fail(v1.patch_namespaced_secret, "s", "robotics", {"type": "kubernetes.io/tls"})
    assert causes(body) == [
        ("type", 'Invalid value: "kubernetes.io/tls": field is immutable'),
        ("data[tls.crt]", "Required value"),
        ("data[tls.key]", "Required value"),
    ]


def test_namespace_and_node(v1: client.CoreV1Api) -> None:
    body = fail(
        v1.create_namespace, {"metadata": {"name": "ns1"}, "spec": {"finalizers": ["custom"]}}
    )
    assert causes(body) == [
        (
            "spec.finalizers",
            'Invalid value: "custom": name is neither a standard finalizer name nor is it fully '
            "qualified",
        )
    ]
    taints = [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "x"},
        {"key": "k", "effect": "Sometimes"},
    ]
    body = fail(v1.patch_node, "a100-00", {"spec": {"taints": taints}})
    taint_errors = [
        (
            "metadata.taints[1]",  # sic: ValidateNodeUpdate builds it from "metadata"
            'Duplicate value: {"Key":"nvidia.com/gpu","Value":"x","Effect":"NoSchedule",'
            '"TimeAdded":null}: taints must be unique by key and effect pair',
        ),
        (
            "metadata.taints[2].effect",
            'Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", '
            '"NoExecute"',
        ),
    ]
    # an update runs ValidateNode and ValidateNodeUpdate: each reports the taints (the
    # referee's node-taints-update)
    assert causes(body) == taint_errors * 2
    body = fail(v1.patch_node, "a100-00", {"spec": {"providerID": "aws:///i-1"}})
    assert causes(body) == [
        (
            "spec.providerID",
            'Forbidden: node updates may not change providerID except from "" to valid',
        )
    ]
    body = fail(v1.patch_node_status, "a100-00", {"status": {"capacity": {"nvidia.com/gpu": "-1"}}})
    assert causes(body) == [
        (
            "status.capacity.nvidia.com/gpu",
            'Invalid value: "-1": must be greater than or equal to 0',
        )
    ]
    labels = {"nvidia.com/mig.config": "all-1g.10gb", "portal.example/gpu-type": "a100-80gb"}
    node = v1.patch_node(
        "a100-00", {"metadata": {"labels": labels}, "spec": {"unschedulable": True}}
    )
    assert (
        node.spec.unschedulable and node.metadata.labels["portal.example/gpu-type"] == "a100-80gb"
    )


def test_pod_disruption_budget(api: client.ApiClient) -> None:
    policy = client.PolicyV1Api(api)
    spec = {
        "minAvailable": "50x",
        "maxUnavailable": "150%",
        "selector": {"matchLabels": {"a": "b"}},
    }
    body = fail(
        policy.create_namespaced_pod_disruption_budget,
        "robotics",
        {"metadata": {"name": "pdb"}, "spec": spec},
    )
    assert body["message"].startswith('PodDisruptionBudget.policy "pdb" is invalid: [spec: ')
    assert causes(body) == [
        (
            "spec",
            # the internal struct as JSON (the referee: pdb-three-errors)
            'Invalid value: {"MinAvailable":"50x","Selector":{"matchLabels":{"a":"b"}},'
            '"MaxUnavailable":"150%","UnhealthyPodEvictionPolicy":null}: minAvailable and '
            "maxUnavailable cannot be both set",
        ),
        (
            "spec.minAvailable",
            'Invalid value: "50x": a valid percent '
            "string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', "
            "regex used for validation is '[0-9]+%')",
        ),
        (
            "spec.maxUnavailable",
            'Invalid value: "150%": must not be greater than 100%',
        ),
    ]


def test_priority_class(api: client.ApiClient) -> None:
    sched = client.SchedulingV1Api(api)
    body = fail(sched.create_priority_class, {"metadata": {"name": "huge"}, "value": 2_000_000_000})
    assert body["message"] == (
        'PriorityClass.scheduling.k8s.io "huge" is invalid: value: Forbidden: maximum allowed '
        "value of a user defined priority is 1000000000"
    )
    body = fail(sched.create_priority_class, {"metadata": {"name": "system-mine"}, "value": 1})
    assert causes(body) == [
        (
            "metadata.name",
            "Forbidden: priority class names with 'system-' prefix are reserved for system use "
            "only. error: system-mine is not a known system priority class",
        )
    ]
    sched.create_priority_class({"metadata": {"name": "gold"}, "value": 1000})
    body = fail(sched.patch_priority_class, "gold", {"value": 2000})
    assert causes(body) == [("value", "Forbidden: may not be changed in an update.")]


def test_service_event_limitrange(v1: client.CoreV1Api) -> None:
    body = fail(v1.create_namespaced_service, "robotics", {"metadata": {"name": "svc"}, "spec": {}})
    assert causes(body) == [("spec.ports", "Required value")]
    ports = [{"port": 80}, {"port": 0, "name": "b", "protocol": "HTTP"}]
    body = fail(
        v1.create_namespaced_service,
        "robotics",
        {"metadata": {"name": "svc"}, "spec": {"ports": ports}},
    )
    assert causes(body) == [
        ("spec.ports[0].name", "Required value"),
        ("spec.ports[1].port", "Invalid value: 0: must be between 1 and 65535, inclusive"),
        (
            "spec.ports[1].protocol",
            'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"',
        ),
    ]
    event = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "genomics"},
    }
    body = fail(v1.create_namespaced_event, "robotics", event)
    assert causes(body) == [
        ("involvedObject.namespace", 'Invalid value: "genomics": does not match event.namespace')
    ]
    limits = [{"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}}]
    body = fail(
        v1.create_namespaced_limit_range,
        "robotics",
        {"metadata": {"name": "lr"}, "spec": {"limits": limits}},
    )
    ((field, message),) = causes(body)
    assert field == "spec.limits[0].min[cpu]"
    assert message.endswith("min value 2 is greater than max value 1")


def test_kubectl_apply_shows_all_quota_errors(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "quota.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: gpu, namespace: robotics}\n"
        "spec:\n  hard: {requests.nvidia.com/gpu: '4', pods: '-1', gpu: '1'}\n"
    )
    run = kubectl("apply", "-f", str(manifest), ok=False)
    assert run.returncode == 1
    # kubectl lists several causes one per line (cmdutil.MultilineError).
    assert run.stderr.strip().splitlines() == [
        'The ResourceQuota "gpu" is invalid: ',
        '* spec.hard[gpu]: Invalid value: "gpu": must be a standard resource type or fully '
        "qualified",
        '* spec.hard[gpu]: Invalid value: "gpu": must be a standard resource for quota',
        '* spec.hard[pods]: Invalid value: "-1": must be greater than or equal to 0',
    ]
