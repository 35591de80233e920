"""``/openapi/v2`` and discovery, as kubectl and the official client meet them.

Why it starts here: ``kubectl apply -f`` of a ``kind: List`` validates the list client-side
against ``/openapi/v2``, which kubectl fetches as gnostic protobuf only (client-go
``discovery/discovery_client.go`` ``OpenAPISchema``; k8s.io/kubectl ``pkg/validation``). A
JSON-only simulator answered 406 and kubectl failed with "the server was unable to respond
with a content type that the client supports". The simulator's protobuf is checked here
byte for byte: its encoder, given the real server's own JSON, must produce exactly the real
server's protobuf.
"""

from __future__ import annotations

import json

import pytest

from simcluster.openapi_proto import encode
from tests.differential.framework import (
    Answer,
    Case,
    Pair,
    Server,
    check,
    get,
    kubectl,
    ns_path,
    params,
)

PROTOBUF_ACCEPT = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"  # kubectl's
PROTOBUF_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
# Kinds the portal and its manifests use: their definitions carry the same GVK on both.
PORTAL_KINDS = {
    "io.k8s.api.core.v1.Node": ("", "v1", "Node"),
    "io.k8s.api.core.v1.Pod": ("", "v1", "Pod"),
    "io.k8s.api.core.v1.ConfigMap": ("", "v1", "ConfigMap"),
    "io.k8s.api.core.v1.ResourceQuota": ("", "v1", "ResourceQuota"),
    "io.k8s.api.core.v1.LimitRange": ("", "v1", "LimitRange"),
    "io.k8s.api.core.v1.Namespace": ("", "v1", "Namespace"),
    "io.k8s.api.core.v1.ServiceAccount": ("", "v1", "ServiceAccount"),
    "io.k8s.api.policy.v1.Eviction": ("policy", "v1", "Eviction"),
    "io.k8s.api.rbac.v1.ClusterRole": ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    "io.k8s.api.rbac.v1.RoleBinding": ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    "io.k8s.api.apps.v1.DaemonSet": ("apps", "v1", "DaemonSet"),
}


def _protobuf_facts(answer: Answer, server: Server) -> dict[str, object]:
    """What the protobuf says: the gnostic Document's ``swagger`` and ``info.title``, and that
    it is the encoding of the same server's JSON document (the ETag is shared)."""
    from tests.differential.pb import document_summary

    if answer.status != 200:
        return {}
    json_answer = server.send(get("/openapi/v2", accept="application/json"))
    summary = document_summary(answer.raw)
    return {
        "swagger": summary["swagger"],
        "info.title": summary["title"],
        "definitions present": summary["definitions"] > 0,
        "is the JSON document's encoding": answer.raw == encode(json.loads(json_answer.raw)),
        "same ETag as the JSON": answer.headers.get("Etag") == json_answer.headers.get("Etag"),
    }


def _json_facts(answer: Answer, server: Server) -> dict[str, object]:
    if answer.status != 200 or not isinstance(answer.body, dict):
        return {}
    definitions = answer.body.get("definitions") or {}
    gvks = {
        name: [
            (g["group"], g["version"], g["kind"])
            for g in (definitions.get(name) or {}).get("x-kubernetes-group-version-kind", [])
        ]
        for name in PORTAL_KINDS
    }
    return {
        "swagger": answer.body.get("swagger"),
        "info.title": (answer.body.get("info") or {}).get("title"),
        "portal kinds' GVKs": gvks,
        "BearerToken": (answer.body.get("securityDefinitions") or {}).get("BearerToken"),
    }


def _etag_round_trip(accept: str):
    def request(server: Server) -> Answer:
        first = server.send(get("/openapi/v2", accept=accept))
        tag = first.headers.get("Etag", "")
        return server.send(get("/openapi/v2", accept=accept, headers={"If-None-Match": tag}))

    return request


# Headers every answer of the real server carries that say nothing about the API.
_TRANSPORT = {
    "audit-id",
    "date",
    "content-length",
    "x-kubernetes-pf-flowschema-uid",
    "x-kubernetes-pf-prioritylevel-uid",
    "connection",
    "keep-alive",
    "server",
    "transfer-encoding",
}


def _sections(answer: Answer, server: Server) -> dict[str, object]:
    """Whether there is a body, and which headers came (names, not values)."""
    names = sorted({k.lower() for k in answer.headers} - _TRANSPORT)
    return {"body empty": not answer.raw, "header names": names}


CASES = [
    Case(
        "v2-protobuf-as-kubectl-asks",
        get("/openapi/v2", accept=PROTOBUF_ACCEPT),
        headers=("Content-Type", "Vary", "Content-Encoding", "Cache-Control"),
        extract=lambda a, s: {**_protobuf_facts(a, s), **_sections(a, s)},
    ),
    Case(
        "v2-protobuf-without-gzip",
        get("/openapi/v2", accept=PROTOBUF_ACCEPT, headers={"Accept-Encoding": "identity"}),
        headers=("Content-Type", "Vary", "Content-Encoding"),
    ),
    Case(
        "v2-protobuf-current-media-type",
        get("/openapi/v2", accept=PROTOBUF_TYPE),
        headers=("Content-Type",),
        extract=_protobuf_facts,
    ),
    Case(
        "v2-json",
        get("/openapi/v2", accept="application/json"),
        headers=("Content-Type", "Vary", "Content-Encoding"),
        extract=lambda a, s: {**_json_facts(a, s), **_sections(a, s)},
    ),
    Case("v2-any", get("/openapi/v2", accept="*/*"), headers=("Content-Type",)),
    Case(
        "v2-protobuf-preferred-by-q",
        get("/openapi/v2", accept=f"application/json;q=0.5, {PROTOBUF_ACCEPT}"),
        headers=("Content-Type",),
    ),
    Case(
        "v2-json-first-of-equals",
        get("/openapi/v2", accept=f"application/json, {PROTOBUF_ACCEPT}"),
        headers=("Content-Type",),
    ),
    Case(
        "v2-wildcard-subtype",
        get("/openapi/v2", accept="application/*"),
        headers=("Content-Type",),
    ),
    Case(
        "v2-not-acceptable",
        get("/openapi/v2", accept="text/html"),
        headers=("Vary",),
        extract=_sections,
    ),
    Case(
        "v2-protobuf-not-modified",
        _etag_round_trip(PROTOBUF_ACCEPT),
        extract=_sections,
    ),
    Case("v2-json-not-modified", _etag_round_trip("application/json"), extract=_sections),
    Case(
        "v2-as-the-portal",
        get("/openapi/v2", accept=PROTOBUF_ACCEPT, identity="portal"),
        headers=("Content-Type",),
    ),
    Case(
        "v2-as-nobody",
        get("/openapi/v2", accept="application/json", identity="nobody"),
        headers=("Content-Type",),
    ),
    Case(
        "v3-discovery-core",
        get("/openapi/v3"),
        extract=lambda a, s: {"api/v1 listed": "api/v1" in (json.loads(a.raw).get("paths") or {})},
    ),
    Case("v3-unknown-group-version", get("/openapi/v3/apis/nope.example/v1")),
    Case("api-versions", get("/api", identity="nobody"), fields=("kind", "versions")),
    Case(
        "apis-group-apps",
        get("/apis/apps", identity="portal"),
        fields=("kind", "apiVersion", "name", "versions", "preferredVersion"),
    ),
    Case(
        "version-shape",
        get("/version", identity="portal"),
        extract=lambda a, s: {"keys": sorted(a.body or {})},
        known="R1",
        why="the simulator reports v1.32.4-simcluster, without the compatibility fields",
    ),
]

LIST_YAML = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: listed-a, namespace: default}
  data: {a: "1"}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: listed-b, namespace: default}
  data: {b: "2"}
"""
# a field the schema does not have: kubectl's client-side validation names it
TYPO_YAML = LIST_YAML.replace("data: {b:", "datta: {b:").replace("listed-", "typo-")


def _kubectl(*args: str, stdin: str):
    def request(server: Server) -> Answer:
        return kubectl(server, *args, stdin=stdin)

    return request


def _kubectl_twice(*args: str, stdin: str):
    def request(server: Server) -> Answer:
        kubectl(server, *args, stdin=stdin)
        return kubectl(server, *args, stdin=stdin)

    return request


KUBECTL_CASES = [
    Case(
        "kubectl-apply-list",
        _kubectl("apply", "-f", "-", stdin=LIST_YAML),
        fields=("stdout", "stderr"),
    ),
    Case(
        "kubectl-apply-list-again-unchanged",
        _kubectl_twice("apply", "-f", "-", stdin=LIST_YAML.replace("listed-", "again-")),
        fields=("stdout", "stderr"),
    ),
    Case(
        "kubectl-apply-list-unknown-field",
        _kubectl("apply", "-f", "-", stdin=TYPO_YAML),
        fields=("stdout", "stderr"),
    ),
    Case(
        "kubectl-apply-list-server-side",
        _kubectl("apply", "--server-side", "-f", "-", stdin=LIST_YAML.replace("listed-", "ssa-")),
        fields=("stdout", "stderr"),
    ),
    Case(
        "kubectl-listed-objects-exist",
        lambda server: (
            kubectl(server, "apply", "-f", "-", stdin=LIST_YAML.replace("listed-", "seen-")),
            server.send(get(ns_path("default", "configmaps", "seen-b"))),
        )[1],
        fields=("metadata.name", "data"),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
def test_openapi(case: Case, pair: Pair) -> None:
    check(case, pair)


@pytest.mark.parametrize("case", params(KUBECTL_CASES))
def test_kubectl_openapi(case: Case, pair: Pair) -> None:
    check(case, pair)


def test_encoder_reproduces_the_real_protobuf(pair: Pair) -> None:
    """The simulator's encoder applied to the real server's JSON is the real protobuf."""
    real_json = pair.real.send(get("/openapi/v2", accept="application/json"))
    real_pb = pair.real.send(get("/openapi/v2", accept=PROTOBUF_ACCEPT))
    assert real_json.status == real_pb.status == 200
    assert encode(json.loads(real_json.raw)) == real_pb.raw
