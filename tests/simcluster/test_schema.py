"""Type schemas and ``fieldValidation`` (unknown, duplicate and mistyped fields).

Real sources followed (kubernetes/kubernetes, v1.32): ``staging/src/k8s.io/apiserver/pkg/
endpoints/handlers/create.go``, ``update.go``, ``patch.go`` and ``rest.go``
(``fieldValidation``, ``transformDecodeError``, ``addStrictDecodingWarnings``),
``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go``
(``ValidateCreateOptions``/``ValidatePatchOptions``), ``staging/src/k8s.io/apimachinery/pkg/
runtime/serializer/json/json.go`` with ``sigs.k8s.io/json`` strict decoding,
``staging/src/k8s.io/apimachinery/pkg/runtime/converter.go`` (strategic merge patch results),
``staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/structuredmerge.go`` (apply)
and the struct tags of ``staging/src/k8s.io/api/core/v1/types.go``.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster, schema
from simcluster.resources import RESOURCES


def _http(
    sim: SimCluster,
    method: str,
    path: str,
    body: bytes | str | None = None,
    ctype: str = "application/json",
    headers: dict[str, str] | None = None,
) -> tuple[int, http.client.HTTPMessage, Any]:
    """A raw request (the official client cannot send duplicate keys or read warnings)."""
    u = urlsplit(sim.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    hdrs = {"Authorization": f"Bearer {sim.token}", "Content-Type": ctype, **(headers or {})}
    data = body.encode() if isinstance(body, str) else body
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw
    return resp.status, resp.headers, parsed


_POD = (
    '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},'
    '"spec":{"containers":[{"name":"c","image":"busybox"%s}]%s}}'
)


def _pod(name: str, container_extra: str = "", spec_extra: str = "") -> str:
    return _POD % (name, container_extra, spec_extra)


PODS = "/api/v1/namespaces/robotics/pods"


def test_every_served_kind_has_a_schema() -> None:
    for rt in RESOURCES:
        d = schema.for_kind(rt.group, rt.version, rt.kind)
        assert d is not None, rt.kind
        assert {"apiVersion", "kind", "metadata"} <= set(d.fields), rt.kind


def test_patch_metadata_comes_from_the_go_types() -> None:
    spec = schema.definition("io.k8s.api.core.v1.PodSpec").fields
    assert spec["containers"].patch_strategy == ("merge",)
    assert spec["containers"].merge_key == "name"
    assert spec["containers"].list_keys == ("name",)
    assert spec["tolerations"].patch_strategy == ()  # atomic, replaced as a whole
    assert spec["volumes"].patch_strategy == ("merge", "retainKeys")
    assert spec["terminationGracePeriodSeconds"].go == "int64"
    node = schema.definition("io.k8s.api.core.v1.NodeSpec").fields
    assert node["taints"].patch_strategy == () and node["taints"].list_type == "atomic"
    meta = schema.definition("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta").fields
    assert meta["finalizers"].patch_strategy == ("merge",) and meta["finalizers"].list_type == "set"
    limits = schema.definition("io.k8s.api.core.v1.ResourceRequirements").fields["limits"]
    assert limits.type.item.name == "quantity" and limits.go == "v1.ResourceList"
    pdb = schema.definition("io.k8s.api.policy.v1.PodDisruptionBudgetSpec").fields
    assert pdb["minAvailable"].type.name == "intstr"
    assert pdb["selector"].patch_strategy == ("replace",)


def test_fields_newer_than_1_32_are_unknown() -> None:
    # the installed client is newer; a 1.32 server does not know PodSpec.hostnameOverride
    assert "hostnameOverride" not in schema.definition("io.k8s.api.core.v1.PodSpec").fields


def test_unknown_field_strict_is_400(sim: SimCluster) -> None:
    code, _, body = _http(
        sim, "POST", PODS + "?fieldValidation=Strict", _pod("p", ',"resourcez":{}', ',"foo":1')
    )
    assert code == 400
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].resourcez", unknown field "spec.foo"'
    )


def test_unknown_field_warn_is_the_default(sim: SimCluster) -> None:
    code, headers, body = _http(sim, "POST", PODS, _pod("p", ',"resourcez":{}'))
    assert code == 201
    assert headers.get_all("Warning") == [
        '299 - "unknown field \\"spec.containers[0].resourcez\\""'
    ]
    assert "resourcez" not in body["spec"]["containers"][0]
    assert "resourcez" not in json.dumps(sim.get("pods", "p", "robotics"))


def test_unknown_field_ignore_is_silent_and_dropped(sim: SimCluster) -> None:
    code, headers, body = _http(
        sim, "POST", PODS + "?fieldValidation=Ignore", _pod("p", ',"resourcez":{}')
    )
    assert code == 201
    assert headers.get_all("Warning") is None
    assert "resourcez" not in body["spec"]["containers"][0]


def test_duplicate_fields(sim: SimCluster) -> None:
    raw = (
        '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"b"},'
        '"data":{"k":"1","k":"2"}}'
    )
    path = "/api/v1/namespaces/robotics/configmaps"
    code, _, body = _http(sim, "POST", path + "?fieldValidation=Strict", raw)
    assert code == 400
    assert body["message"].endswith(
        'strict decoding error: duplicate field "metadata.name", duplicate field "data.k"'
    )
    code, headers, body = _http(sim, "POST", path, raw)
    assert code == 201
    assert body["metadata"]["name"] == "b" and body["data"] == {"k": "2"}  # the last one wins
    assert headers.get_all("Warning") == [
        '299 - "duplicate field \\"metadata.name\\""',
        '299 - "duplicate field \\"data.k\\""',
    ]


def test_wrong_json_types_are_400_whatever_the_directive(sim: SimCluster) -> None:
    for directive in ("Ignore", "Warn", "Strict"):
        code, _, body = _http(
            sim,
            "POST",
            f"{PODS}?fieldValidation={directive}",
            _pod("p", "", ',"terminationGracePeriodSeconds":"30"'),
        )
        assert code == 400
        assert body["message"] == (
            'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string '
            "into Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64"
        )
    code, _, body = _http(sim, "POST", PODS, _pod("p", ',"ports":[{"containerPort":1.5}]'))
    assert body["message"].endswith(
        "json: cannot unmarshal number 1.5 into Go struct field "
        "ContainerPort.spec.containers.ports.containerPort of type int32"
    )
    code, _, body = _http(sim, "POST", PODS, _pod("p", "", ',"restartPolicy":1'))
    assert body["message"].endswith(
        "into Go struct field PodSpec.spec.restartPolicy of type v1.RestartPolicy"
    )


def test_custom_unmarshalers(sim: SimCluster) -> None:
    code, _, body = _http(sim, "POST", PODS, _pod("p", ',"resources":{"limits":{"cpu":"lots"}}'))
    assert code == 400
    assert body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular '
        "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
    raw = '{"metadata":{"name":"t","creationTimestamp":"yesterday"}}'
    code, _, body = _http(sim, "POST", "/api/v1/namespaces/robotics/configmaps", raw)
    assert code == 400
    assert body["message"].endswith(
        'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" '
        'as "2006"'
    )
    pdb = '{"metadata":{"name":"b"},"spec":{"minAvailable":true}}'
    code, _, body = _http(
        sim, "POST", "/apis/policy/v1/namespaces/robotics/poddisruptionbudgets", pdb
    )
    assert code == 400
    assert body["message"].endswith(
        "json: cannot unmarshal bool into Go struct field PodDisruptionBudgetSpec."
        "spec.minAvailable of type int32"
    )


def test_unparseable_body(sim: SimCluster) -> None:
    code, _, body = _http(sim, "POST", "/api/v1/namespaces/robotics/configmaps", "{bad")
    assert code == 400
    assert body["message"] == (
        "the object provided is unrecognized (must be of type ConfigMap): couldn't get "
        "version/kind; json parse error: invalid character 'b' looking for beginning of object "
        "key string ({bad)"
    )


def test_invalid_field_validation_value_is_422(sim: SimCluster) -> None:
    code, _, body = _http(sim, "POST", PODS + "?fieldValidation=Yes", _pod("p"))
    assert code == 422
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Yes": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )
    assert body["details"]["causes"][0]["field"] == "fieldValidation"
    code, _, body = _http(
        sim,
        "PATCH",
        "/api/v1/nodes/cpu-00?fieldValidation=strict",
        "{}",
        "application/merge-patch+json",
    )
    assert code == 422 and body["message"].startswith('PatchOptions.meta.k8s.io "" is invalid')


def test_update_drops_unknown_fields(v1: client.CoreV1Api, sim: SimCluster) -> None:
    v1.create_namespaced_config_map("robotics", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    cm = sim.get("configmaps", "cm", "robotics")
    cm["extra"] = {"x": 1}
    path = "/api/v1/namespaces/robotics/configmaps/cm"
    code, headers, body = _http(sim, "PUT", path, json.dumps(cm))
    assert code == 200 and "extra" not in body
    assert headers.get_all("Warning") == ['299 - "unknown field \\"extra\\""']
    code, _, body = _http(sim, "PUT", path + "?fieldValidation=Strict", json.dumps(cm))
    assert code == 400
    assert body["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'unknown field "extra"'
    )


def test_merge_patch_unknown_field(sim: SimCluster) -> None:
    path = "/api/v1/nodes/cpu-00"
    code, headers, body = _http(
        sim, "PATCH", path, '{"spec":{"foo":1}}', "application/merge-patch+json"
    )
    assert code == 200 and "foo" not in body["spec"]
    assert headers.get_all("Warning") == ['299 - "unknown field \\"spec.foo\\""']
    code, _, body = _http(
        sim,
        "PATCH",
        path + "?fieldValidation=Strict",
        '{"spec":{"foo":1}}',
        "application/merge-patch+json",
    )
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith(' "" is invalid: patch: Invalid value: "{\\"apiVersion')
    assert body["message"].endswith('": strict decoding error: unknown field "spec.foo"')
    assert body["details"]["causes"][0]["field"] == "patch"


def test_merge_patch_wrong_type(sim: SimCluster) -> None:
    code, _, body = _http(
        sim,
        "PATCH",
        "/api/v1/nodes/cpu-00",
        '{"spec":{"unschedulable":"yes"}}',
        "application/merge-patch+json",
    )
    assert code == 422
    assert body["message"].endswith(
        "json: cannot unmarshal string into Go struct field NodeSpec.spec.unschedulable of "
        "type bool"
    )


def test_strategic_patch_errors_show_the_patch_map(sim: SimCluster) -> None:
    code, _, body = _http(
        sim,
        "PATCH",
        "/api/v1/nodes/cpu-00?fieldValidation=Strict",
        '{"spec":{"foo":"bar","unschedulable":true}}',
        "application/strategic-merge-patch+json",
    )
    assert code == 422
    assert body["message"] == (
        ' "" is invalid: patch: Invalid value: "map[spec:map[foo:bar unschedulable:true]]": '
        'strict decoding error: unknown field "spec.foo"'
    )
    code, _, body = _http(
        sim,
        "PATCH",
        "/api/v1/nodes/cpu-00",
        '{"spec":{"unschedulable":"yes"}}',
        "application/strategic-merge-patch+json",
    )
    assert code == 422
    assert body["message"] == (
        ' "" is invalid: patch: Invalid value: "map[spec:map[unschedulable:yes]]": '
        "unrecognized type: bool"
    )


def test_json_patch(sim: SimCluster) -> None:
    path = "/api/v1/nodes/cpu-00"
    ops = '[{"op":"test","path":"/spec/unschedulable","value":true}]'
    code, _, body = _http(sim, "PATCH", path, ops, "application/json-patch+json")
    assert code == 422
    assert body["message"] == "the server rejected our request due to an error in our request"
    ops = '[{"op":"add","path":"/metadata/labels/x","value":"1","extra":2}]'
    code, _, body = _http(
        sim, "PATCH", path + "?fieldValidation=Strict", ops, "application/json-patch+json"
    )
    assert code == 422
    assert body["message"].endswith('strict decoding error: json patch unknown field "[0].extra"')


def test_apply_with_undeclared_field_is_500(sim: SimCluster) -> None:
    path = "/api/v1/namespaces/robotics/configmaps/cfg?fieldManager=me"
    code, _, body = _http(
        sim,
        "PATCH",
        path,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: robotics\nfoo: 1\n",
        "application/apply-patch+yaml",
    )
    assert code == 500
    assert "reason" not in body
    assert body["message"] == (
        "failed to create typed patch object (robotics/cfg; /v1, Kind=ConfigMap): .foo: field "
        "not declared in schema"
    )


def test_apply_with_duplicate_yaml_keys(sim: SimCluster) -> None:
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: '1'\n  a: '2'\n"
    path = "/api/v1/namespaces/robotics/configmaps/cfg?fieldManager=me"
    code, _, body = _http(
        sim, "PATCH", path + "&fieldValidation=Strict", doc, "application/apply-patch+yaml"
    )
    assert code == 400
    assert body["message"] == (
        "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n"
        '  line 7: key "a" already set in map'
    )
    code, headers, _ = _http(sim, "PATCH", path, doc, "application/apply-patch+yaml")
    assert code == 201
    assert headers.get_all("Warning") == ['299 - "line 7: key \\"a\\" already set in map"']


def test_official_client_unknown_fields_are_dropped(v1: client.CoreV1Api) -> None:
    # the client serializes its models: known fields only, so nothing to warn about
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
    )
    out = v1.create_namespaced_pod("robotics", pod, field_validation="Strict")
    assert out.metadata.name == "p"
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("robotics", pod, field_validation="Bogus")
    assert ei.value.status == 422


def test_secret_data_must_be_base64(sim: SimCluster) -> None:
    path = "/api/v1/namespaces/robotics/secrets"
    code, _, body = _http(sim, "POST", path, '{"metadata":{"name":"s"},"data":{"k":"abc"}}')
    assert code == 400
    assert body["message"] == (
        'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0'
    )
    code, _, body = _http(sim, "POST", path, '{"metadata":{"name":"s"},"data":{"k":"YWJj"}}')
    assert code == 201 and body["data"] == {"k": "YWJj"}
