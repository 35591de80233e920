"""The validation and error cases of tests/simcluster/, asked of both servers as the admin.

Tables of bodies that a v1.36 kube-apiserver refuses or rewrites: ResourceQuota keys,
values and scopes; object names; pods (containers, resources, extended resources);
ConfigMaps, nodes, namespaces and PodDisruptionBudgets; decoding (malformed JSON, wrong
types, unknown and duplicate fields under each ``fieldValidation``); conflicts (AlreadyExists,
stale resourceVersions, name and UID mismatches); patches of every type and server-side
apply's own errors; list options; quota admission on pod create, with its exact message;
deletion; authentication. Each compares the HTTP status, the Status reason, message and
details (causes included), and for an accepted body the fields the server set.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.framework import (
    APPLY,
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    Answer,
    Case,
    Pair,
    Request,
    Server,
    apply,
    check,
    delete,
    get,
    params,
    patch,
    post,
    put,
    wait,
)

NS = "checks"
KUEUE = "kueue.x-k8s.io/v1beta2"
QUOTA_NS = "quota-checks"
DEFS = "quota-defs"  # where the quota validation cases create theirs (they limit nothing else)
DOOMED = "doomed"


def _api(resource: str, name: str = "", namespace: str = NS) -> str:
    path = f"/api/v1/namespaces/{namespace}/{resource}"
    return f"{path}/{name}" if name else path


def _policy(name: str = "") -> str:
    path = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
    return f"{path}/{name}" if name else path


def _meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, **extra}


def _quota(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta(name), "spec": spec}


def _cm(name: str, **fields: Any) -> dict[str, Any]:
    meta = fields.pop("metadata", None) or _meta(name)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **fields}


def _pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    if not containers:
        containers = ({"name": "main", "image": "x"},)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name),
        "spec": {"containers": list(containers), **spec},
    }


def _res(**resources: dict[str, str]) -> dict[str, Any]:
    return {"name": "main", "image": "x", "resources": resources}


def _node(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": _meta(name), "spec": spec}


SCENE: list[Any] = [
    post("/api/v1/namespaces", {"metadata": {"name": NS}}),
    post("/api/v1/namespaces", {"metadata": {"name": QUOTA_NS}}),
    post("/api/v1/namespaces", {"metadata": {"name": DEFS}}),
    post("/api/v1/namespaces", {"metadata": {"name": DOOMED}}),
    wait(get(_api("serviceaccounts", "default")), lambda a: a.status == 200),
    wait(get(_api("serviceaccounts", "default", QUOTA_NS)), lambda a: a.status == 200),
    wait(get(_api("serviceaccounts", "default", DOOMED)), lambda a: a.status == 200),
    post(_api("configmaps"), _cm("existing", data={"a": "1"})),
    post(_api("configmaps"), _cm("frozen", data={"a": "1"}, immutable=True)),
    # quota admission: one pod allowed, 2 GPUs, requests.cpu required
    post(
        _api("resourcequotas", namespace=QUOTA_NS),
        _quota(
            "count", {"hard": {"pods": "1", "requests.nvidia.com/gpu": "2", "requests.cpu": "4"}}
        ),
    ),
    wait(
        get(_api("resourcequotas", "count", QUOTA_NS)),
        lambda a: (a.body.get("status") or {}).get("hard"),
    ),
    # a namespace kept Terminating by a finalizer on an object in it
    post(
        _api("configmaps", namespace=DOOMED),
        _cm("held", metadata=_meta("held", finalizers=["example.com/hold"])),
    ),
    delete(f"/api/v1/namespaces/{DOOMED}"),
]


@pytest.fixture(scope="module", autouse=True)
def scene(pair: Pair) -> None:
    pair.prepare(SCENE)


def _create_quota(case_id: str, hard: dict[str, str], **spec: Any) -> Case:
    name = case_id.removeprefix("quota-")[:40].strip("-")
    body = _quota(name, {"hard": hard, **spec})
    return Case(case_id, post(_api("resourcequotas", namespace=DEFS), body), fields=("spec",))


QUOTA_CASES = [
    _create_quota("quota-unknown-name", {"foo": "1"}),
    _create_quota("quota-requests-unknown", {"requests.foo": "1"}),
    _create_quota("quota-extended-without-prefix", {"nvidia.com/gpu": "4"}),
    _create_quota("quota-extended-requests", {"requests.nvidia.com/gpu": "4"}),
    _create_quota("quota-extended-fraction", {"requests.nvidia.com/gpu": "1.5"}),
    _create_quota("quota-extended-limits-negative", {"limits.nvidia.com/gpu": "-1"}),
    _create_quota("quota-count-fraction", {"count/pods": "1.5"}),
    _create_quota("quota-count-group", {"count/deployments.apps": "3"}),
    _create_quota("quota-value-not-a-quantity", {"pods": "abc"}),
    _create_quota("quota-value-with-space", {"requests.cpu": "1 core"}),
    _create_quota(
        "quota-canonical-values",
        {"requests.cpu": "2000m", "requests.memory": "2048Mi", "limits.cpu": "0.5"},
    ),
    _create_quota("quota-capitalised-name", {"Requests.cpu": "1"}),
    _create_quota("quota-hugepages", {"requests.hugepages-2Mi": "1Gi"}),
    _create_quota("quota-unknown-scope", {"pods": "1"}, scopes=["Foo"]),
    _create_quota(
        "quota-conflicting-scopes", {"pods": "1"}, scopes=["Terminating", "NotTerminating"]
    ),
    _create_quota(
        "quota-scope-cannot-limit", {"requests.nvidia.com/gpu": "1"}, scopes=["BestEffort"]
    ),
    _create_quota(
        "quota-scope-selector-bad-operator",
        {"pods": "1"},
        scopeSelector={
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "Bad", "values": ["high"]}
            ]
        },
    ),
    _create_quota(
        "quota-scope-selector-priority",
        {"pods": "1"},
        scopeSelector={
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
            ]
        },
    ),
]

NAME_CASES = [
    Case("name-configmap-invalid", post(_api("configmaps"), _cm("Bad_Name"))),
    Case("name-configmap-missing", post(_api("configmaps"), _cm("", metadata={}))),
    Case(
        "name-configmap-generate-invalid",
        post(_api("configmaps"), _cm("", metadata={"generateName": "Bad-"})),
        scrub=(r"Bad-[a-z0-9]{5}",),
    ),
    Case(
        "name-configmap-generated",
        post(_api("configmaps"), _cm("", metadata={"generateName": "cfg-"})),
        fields=("metadata.generateName",),
        extract=lambda a, s: {
            "name": a.body["metadata"]["name"][:4] + "<5>"
            if len(a.body["metadata"]["name"]) == 9
            else "?"
        },
    ),
    Case("name-configmap-too-long", post(_api("configmaps"), _cm("x" * 254))),
    Case("name-namespace-dots", post("/api/v1/namespaces", {"metadata": _meta("a.b")})),
    Case(
        "name-service-dns1035",
        post(_api("services"), {"metadata": _meta("1svc"), "spec": {"ports": [{"port": 80}]}}),
    ),
    Case(
        "name-service-uppercase",
        post(_api("services"), {"metadata": _meta("Svc"), "spec": {"ports": [{"port": 80}]}}),
    ),
    Case("name-node-upper", post("/api/v1/nodes", _node("UPPER"))),
    Case(
        "name-pdb-percent",
        post(_policy(), {"metadata": _meta("50%off"), "spec": {"minAvailable": 1}}),
    ),
    Case(
        "name-pod-with-dots-warns",
        post(_api("pods"), _pod("pod.with.dots")),
        headers=("Warning",),
        fields=("metadata.name",),
    ),
    Case(
        "name-path-mismatch-namespace",
        post(_api("configmaps"), _cm("elsewhere", metadata=_meta("elsewhere", namespace="x"))),
    ),
]

POD_CASES = [
    Case("pod-no-containers", post(_api("pods"), {"metadata": _meta("p0"), "spec": {}})),
    Case(
        "pod-container-name",
        post(_api("pods"), _pod("p1", {"name": "Bad_Name", "image": "x"})),
    ),
    Case(
        "pod-container-duplicate",
        post(_api("pods"), _pod("p2", {"name": "a", "image": "x"}, {"name": "a", "image": "x"})),
    ),
    Case("pod-no-image", post(_api("pods"), _pod("p3", {"name": "main"}))),
    Case(
        "pod-requests-above-limits",
        post(_api("pods"), _pod("p4", _res(requests={"cpu": "2"}, limits={"cpu": "1"}))),
    ),
    Case("pod-negative-request", post(_api("pods"), _pod("p5", _res(requests={"cpu": "-1"})))),
    Case(
        "pod-gpu-fraction",
        post(_api("pods"), _pod("p6", _res(limits={"nvidia.com/gpu": "0.5"}))),
    ),
    Case(
        "pod-gpu-request-without-limit",
        post(_api("pods"), _pod("p7", _res(requests={"nvidia.com/gpu": "1"}))),
    ),
    Case(
        "pod-gpu-request-differs-from-limit",
        post(
            _api("pods"),
            _pod("p8", _res(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"})),
        ),
    ),
    Case(
        "pod-gpu-limit-defaults-request",
        post(_api("pods"), _pod("p9", _res(limits={"nvidia.com/gpu": "1"}))),
        fields=("spec.containers[].resources",),
    ),
    Case(
        "pod-hugepages-without-limit",
        post(_api("pods"), _pod("p10", _res(requests={"hugepages-2Mi": "2Mi"}))),
    ),
    Case(
        "pod-resource-name-prefixed",
        post(_api("pods"), _pod("p11", _res(requests={"requests.cpu": "1"}))),
    ),
    Case("pod-restart-policy", post(_api("pods"), _pod("p12", restartPolicy="Sometimes"))),
    Case(
        "pod-quantities-canonical",
        post(
            _api("pods"),
            _pod(
                "p13",
                _res(
                    requests={"cpu": "0.5", "memory": "2048Mi"},
                    limits={"cpu": "1000m", "memory": "2Gi"},
                ),
            ),
        ),
        fields=("spec.containers[].resources", "status.qosClass"),
    ),
    Case(
        "pod-bad-quantity",
        post(_api("pods"), _pod("p14", _res(limits={"cpu": "1 core"}))),
    ),
    Case(
        "pod-missing-service-account",
        post(_api("pods"), _pod("p15", serviceAccountName="ghost")),
    ),
    Case(
        "pod-update-spec-forbidden",
        lambda server: (
            server.call(post(_api("pods"), _pod("p16"))),
            patch(_api("pods", "p16"), {"spec": {"restartPolicy": "Never"}}),
        )[1],
        scrub=(r"(?s)pod updates may not change fields other than.*",),
    ),
]

OBJECT_CASES = [
    Case("configmap-bad-key", post(_api("configmaps"), _cm("cm1", data={"a b": "x"}))),
    Case(
        "configmap-key-in-both",
        post(_api("configmaps"), _cm("cm2", data={"k": "x"}, binaryData={"k": "eA=="})),
    ),
    Case(
        "configmap-binary-not-base64",
        post(_api("configmaps"), _cm("cm3", binaryData={"k": "not base64!"})),
    ),
    Case("configmap-immutable-change", patch(_api("configmaps", "frozen"), {"data": {"a": "2"}})),
    # (one bad label each: Go ranges over a map in random order)
    Case(
        "configmap-label-value-and-finalizer",
        post(
            _api("configmaps"),
            _cm("cm4", metadata=_meta("cm4", labels={"ok": "-bad"}, finalizers=["foo"])),
        ),
    ),
    Case(
        "configmap-label-key-too-long",
        post(_api("configmaps"), _cm("cm6", metadata=_meta("cm6", labels={"x" * 64: "v"}))),
    ),
    Case(
        "configmap-annotations-too-large",
        post(
            _api("configmaps"),
            _cm("cm7", metadata=_meta("cm7", annotations={"big": "x" * (256 * 1024)})),
        ),
    ),
    Case(
        "configmap-owner-reference",
        post(
            _api("configmaps"),
            _cm(
                "cm5",
                metadata=_meta(
                    "cm5",
                    ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": ""}],
                ),
            ),
        ),
    ),
    Case(
        "node-taint-effect",
        post("/api/v1/nodes", _node("tainted-a", taints=[{"key": "k", "effect": "Sometimes"}])),
    ),
    Case(
        "node-taint-duplicate",
        post(
            "/api/v1/nodes",
            _node(
                "tainted-b",
                taints=[{"key": "k", "effect": "NoSchedule"}, {"key": "k", "effect": "NoSchedule"}],
            ),
        ),
    ),
    Case("node-pod-cidr", post("/api/v1/nodes", _node("cidr-a", podCIDRs=["10.0.0.0/33"]))),
    Case(
        "namespace-label-value",
        post("/api/v1/namespaces", {"metadata": _meta("labelled", labels={"a": "-b-"})}),
    ),
    Case("namespace-delete-default", delete("/api/v1/namespaces/default")),
    Case(
        "namespace-terminating-create",
        post(_api("configmaps", namespace=DOOMED), _cm("late")),
    ),
    Case(
        "namespace-terminating-status",
        get(f"/api/v1/namespaces/{DOOMED}"),
        fields=("status.phase", "spec"),
    ),
    Case(
        "pdb-both-bounds",
        post(
            _policy(), {"metadata": _meta("pdb1"), "spec": {"minAvailable": 1, "maxUnavailable": 1}}
        ),
    ),
    Case(
        "pdb-bad-selector",
        post(
            _policy(),
            {
                "metadata": _meta("pdb2"),
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "-b"}}},
            },
        ),
    ),
    Case(
        "pdb-percent-out-of-range",
        post(_policy(), {"metadata": _meta("pdb3"), "spec": {"minAvailable": "150%"}}),
    ),
    Case(
        "review-no-attributes",
        post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {},
            },
        ),
    ),
    Case(
        "review-both-attributes",
        post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {
                    "resourceAttributes": {"verb": "get"},
                    "nonResourceAttributes": {"verb": "get", "path": "/x"},
                },
            },
        ),
    ),
]

DECODING_CASES = [
    Case(
        "decode-malformed-json",
        Request(
            "POST", _api("configmaps"), '{"metadata": {"name": "x"', content_type="application/json"
        ),
    ),
    Case(
        "decode-wrong-type",
        post("/api/v1/nodes", {"metadata": _meta("typed"), "spec": {"unschedulable": "yes"}}),
    ),
    Case(
        "decode-unknown-field-strict",
        post(
            _api("configmaps"),
            _cm("strict1", datta={"a": "1"}),
            params={"fieldValidation": "Strict"},
        ),
    ),
    Case(
        "decode-unknown-field-warn",
        post(_api("configmaps"), _cm("warn1", datta={"a": "1"})),
        headers=("Warning",),
        fields=("metadata.name",),
        extract=lambda a, s: {"datta kept": "datta" in (a.body or {})},
    ),
    Case(
        "decode-unknown-field-ignore",
        post(
            _api("configmaps"),
            _cm("ignore1", datta={"a": "1"}),
            params={"fieldValidation": "Ignore"},
        ),
        headers=("Warning",),
    ),
    Case(
        "decode-duplicate-field-strict",
        Request(
            "POST",
            _api("configmaps"),
            '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup1"},'
            '"data":{"a":"1"},"data":{"b":"2"}}',
            params={"fieldValidation": "Strict"},
        ),
    ),
    Case(
        "decode-bad-field-validation",
        post(_api("configmaps"), _cm("fv1"), params={"fieldValidation": "Sometimes"}),
    ),
    Case(
        "decode-kind-mismatch",
        post(_api("configmaps"), {"apiVersion": "v1", "kind": "Secret", "metadata": _meta("km")}),
    ),
    Case(
        "decode-version-mismatch",
        post(
            _api("configmaps"), {"apiVersion": "v2", "kind": "ConfigMap", "metadata": _meta("vm")}
        ),
    ),
    Case(
        "decode-custom-resource-kind-taken-from-the-path",
        post(
            f"/apis/{KUEUE}/resourceflavors",
            {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": _meta("kind-from-path")},
        ),
        fields=("kind", "apiVersion", "metadata.name", "spec"),
    ),
    Case(
        "decode-custom-resource-version-mismatch",
        post(
            f"/apis/{KUEUE}/resourceflavors",
            {"apiVersion": "kueue.x-k8s.io/v9", "kind": "ResourceFlavor", "metadata": _meta("v9")},
        ),
    ),
    Case(
        "pod-defaults",
        post(_api("pods"), _pod("defaulted")),
        extract=lambda a, s: {
            "container fields": sorted(a.body["spec"]["containers"][0]),
            "pod spec fields": sorted(a.body["spec"]),
        },
        known="R4",
        why="pods and pod templates miss some of SetDefaults_Pod's fields",
    ),
    Case(
        "decode-unsupported-media-type",
        Request("POST", _api("configmaps"), "name: x", content_type="text/plain"),
    ),
    Case(
        "decode-yaml-body",
        Request(
            "POST",
            _api("configmaps"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-yaml}\ndata: {a: '1'}\n",
            content_type="application/yaml",
        ),
        fields=("metadata.name", "data"),
    ),
]

CONFLICT_CASES = [
    Case("conflict-already-exists", post(_api("configmaps"), _cm("existing"))),
    Case(
        "conflict-stale-resource-version",
        put(
            _api("configmaps", "existing"),
            _cm("existing", metadata=_meta("existing", resourceVersion="1")),
        ),
    ),
    Case(
        "conflict-name-mismatch",
        put(_api("configmaps", "existing"), _cm("other")),
    ),
    Case(
        "conflict-uid-mismatch",
        lambda server: put(
            _api("configmaps", "existing"),
            {
                **server.call(get(_api("configmaps", "existing"))).body,
                "metadata": {
                    **server.call(get(_api("configmaps", "existing"))).body["metadata"],
                    "uid": "11111111-2222-3333-4444-555555555555",
                },
            },
        ),
        scrub=(r"UID in object meta: [-0-9a-f]+", r"Key: /registry/\S+"),
    ),
    Case(
        "conflict-unconditional-update",
        put(_api("configmaps", "existing"), _cm("existing", data={"b": "2"})),
        fields=("data",),
    ),
    Case(
        "conflict-update-missing",
        put(_api("configmaps", "ghost"), _cm("ghost")),
    ),
    Case(
        "conflict-patch-stale-resource-version",
        patch(_api("configmaps", "existing"), {"metadata": {"resourceVersion": "1"}}),
    ),
    Case("conflict-get-missing-namespace", get(_api("configmaps", "x", "no-such-ns"))),
    Case(
        "conflict-create-in-missing-namespace",
        post(_api("configmaps", namespace="no-such-ns"), _cm("x")),
    ),
]

PATCH_CASES = [
    Case(
        "patch-merge-invalid-result",
        patch(_api("configmaps", "existing"), {"metadata": {"labels": {"a": "-b"}}}),
    ),
    Case(
        "patch-merge-not-json",
        Request("PATCH", _api("configmaps", "existing"), "{not json", content_type=MERGE),
    ),
    Case(
        "patch-json-test-fails",
        patch(
            _api("configmaps", "existing"),
            [{"op": "test", "path": "/data/b", "value": "9"}],
            content_type=JSON_PATCH,
        ),
    ),
    Case(
        "patch-json-missing-path",
        patch(
            _api("configmaps", "existing"),
            [{"op": "remove", "path": "/data/nope"}],
            content_type=JSON_PATCH,
        ),
    ),
    Case(
        "patch-json-add",
        patch(
            _api("configmaps", "existing"),
            [{"op": "add", "path": "/data/c", "value": "3"}],
            content_type=JSON_PATCH,
        ),
        fields=("data",),
    ),
    Case(
        "patch-strategic-custom-resource",
        patch(
            "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/nope",
            {"spec": {}},
            content_type=STRATEGIC,
        ),
    ),
    Case(
        "patch-strategic-delete-directive",
        lambda server: (
            server.call(
                post(
                    _api("pods"),
                    _pod("sp1", {"name": "a", "image": "x"}, {"name": "b", "image": "y"}),
                )
            ),
            patch(
                _api("pods", "sp1"),
                {"spec": {"containers": [{"name": "b", "image": "z"}]}},
                content_type=STRATEGIC,
            ),
        )[1],
        fields=("spec.containers[].name", "spec.containers[].image"),
    ),
    Case(
        "patch-force-on-merge",
        patch(_api("configmaps", "existing"), {"data": {"x": "1"}}, params={"force": "true"}),
    ),
    Case(
        "apply-managed-fields-set",
        apply(
            _api("configmaps", "ap1"),
            _cm(
                "ap1",
                metadata=_meta(
                    "ap1",
                    managedFields=[{"manager": "x", "operation": "Apply", "apiVersion": "v1"}],
                ),
            ),
        ),
    ),
    Case(
        "apply-version-mismatch",
        apply(
            _api("configmaps", "ap2"),
            {"apiVersion": "v2", "kind": "ConfigMap", "metadata": _meta("ap2")},
        ),
    ),
    Case(
        "apply-without-field-manager",
        Request("PATCH", _api("configmaps", "ap3"), _cm("ap3"), content_type=APPLY),
    ),
    Case(
        "apply-unknown-field",
        apply(_api("configmaps", "ap4"), _cm("ap4", datta={"a": "1"})),
    ),
    Case(
        "apply-name-mismatch",
        apply(_api("configmaps", "ap5"), _cm("other-name")),
    ),
    Case(
        "apply-conflict-two-managers",
        lambda server: (
            server.call(
                apply(_api("configmaps", "ap6"), _cm("ap6", data={"a": "1"}), manager="first")
            ),
            apply(
                _api("configmaps", "ap6"),
                _cm("ap6", data={"a": "2"}),
                manager="second",
                force=False,
            ),
        )[1],
    ),
    Case(
        "apply-force-takes-over",
        lambda server: (
            server.call(
                apply(_api("configmaps", "ap7"), _cm("ap7", data={"a": "1"}), manager="first")
            ),
            apply(_api("configmaps", "ap7"), _cm("ap7", data={"a": "2"}), manager="second"),
        )[1],
        fields=("data",),
        extract=lambda a, s: {
            "managers": [
                (m["manager"], m["operation"], m.get("fieldsV1"))
                for m in a.body["metadata"]["managedFields"]
            ]
        },
    ),
    Case(
        "apply-noop-twice",
        lambda server: (
            server.call(apply(_api("configmaps", "ap8"), _cm("ap8", data={"a": "1"}))),
            apply(_api("configmaps", "ap8"), _cm("ap8", data={"a": "1"})),
        )[1],
        fields=("data", "metadata.labels"),
    ),
]


def _first_page_then(query: dict[str, str]):
    def request(server: Server) -> Request:
        first = server.send(get(_api("configmaps"), params={"limit": 1}))
        token = first.body["metadata"]["continue"]
        return get(_api("configmaps"), params={"continue": token, **query})

    return request


LIST_CASES = [
    Case(
        "list-match-without-version",
        get(_api("configmaps"), params={"resourceVersionMatch": "NotOlderThan"}),
    ),
    Case(
        "list-exact-zero",
        get(_api("configmaps"), params={"resourceVersionMatch": "Exact", "resourceVersion": "0"}),
    ),
    Case(
        "list-match-unknown",
        get(_api("configmaps"), params={"resourceVersionMatch": "Newest", "resourceVersion": "1"}),
    ),
    Case("list-bad-resource-version", get(_api("configmaps"), params={"resourceVersion": "abc"})),
    Case(
        "list-continue-with-version",
        _first_page_then({"resourceVersion": "5"}),
    ),
    Case(
        "list-label-value-invalid",
        get(_api("configmaps"), params={"labelSelector": "a=-b"}),
    ),
    Case(
        "list-label-selector-set",
        get(_api("configmaps"), params={"labelSelector": "a notin (x,y),!missing"}),
        fields=("kind",),
    ),
    Case(
        "list-field-selector-syntax",
        get(_api("configmaps"), params={"fieldSelector": "metadata.name~x"}),
    ),
    Case(
        "list-field-selector-name",
        get(_api("configmaps"), params={"fieldSelector": "metadata.name=existing"}),
        fields=("items[].metadata.name",),
    ),
    Case(
        "list-field-selector-unsupported",
        get(_api("configmaps"), params={"fieldSelector": "data.a=1"}),
    ),
    Case(
        "list-table",
        get(
            _api("configmaps"),
            params={"fieldSelector": "metadata.name=existing"},
            accept="application/json;as=Table;v=v1;g=meta.k8s.io",
        ),
        fields=("kind", "apiVersion", "columnDefinitions[].name", "rows[].cells"),
        scrub=(r"^\d+[smhd]$",),
    ),
    Case(
        "watch-with-continue",
        get(_api("configmaps"), params={"watch": "1", "continue": "x", "timeoutSeconds": "1"}),
    ),
]

QUOTA_ADMISSION_CASES = [
    Case(
        "admission-quota-first-pod",
        post(
            _api("pods", namespace=QUOTA_NS),
            _pod("gpu-1", _res(requests={"cpu": "1"}, limits={"nvidia.com/gpu": "1"})),
        ),
        fields=("metadata.name", "spec.containers[].resources"),
    ),
    Case(
        "admission-quota-exceeded",
        post(
            _api("pods", namespace=QUOTA_NS),
            _pod("gpu-2", _res(requests={"cpu": "1"}, limits={"nvidia.com/gpu": "2"})),
        ),
        setup=(
            wait(
                get(_api("resourcequotas", "count", QUOTA_NS)),
                lambda a: (a.body["status"].get("used") or {}).get("pods") == "1",
            ),
        ),
    ),
    Case(
        "admission-quota-must-specify",
        post(_api("pods", namespace=QUOTA_NS), _pod("gpu-3", _res(limits={"nvidia.com/gpu": "1"}))),
    ),
    Case(
        "admission-quota-dry-run",
        post(
            _api("pods", namespace=QUOTA_NS),
            _pod("gpu-4", _res(requests={"cpu": "9"}, limits={"nvidia.com/gpu": "1"})),
            params={"dryRun": "All"},
        ),
    ),
    Case(
        "admission-quota-status",
        get(_api("resourcequotas", "count", QUOTA_NS)),
        fields=("status.hard", "status.used"),
        setup=(
            wait(
                get(_api("resourcequotas", "count", QUOTA_NS)),
                lambda a: (a.body["status"].get("used") or {}).get("pods") == "1",
            ),
        ),
    ),
]

DELETE_CASES = [
    Case(
        "delete-precondition-uid",
        lambda server: (
            server.call(post(_api("configmaps"), _cm("del1"))),
            delete(
                _api("configmaps", "del1"),
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "preconditions": {"uid": "11111111-2222-3333-4444-555555555555"},
                },
            ),
        )[1],
        scrub=(r"UID in record \([-0-9a-f]+\)",),
    ),
    Case(
        "delete-configmap-status",
        lambda server: (
            server.call(post(_api("configmaps"), _cm("del2"))),
            delete(_api("configmaps", "del2")),
        )[1],
        fields=("kind", "apiVersion", "status", "details.name", "details.kind"),
    ),
    Case(
        "delete-pod-grace-period",
        lambda server: (
            server.call(post(_api("pods"), _pod("del3", nodeName="nowhere"))),
            delete(_api("pods", "del3"), params={"gracePeriodSeconds": "15"}),
        )[1],
        fields=("kind", "metadata.deletionGracePeriodSeconds"),
        extract=lambda a, s: {
            "deletionTimestamp set": bool(a.body["metadata"].get("deletionTimestamp"))
        },
    ),
    Case(
        "delete-bad-propagation",
        delete(_api("configmaps", "existing"), params={"propagationPolicy": "Sideways"}),
    ),
    Case(
        "delete-dry-run-bad",
        delete(_api("configmaps", "existing"), params={"dryRun": "Some"}),
    ),
]


def _anonymous(answer: Answer, server: Server) -> dict[str, Any]:
    return {"www-authenticate": answer.headers.get("WWW-Authenticate")}


AUTH_CASES = [
    Case(
        "auth-bad-token",
        get("/api/v1/namespaces", identity="stranger"),
        extract=_anonymous,
    ),
    Case(
        "auth-forbidden-cluster-scope",
        get("/api/v1/namespaces", identity="nobody"),
    ),
    Case(
        "auth-forbidden-namespaced",
        post(_api("configmaps"), _cm("nope"), identity="nobody"),
    ),
    Case(
        "auth-forbidden-subresource",
        post(
            _api("pods", "x") + "/eviction",
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "x"}},
            identity="nobody",
        ),
    ),
    Case(
        "auth-forbidden-group-resource",
        get("/apis/apps/v1/namespaces/checks/deployments/x", identity="nobody"),
    ),
    Case(
        "auth-discovery-allowed",
        get("/apis", identity="nobody"),
        fields=("kind", "apiVersion"),
    ),
]

# -- bodies of tests/simcluster/ whose expected messages the real server settles
CLIENT = "nvidia.com/gpu.deploy.client"


def _daemonset(name: str, **spec: Any) -> dict[str, Any]:
    tpl = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [{"name": "agent", "image": "x:1"}],
            "nodeSelector": {CLIENT: "true"},
        },
    }
    body = {"selector": {"matchLabels": {"app": name}}, "template": tpl, **spec}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name}, "spec": body}


def _apps(name: str = "") -> str:
    path = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
    return f"{path}/{name}" if name else path


def _kueue(resource: str, name: str = "") -> str:
    return f"/apis/{KUEUE}/{resource}/{name}" if name else f"/apis/{KUEUE}/{resource}"


def _ds_mismatch() -> dict[str, Any]:
    body = _daemonset("agent-a")
    body["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    return body


def _ds_strategy() -> dict[str, Any]:
    body = _daemonset("agent-b", updateStrategy={"type": "Sometimes"})
    body["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    return body


def _ds_surge() -> dict[str, Any]:
    body = _daemonset(
        "agent-c",
        minReadySeconds=-1,
        updateStrategy={
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "10%"},
        },
    )
    return body


def _cluster_queue(queue: str, **resource: Any) -> dict[str, Any]:
    res = {"name": "nvidia.com/gpu", "nominalQuota": 4, **resource}
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": queue},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "resources": [res]}],
                }
            ]
        },
    }


def _cq_covered_mismatch() -> dict[str, Any]:
    body = _cluster_queue("cq-covered")
    body["spec"]["resourceGroups"][0]["coveredResources"] = ["nvidia.com/gpu", "cpu"]
    return body


MIRROR_CASES = [
    Case("ds-selector-mismatch", post(_apps(), _ds_mismatch())),
    Case("ds-strategy-and-restart-policy", post(_apps(), _ds_strategy())),
    Case("ds-surge-and-unavailable", post(_apps(), _ds_surge())),
    Case(
        "ds-selector-immutable",
        lambda server: (
            server.call(post(_apps(), _daemonset("agent-d"))),
            patch(
                _apps("agent-d"),
                {
                    "spec": {
                        "selector": {"matchLabels": {"app": "agent-d", "tier": "x"}},
                        "template": {"metadata": {"labels": {"app": "agent-d", "tier": "x"}}},
                    }
                },
            ),
        )[1],
    ),
    Case(
        "quota-scopes-three",
        post(
            _api("resourcequotas", namespace=DEFS),
            _quota(
                "scopes3",
                {
                    "hard": {"requests.cpu": "1", "pods": "2"},
                    "scopes": ["BestEffort", "NotBestEffort", "Gold"],
                },
            ),
        ),
    ),
    Case(
        "quota-scopes-immutable",
        lambda server: (
            server.call(
                post(
                    _api("resourcequotas", namespace=DEFS),
                    _quota(
                        "scoped",
                        {"hard": {"requests.nvidia.com/gpu": "4"}, "scopes": ["BestEffort"]},
                    ),
                )
            ),
            patch(_api("resourcequotas", "scoped", DEFS), {"spec": {"scopes": ["NotTerminating"]}}),
        )[1],
    ),
    Case(
        "quota-scope-selector-three",
        post(
            _api("resourcequotas", namespace=DEFS),
            _quota(
                "sel3",
                {
                    "hard": {"requests.nvidia.com/gpu": "4"},
                    "scopeSelector": {
                        "matchExpressions": [
                            {"scopeName": "PriorityClass", "operator": "In"},
                            {"scopeName": "BestEffort", "operator": "In", "values": ["x"]},
                            {
                                "scopeName": "PriorityClass",
                                "operator": "Exists",
                                "values": ["high"],
                            },
                        ]
                    },
                },
            ),
        ),
    ),
    Case(
        "namespace-custom-finalizer",
        post("/api/v1/namespaces", {"metadata": _meta("ns1"), "spec": {"finalizers": ["custom"]}}),
    ),
    Case(
        "node-taints-update",
        lambda server: (
            server.call(post("/api/v1/nodes", _node("taint-target"))),
            patch(
                "/api/v1/nodes/taint-target",
                {
                    "spec": {
                        "taints": [
                            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                            {"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "x"},
                            {"key": "k", "effect": "Sometimes"},
                        ]
                    }
                },
            ),
        )[1],
    ),
    Case(
        "pdb-three-errors",
        post(
            _policy(),
            {
                "metadata": _meta("pdb4"),
                "spec": {
                    "minAvailable": "50x",
                    "maxUnavailable": "150%",
                    "selector": {"matchLabels": {"a": "b"}},
                },
            },
        ),
    ),
    Case(
        "pod-mig-fraction",
        post(_api("pods"), _pod("p17", _res(limits={"nvidia.com/mig-1g.10gb": "0.5"}))),
    ),
    Case(
        "kueue-local-queue-immutable",
        lambda server: (
            server.call(
                post(
                    f"/apis/{KUEUE}/namespaces/{NS}/localqueues",
                    {
                        "apiVersion": KUEUE,
                        "kind": "LocalQueue",
                        "metadata": {"name": "q"},
                        "spec": {"clusterQueue": "team-a"},
                    },
                )
            ),
            patch(
                f"/apis/{KUEUE}/namespaces/{NS}/localqueues/q", {"spec": {"clusterQueue": "team-b"}}
            ),
        )[1],
    ),
    Case(
        "kueue-flavor-toleration-rule",
        post(
            _kueue("resourceflavors"),
            {
                "apiVersion": KUEUE,
                "kind": "ResourceFlavor",
                "metadata": {"name": "tol"},
                "spec": {"tolerations": [{"operator": "Exists", "value": "x"}]},
            },
        ),
    ),
    Case(
        "kueue-flavor-node-label-webhook",
        post(
            _kueue("resourceflavors"),
            {
                "apiVersion": KUEUE,
                "kind": "ResourceFlavor",
                "metadata": {"name": "lbl"},
                "spec": {"nodeLabels": {"bad key!": "x"}},
            },
        ),
    ),
    Case("kueue-covered-resources-mismatch", post(_kueue("clusterqueues"), _cq_covered_mismatch())),
    Case(
        "kueue-queueing-strategy-blocks-cel",
        post(
            _kueue("clusterqueues"),
            {
                **_cluster_queue("cq-fast"),
                "spec": {**_cluster_queue("cq-fast")["spec"], "queueingStrategy": "Fast"},
            },
        ),
    ),
    Case(
        "kueue-resource-name-webhook",
        post(_kueue("clusterqueues"), _cluster_queue("cq-name", name="cpu")),
    ),
    Case(
        "kueue-lending-limit-without-cohort",
        post(_kueue("clusterqueues"), _cluster_queue("cq-lend", lendingLimit=1)),
    ),
]

# label selectors: the parser's errors, and which objects match (labelled ConfigMaps sel-*)
SELECTOR_ERRORS = [
    "a/b/c=x",
    "a>x",
    "a==b==c",
    "!",
    "a,",
    "a notin",
    "a in (x y)",
    "a=b c",
    "x!!=y",
    "a in (-x,y)",
    "a gt 3",
    "x=(",
    "=a",
    ",a",
    "a!",
    "a in x)",
    "a in (x",
    "a>1 2",
    "a>99999999999999999999",
]
SELECTOR_MATCHES = [
    "tier=gpu",
    "tier==gpu",
    "tier!=gpu",
    "tier in (gpu,cpu)",
    "tier notin (gpu)",
    "tier",
    "!tier",
    "rank>2",
    "rank<3",
    "rank>1,rank<5",
    "tier in ()",
    "tier in (,gpu)",
    "tier=",
    "In in (in)",
    "tier=gpu,!spare",
    "   ",
]
_SELECTED = [
    ("sel-a", {"tier": "gpu", "rank": "1"}),
    ("sel-b", {"tier": "cpu", "rank": "3"}),
    ("sel-c", {"tier": "", "rank": "x"}),
    ("sel-d", {"spare": "1", "In": "in"}),
    ("sel-e", {"tier": "gpu", "rank": "007", "spare": "y"}),
]
SCENE += [post(_api("configmaps"), _cm(n, metadata=_meta(n, labels=lb))) for n, lb in _SELECTED]


def _selected(answer: Answer, server: Server) -> dict[str, Any]:
    names = [i["metadata"]["name"] for i in (answer.body or {}).get("items") or []]
    return {"selected": [n for n in names if n.startswith("sel-")]}


SELECTOR_CASES = [
    *(
        Case(f"selector-error[{s}]", get(_api("configmaps"), params={"labelSelector": s}))
        for s in SELECTOR_ERRORS
    ),
    *(
        Case(
            f"selector-match[{s}]",
            get(_api("configmaps"), params={"labelSelector": s}),
            extract=_selected,
        )
        for s in SELECTOR_MATCHES
    ),
]

CASES = [
    *MIRROR_CASES,
    *SELECTOR_CASES,
    *QUOTA_CASES,
    *NAME_CASES,
    *POD_CASES,
    *OBJECT_CASES,
    *DECODING_CASES,
    *CONFLICT_CASES,
    *PATCH_CASES,
    *LIST_CASES,
    *QUOTA_ADMISSION_CASES,
    *DELETE_CASES,
    *AUTH_CASES,
]


@pytest.mark.parametrize("case", params(CASES))
def test_validation(case: Case, pair: Pair) -> None:
    check(case, pair)
