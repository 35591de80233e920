"""Pod validation as the v1.32 API server: create, spec immutability, status updates.

Follows ``pkg/apis/core/validation/validation.go`` (ValidatePodCreate, ValidatePodSpec,
validateContainers, validateInitContainers, validateResourceRequirements,
validateContainerResourceName, ValidateResourceQuantityValue, ValidateTolerations,
ValidatePodUpdate, ValidatePodStatusUpdate), ``pkg/apis/core/helper/helpers.go`` (which
resources are extended, integer, overcommitable) and ``pkg/registry/core/pod/strategy.go``
(which validations run, the name warning of WarningsOnCreate), and for kubectl's rendering
``staging/src/k8s.io/kubectl/pkg/cmd/util/helpers.go`` (StandardErrorMessage).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import Kubectl, causes

UPDATABLE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
    "to 1 if it was previously negative)\n"
)
# a Quantity bad value is json.Marshal'ed since apimachinery v0.36 (the referee's
# pod-mig-fraction, pod-gpu-fraction)
NOT_INTEGER = 'Invalid value: "500m": must be an integer'


def pod(name: str, res: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    default = [
        {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "resources": res or {}}
    ]
    containers = spec.pop("containers", default)
    return {"metadata": {"name": name}, "spec": {"containers": containers, **spec}}


def refused(v1: client.CoreV1Api, body: dict[str, Any], ns: str = "robotics") -> dict[str, Any]:
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod(ns, body)
    assert ei.value.status == 422
    out = json.loads(ei.value.body)
    assert out["reason"] == "Invalid" and out["details"]["kind"] == "Pod"
    return out


def test_extended_resources(v1: client.CoreV1Api) -> None:
    body = refused(v1, pod("a", {"requests": {"nvidia.com/gpu": "1"}}))
    assert body["message"] == (
        'Pod "a" is invalid: spec.containers[0].resources.limits: Required value: Limit must be '
        "set for non overcommitable resources"
    )
    body = refused(
        v1, pod("b", {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 1}})
    )
    assert causes(body) == [
        (
            "spec.containers[0].resources.requests",
            'Invalid value: "2": must be equal to nvidia.com/gpu limit of 1',
        )
    ]
    body = refused(v1, pod("c", {"limits": {"nvidia.com/mig-1g.10gb": "0.5"}}))
    assert causes(body) == [  # the limit, and the request defaulted from it
        ("spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb]", NOT_INTEGER),
        ("spec.containers[0].resources.requests[nvidia.com/mig-1g.10gb]", NOT_INTEGER),
    ]
    ok = v1.create_namespaced_pod("robotics", pod("d", {"limits": {"nvidia.com/gpu": "1"}}))
    assert ok.spec.containers[0].resources.requests == {"nvidia.com/gpu": "1"}


def test_resource_names_and_values(v1: client.CoreV1Api) -> None:
    res = {
        "limits": {"cpu": "1", "requests.nvidia.com/gpu": "1", "hugepages-2Mi": "3Mi"},
        "requests": {"cpu": "2", "requests.cpu": "1", "memory": "-1"},
    }
    assert causes(refused(v1, pod("r", res))) == [
        (
            "spec.containers[0].resources.limits[requests.nvidia.com/gpu]",
            'Invalid value: "requests.nvidia.com/gpu": doesn\'t follow extended resource name '
            "standard",
        ),
        (
            "spec.containers[0].resources.limits[hugepages-2Mi]",
            'Invalid value: "3Mi": 3Mi is not positive integer multiple of hugepages-2Mi',
        ),
        (
            "spec.containers[0].resources.requests",
            'Invalid value: "2": must be less than or equal to cpu limit of 1',
        ),
        (
            "spec.containers[0].resources.requests[requests.cpu]",
            'Invalid value: "requests.cpu": must be a standard resource for containers',
        ),
        (
            "spec.containers[0].resources.requests[memory]",
            'Invalid value: "-1": must be greater than or equal to 0',
        ),
        (
            "spec.containers[0].resources.requests[requests.nvidia.com/gpu]",
            'Invalid value: "requests.nvidia.com/gpu": doesn\'t follow extended resource name '
            "standard",
        ),
        (
            "spec.containers[0].resources.requests[hugepages-2Mi]",
            'Invalid value: "3Mi": 3Mi is not positive integer multiple of hugepages-2Mi',
        ),
    ]


def test_containers_and_spec_enums(v1: client.CoreV1Api) -> None:
    body = refused(v1, pod("empty", containers=[]))
    assert body["message"] == 'Pod "empty" is invalid: spec.containers: Required value'
    containers = [
        {"name": "Main", "image": "", "imagePullPolicy": "Sometimes", "restartPolicy": "Always"},
        {"name": "dup", "image": "i"},
        {"name": "dup", "image": " i"},
    ]
    init = [{"name": "dup", "image": "i", "restartPolicy": "OnFailure"}]
    spec = {"initContainers": init, "restartPolicy": "Sometimes", "dnsPolicy": "Nope"}
    got = causes(refused(v1, pod("multi", containers=containers, **spec)))
    assert got == [
        (
            "spec.containers[0].name",
            'Invalid value: "Main": a lowercase RFC 1123 label must consist of lower case '
            "alphanumeric characters or '-', and must start and end with an alphanumeric "
            "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ),
        ("spec.containers[0].image", "Required value"),
        (
            "spec.containers[0].imagePullPolicy",
            'Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"',
        ),
        ("spec.containers[0].restartPolicy", "Forbidden: may not be set for non-init containers"),
        ("spec.containers[2].name", 'Duplicate value: "dup"'),
        (
            "spec.initContainers[0].restartPolicy",
            'Unsupported value: "OnFailure": supported values: "Always"',
        ),
        ("spec.initContainers[0].name", 'Duplicate value: "dup"'),
        (
            "spec.restartPolicy",
            'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
        ),
        (
            "spec.dnsPolicy",
            'Unsupported value: "Nope": supported values: "ClusterFirstWithHostNet", '
            '"ClusterFirst", "Default", "None"',
        ),
        (
            "spec.containers[2].image",
            'Invalid value: " i": must not have leading or trailing whitespace',
        ),
    ]


def test_tolerations_and_node_name(v1: client.CoreV1Api) -> None:
    tols = [
        {"key": "nvidia.com/gpu", "operator": "Present"},
        {"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
        {"operator": "Equal", "value": "x"},
    ]
    got = causes(refused(v1, pod("t", tolerations=tols, nodeName="Bad_Node")))
    assert [f for f, _ in got] == [
        "spec.nodeName",
        "spec.tolerations[0].operator",
        "spec.tolerations[1].effect",
        "spec.tolerations[2].operator",
    ]
    assert got[1][1] == 'Unsupported value: "Present": supported values: "Equal", "Exists"'
    assert got[2][1] == (
        "Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set"
    )
    assert got[3][1] == (
        'Invalid value: "Equal": operator must be Exists when `key` is empty, which means '
        '"match all values and all keys"'
    )


def test_spec_is_immutable_after_creation(v1: client.CoreV1Api) -> None:
    tol = {"key": "a", "operator": "Exists", "effect": "NoSchedule"}
    v1.create_namespaced_pod("robotics", pod("imm", {"limits": {"cpu": "1"}}, tolerations=[tol]))
    image = {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}}
    assert (
        v1.patch_namespaced_pod("imm", "robotics", image).spec.containers[0].image == "python:3.12"
    )
    more = {"spec": {"tolerations": [tol, {"key": "b", "operator": "Exists"}]}}
    assert len(v1.patch_namespaced_pod("imm", "robotics", more).spec.tolerations) == 2
    for patch, field, start in (
        ({"spec": {"nodeName": "v100-00"}}, "spec", "Forbidden: " + UPDATABLE),
        (
            {"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "2"}}}]}},
            "spec",
            "Forbidden: " + UPDATABLE,
        ),
        (
            {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}},
            "spec.tolerations",
            "Forbidden: existing toleration can not be modified except its tolerationSeconds",
        ),
        (
            {"spec": {"containers": [{"name": "side", "image": "x"}]}},
            "spec.containers",
            "Forbidden: pod updates may not add or remove containers",
        ),
    ):
        with pytest.raises(ApiException) as ei:
            v1.patch_namespaced_pod("imm", "robotics", patch)
        assert ei.value.status == 422
        (got_field, got_msg), *_ = causes(json.loads(ei.value.body))
        assert got_field == field and got_msg.startswith(start)
    with pytest.raises(ApiException) as ei:
        v1.patch_namespaced_pod("imm", "robotics", {"spec": {"nodeName": "v100-00"}})
    message = json.loads(ei.value.body)["message"]
    assert message.startswith('Pod "imm" is invalid: spec: Forbidden: ' + UPDATABLE)
    assert '+ \tNodeName: "v100-00",' in message  # the spec diff that follows
    v1.patch_namespaced_pod("imm", "robotics", {"spec": {"activeDeadlineSeconds": 60}})
    with pytest.raises(ApiException) as ei:
        v1.patch_namespaced_pod("imm", "robotics", {"spec": {"activeDeadlineSeconds": 120}})
    assert causes(json.loads(ei.value.body)) == [
        (
            "spec.activeDeadlineSeconds",
            "Invalid value: 120: must be less than or equal to previous value",
        )
    ]


def test_status_updates(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("robotics", pod("st", {"limits": {"cpu": "1"}}, nodeName="v100-00"))
    out = v1.patch_namespaced_pod_status("st", "robotics", {"status": {"phase": "Failed"}})
    assert out.status.phase == "Failed" and out.status.qos_class == "Burstable"
    bad = {
        "status": {"qosClass": "BestEffort", "conditions": [{"type": "bad type", "status": "True"}]}
    }
    with pytest.raises(ApiException) as ei:
        v1.patch_namespaced_pod_status("st", "robotics", bad)
    assert [f for f, _ in causes(json.loads(ei.value.body))] == [
        "metadata.conditions[0].Type",  # sic: the real code builds it from "metadata"
        "status.qosClass",
    ]


def test_warning_for_pod_name_with_dots(sim: SimCluster, v1: client.CoreV1Api) -> None:
    _, _, headers = v1.create_namespaced_pod_with_http_info("robotics", pod("job.v1"))
    assert headers["Warning"] == (
        "299 - \"metadata.name: this is used in the Pod's hostname, which can result in "
        'surprising behavior; a DNS label is recommended: [must not contain dots]"'
    )


def test_kubectl_prints_the_real_message(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: gpu, namespace: robotics}\n"
        "spec:\n  containers:\n  - name: main\n    image: x\n    resources:\n"
        "      requests: {nvidia.com/gpu: 2}\n      limits: {nvidia.com/gpu: 1}\n"
    )
    run = kubectl("create", "-f", str(manifest), ok=False)
    assert run.returncode == 1
    assert run.stderr.strip() == (
        'The Pod "gpu" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
        "must be equal to nvidia.com/gpu limit of 1"
    )
