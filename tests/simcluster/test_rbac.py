"""RBAC: request attributes, rule evaluation, bindings, the 403 body and the self reviews.

Real sources followed (kubernetes/kubernetes):
``staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`` (and its test table),
``plugin/pkg/auth/authorizer/rbac/rbac.go``, ``pkg/apis/rbac/v1/evaluation_helpers.go``,
``pkg/registry/rbac/validation/rule.go``,
``staging/src/k8s.io/apiserver/pkg/authorization/authorizerfactory/builtin.go``,
``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go`` with
apimachinery ``pkg/api/errors/errors.go`` (``NewForbidden``),
``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/update.go`` (``withAuthorization``),
``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``,
``pkg/registry/authorization/selfsubjectaccessreview/rest.go``,
``pkg/registry/authorization/selfsubjectrulesreview/rest.go``,
``pkg/apis/authorization/validation/validation.go``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster
from simcluster.patch import APPLY
from simcluster.rbac import Rule
from simcluster.requestinfo import RequestInfo, parse

from .helpers import make_api

RBAC = "rbac.authorization.k8s.io/v1"
REPO = Path(__file__).resolve().parents[2]
BOT = "system:serviceaccount:ml-vision:bot"


# ------------------------------------------------------------------ request info
# "METHOD path[?query]" -> "verb group resource subresource namespace name" ("-" = empty)
REQUEST_INFO = {
    "GET /api/v1/namespaces": "list - namespaces - - -",
    "GET /api/v1/namespaces/ml": "get - namespaces - ml ml",
    "GET /api/v1/namespaces/ml/status": "get - namespaces status ml ml",
    "GET /api/v1/namespaces/ml/pods": "list - pods - ml -",
    "GET /api/v1/pods?watch=true": "watch - pods - - -",
    "GET /api/v1/pods?watch=false": "list - pods - - -",
    "GET /api/v1/pods?watch=0": "list - pods - - -",
    "GET /api/v1/namespaces/ml/pods?watch=1&fieldSelector=metadata.name=p1": "watch - pods - ml p1",
    "GET /api/v1/pods?fieldSelector=status.phase=Running,metadata.name==p2": "list - pods - - p2",
    "GET /api/v1/pods?fieldSelector=metadata.name!=p1": "list - pods - - -",
    "POST /api/v1/namespaces/ml/pods/p/eviction": "create - pods eviction ml p",
    "DELETE /api/v1/namespaces/ml/pods": "deletecollection - pods - ml -",
    "DELETE /api/v1/namespaces/ml/pods/p": "delete - pods - ml p",
    "PATCH /api/v1/nodes/n1/status": "patch - nodes status - n1",
    "PUT /apis/policy/v1/namespaces/ml/poddisruptionbudgets/b": "update policy "
    "poddisruptionbudgets - ml b",
    "GET /api/v1/watch/namespaces/ml/pods": "watch - pods - ml -",
    "POST /api/v1/namespaces/ml/serviceaccounts/sa/token": "create - serviceaccounts token ml sa",
}


@pytest.mark.parametrize(("request_line", "expected"), REQUEST_INFO.items())
def test_request_info(request_line: str, expected: str) -> None:
    method, url = request_line.split(" ", 1)
    path, _, query = url.partition("?")
    params = dict(kv.split("=", 1) for kv in query.split("&")) if query else {}
    info = parse(method, path, params)
    assert info.is_resource_request
    got = (info.verb, info.api_group, info.resource, info.subresource, info.namespace, info.name)
    assert got == tuple("" if f == "-" else f for f in expected.split(" "))


NON_RESOURCE = ["/", "/healthz", "/version", "/api", "/api/v1", "/apis", "/apis/policy/v1"]


@pytest.mark.parametrize("path", NON_RESOURCE)
def test_non_resource_requests(path: str) -> None:
    info = parse("GET", path, {})
    assert not info.is_resource_request and info.verb == "get" and info.path == path


# ----------------------------------------------------------------- rule matching
def _res(verb: str, resource: str, sub: str = "", name: str = "", group: str = "") -> RequestInfo:
    return RequestInfo(True, "", verb, "api", group, "v1", "ns", resource, sub, name)


def test_rule_matching_helpers() -> None:
    everything = Rule({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})
    assert everything.allows(_res("delete", "pods", "status", "x", "apps"))
    sub_any = Rule({"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]})
    assert sub_any.allows(_res("get", "nodes", "status"))
    assert not sub_any.allows(_res("get", "nodes"))
    assert not sub_any.allows(_res("get", "nodes", "statusx"))
    # the real ResourceMatches has no "resource/*" wildcard: it is just a literal name
    pods_all = Rule({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]})
    assert not pods_all.allows(_res("get", "pods", "status"))
    pods = Rule({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]})
    assert not pods.allows(_res("get", "pods", "log"))  # a subresource must be named
    assert not pods.allows(_res("get", "pods", group="apps"))
    named = Rule(
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["*"]}
    )
    assert named.allows(_res("update", "configmaps", name="a"))
    assert not named.allows(_res("update", "configmaps", name="b"))
    assert not named.allows(_res("create", "configmaps"))  # no name on create or list
    assert not named.allows(_res("list", "configmaps"))
    urls = Rule({"nonResourceURLs": ["/healthz", "/logs/*"], "verbs": ["get"]})
    assert urls.allows(RequestInfo(False, "/logs/a/b", "get"))
    assert urls.allows(RequestInfo(False, "/logs/", "get"))
    assert not urls.allows(RequestInfo(False, "/logs", "get"))
    assert not urls.allows(RequestInfo(False, "/healthz/ping", "get"))
    assert not urls.allows(RequestInfo(False, "/healthz", "post"))
    assert not urls.allows(_res("get", "healthz"))


# -------------------------------------------------------------------- over HTTP
@pytest.fixture
def bot(sim: SimCluster) -> client.ApiClient:
    """An API client authenticated as ServiceAccount ml-vision/bot (no grants yet)."""
    sim.create("serviceaccounts", {"metadata": {"name": "bot"}}, namespace="ml-vision")
    api = make_api(sim, token=sim.issue_token("ml-vision", "bot"))
    yield api
    api.close()


def _role(sim: SimCluster, kind: str, name: str, rules: list[dict], ns: str = "") -> None:
    resource = "clusterroles" if kind == "ClusterRole" else "roles"
    obj = {"apiVersion": RBAC, "kind": kind, "metadata": {"name": name}, "rules": rules}
    sim.create(resource, obj, namespace=ns or None)


def _bind(
    sim: SimCluster, name: str, role_kind: str, role: str, subjects: list[dict], ns: str = ""
) -> None:
    kind = "RoleBinding" if ns else "ClusterRoleBinding"
    obj = {
        "apiVersion": RBAC,
        "kind": kind,
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects,
    }
    sim.create("rolebindings" if ns else "clusterrolebindings", obj, namespace=ns or None)


SA = {"kind": "ServiceAccount", "name": "bot", "namespace": "ml-vision"}
RBAC_GROUP = "rbac.authorization.k8s.io"


def _rule(resource: str, *verbs: str) -> dict[str, Any]:
    return {"apiGroups": [""], "resources": [resource], "verbs": list(verbs)}


def _status(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


def test_denied_request_gets_the_real_403(sim: SimCluster, bot: client.ApiClient) -> None:
    v1 = client.CoreV1Api(bot)
    with pytest.raises(ApiException) as ei:
        v1.list_node()
    assert ei.value.status == 403
    assert _status(ei.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'nodes is forbidden: User "{BOT}" cannot list resource "nodes" in API group '
        '"" at the cluster scope',
        "reason": "Forbidden",
        "details": {"kind": "nodes"},
        "code": 403,
    }
    with pytest.raises(ApiException) as ei:
        v1.patch_namespaced_config_map("other-config", "gpu-operator", {"data": {"a": "b"}})
    assert _status(ei.value)["message"] == (
        f'configmaps "other-config" is forbidden: User "{BOT}" cannot patch resource '
        '"configmaps" in API group "" in the namespace "gpu-operator"'
    )
    assert _status(ei.value)["details"] == {"name": "other-config", "kind": "configmaps"}
    with pytest.raises(ApiException) as ei:
        client.PolicyV1Api(bot).read_namespaced_pod_disruption_budget("x", "ml-vision")
    assert _status(ei.value)["details"] == {
        "name": "x",
        "group": "policy",
        "kind": "poddisruptionbudgets",
    }
    assert _status(ei.value)["message"].startswith('poddisruptionbudgets.policy "x" is forbidden')
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod_eviction("resnet-train-0", "ml-vision", {"metadata": {}})
    assert 'cannot create resource "pods/eviction" in API group ""' in _status(ei.value)["message"]


def test_non_resource_403_is_sanitized_with_empty_details(
    sim: SimCluster, bot: client.ApiClient
) -> None:
    token = bot.configuration.api_key["authorization"]
    req = urllib.request.Request(sim.url + "/metrics/<b>&x", headers={"Authorization": token})
    with pytest.raises(urllib.error.HTTPError) as he:
        urllib.request.urlopen(req)
    body = json.loads(he.value.read())
    assert he.value.code == 403
    assert body["message"] == (
        f'forbidden: User "{BOT}" cannot get path "/metrics/&lt;b&gt;&amp;x"'
    )
    assert body["details"] == {}
    # the bootstrap policy lets every authenticated user see health, version and discovery
    for path in ("/healthz", "/version", "/api", "/apis/rbac.authorization.k8s.io/v1"):
        with urllib.request.urlopen(
            urllib.request.Request(sim.url + path, headers={"Authorization": token})
        ) as r:
            assert r.status == 200


def test_cluster_role_binding_grants_everywhere(sim: SimCluster, bot: client.ApiClient) -> None:
    _role(sim, "ClusterRole", "pod-reader", [_rule("pods", "list")])
    _bind(sim, "bot-pods", "ClusterRole", "pod-reader", [SA])
    v1 = client.CoreV1Api(bot)
    assert v1.list_pod_for_all_namespaces(limit=1).items
    assert v1.list_namespaced_pod("genomics").items
    with pytest.raises(ApiException) as ei:  # list, not watch
        v1.list_namespaced_pod("genomics", watch=True, timeout_seconds=1)
    assert 'cannot watch resource "pods"' in _status(ei.value)["message"]
    client.RbacAuthorizationV1Api(make_api(sim)).delete_cluster_role_binding("bot-pods")
    with pytest.raises(ApiException) as ei:
        v1.list_namespaced_pod("genomics")
    assert ei.value.status == 403


def test_role_binding_grants_only_in_its_namespace(sim: SimCluster, bot: client.ApiClient) -> None:
    rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]}]
    _role(sim, "Role", "cm", rules, ns="genomics")
    _bind(sim, "bot-cm", "Role", "cm", [SA], ns="genomics")
    v1 = client.CoreV1Api(bot)
    v1.create_namespaced_config_map("genomics", {"metadata": {"name": "mine"}})
    assert [c.metadata.name for c in v1.list_namespaced_config_map("genomics").items] == ["mine"]
    with pytest.raises(ApiException) as ei:
        v1.list_namespaced_config_map("robotics")
    assert 'in the namespace "robotics"' in _status(ei.value)["message"]
    # a ClusterRole bound by a RoleBinding is also limited to that namespace
    _role(sim, "ClusterRole", "ns-reader", [_rule("namespaces", "get")])
    _bind(sim, "bot-ns", "ClusterRole", "ns-reader", [SA], ns="robotics")
    assert v1.read_namespace("robotics").metadata.name == "robotics"  # namespace = itself
    with pytest.raises(ApiException):
        v1.read_namespace("genomics")


def test_serviceaccount_subject_namespace_defaults_to_the_binding(
    sim: SimCluster, bot: client.ApiClient
) -> None:
    rules = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]
    _role(sim, "Role", "s", rules, ns="ml-vision")
    _bind(sim, "s", "Role", "s", [{"kind": "ServiceAccount", "name": "bot"}], ns="ml-vision")
    assert client.CoreV1Api(bot).list_namespaced_secret("ml-vision").items == []
    # without a namespace a ClusterRoleBinding's ServiceAccount subject matches no one
    _role(sim, "ClusterRole", "n", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}])
    _bind(sim, "n", "ClusterRole", "n", [{"kind": "ServiceAccount", "name": "bot"}])
    with pytest.raises(ApiException):
        client.CoreV1Api(bot).list_node()


def test_user_and_group_subjects(sim: SimCluster, bot: client.ApiClient) -> None:
    _role(sim, "ClusterRole", "n", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}])
    group = {"kind": "Group", "name": "system:serviceaccounts:ml-vision", "apiGroup": RBAC_GROUP}
    _bind(sim, "by-group", "ClusterRole", "n", [group])
    v1 = client.CoreV1Api(bot)
    assert v1.read_node("a100-00").metadata.name == "a100-00"
    _role(sim, "ClusterRole", "l", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}])
    _bind(sim, "by-user", "ClusterRole", "l", [{"kind": "User", "name": BOT}])
    assert v1.list_node(limit=1).items


def test_missing_role_is_named_in_the_403(sim: SimCluster, bot: client.ApiClient) -> None:
    _bind(sim, "dangling", "ClusterRole", "gone", [SA])
    with pytest.raises(ApiException) as ei:
        client.CoreV1Api(bot).list_node()
    assert _status(ei.value)["message"] == (
        f'nodes is forbidden: User "{BOT}" cannot list resource "nodes" in API group "" at the '
        'cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
    )


def test_resource_names_apply_to_lists_with_a_name_field_selector(
    sim: SimCluster, bot: client.ApiClient
) -> None:
    rules = [{**_rule("nodes", "get", "list", "watch"), "resourceNames": ["a100-00"]}]
    _role(sim, "ClusterRole", "one-node", rules)
    _bind(sim, "one-node", "ClusterRole", "one-node", [SA])
    v1 = client.CoreV1Api(bot)
    assert v1.read_node("a100-00")
    got = v1.list_node(field_selector="metadata.name=a100-00").items
    assert [n.metadata.name for n in got] == ["a100-00"]
    with pytest.raises(ApiException):
        v1.list_node()
    with pytest.raises(ApiException):
        v1.read_node("a100-01")


def test_subresource_rules(sim: SimCluster, bot: client.ApiClient) -> None:
    rules = [{"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]}]
    _role(sim, "ClusterRole", "status", rules)
    _bind(sim, "status", "ClusterRole", "status", [SA])
    v1 = client.CoreV1Api(bot)
    assert v1.read_node_status("a100-00").metadata.name == "a100-00"
    with pytest.raises(ApiException):
        v1.read_node("a100-00")


def test_rbac_changes_take_effect_at_once(sim: SimCluster, bot: client.ApiClient) -> None:
    rbac = client.RbacAuthorizationV1Api(make_api(sim))
    _role(sim, "Role", "r", [_rule("configmaps", "list")], ns="genomics")
    _bind(sim, "b", "Role", "r", [SA], ns="genomics")
    v1 = client.CoreV1Api(bot)
    assert v1.list_namespaced_config_map("genomics").items == []
    rbac.delete_namespaced_role("r", "genomics")
    with pytest.raises(ApiException) as ei:
        v1.list_namespaced_config_map("genomics")
    assert _status(ei.value)["message"].endswith(
        ': RBAC: role.rbac.authorization.k8s.io "r" not found'
    )
    _role(sim, "Role", "r", [_rule("configmaps", "list")], ns="genomics")
    assert v1.list_namespaced_config_map("genomics").items == []
    rbac.delete_namespaced_role_binding("b", "genomics")
    with pytest.raises(ApiException) as ei:
        v1.list_namespaced_config_map("genomics")
    assert ei.value.status == 403
    rbac.api_client.close()


def _apply(sim: SimCluster, token: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        sim.url + path + "?fieldManager=portal&force=true",
        data=json.dumps(body).encode(),
        method="PATCH",
        headers={"Content-Type": APPLY, "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_apply_that_creates_also_needs_create(sim: SimCluster, bot: client.ApiClient) -> None:
    token = bot.configuration.api_key["authorization"].removeprefix("Bearer ")
    rules = [{"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get", "patch"]}]
    _role(sim, "ClusterRole", "quota-patch", rules)
    _bind(sim, "quota-patch", "ClusterRole", "quota-patch", [SA])
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "new-quota"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
    }
    path = "/api/v1/namespaces/robotics/resourcequotas/new-quota"
    code, body = _apply(sim, token, path, quota)
    assert code == 403
    assert body["message"] == 'resourcequotas "new-quota" is forbidden: '
    assert body["reason"] == "Forbidden"
    assert body["details"] == {"name": "new-quota", "kind": "resourcequotas"}
    with pytest.raises(Exception):  # noqa: B017 - nothing was created
        sim.get("resourcequotas", "new-quota", "robotics")
    # an existing object: patch alone is enough
    existing = {**quota, "metadata": {"name": "gpu-quota"}}
    code, _ = _apply(sim, token, "/api/v1/namespaces/genomics/resourcequotas/gpu-quota", existing)
    assert code == 200
    _role(sim, "ClusterRole", "quota-create", [_rule("resourcequotas", "create")])
    _bind(sim, "quota-create", "ClusterRole", "quota-create", [SA])
    code, body = _apply(sim, token, path, quota)
    assert code == 201 and body["spec"]["hard"] == {"requests.nvidia.com/gpu": "2"}


def test_project_manifests_let_the_portal_do_its_job(sim: SimCluster) -> None:
    """deploy/kubernetes/rbac.yaml, loaded like kubectl apply, as the portal's identity."""
    if "gpu-quota-portal" not in {n["metadata"]["name"] for n in sim.list("namespaces")}:
        sim.create("namespaces", {"metadata": {"name": "gpu-quota-portal"}})
    stored = sim.apply_file(REPO / "deploy" / "kubernetes" / "rbac.yaml")
    assert {o["kind"] for o in stored} >= {"ServiceAccount", "ClusterRole", "RoleBinding"}
    assert sim.apply_file(REPO / "deploy" / "kubernetes" / "rbac.yaml")  # again: updates
    portal = make_api(sim, token=sim.issue_token("gpu-quota-portal", "gpu-quota-portal"))
    v1 = client.CoreV1Api(portal)
    assert v1.list_node(limit=2).items
    v1.patch_node("v100-00", {"metadata": {"labels": {"portal": "yes"}}})
    with pytest.raises(ApiException) as ei:
        v1.delete_node("v100-00")
    assert _status(ei.value)["message"] == (
        'nodes "v100-00" is forbidden: User "system:serviceaccount:gpu-quota-portal:'
        'gpu-quota-portal" cannot delete resource "nodes" in API group "" at the cluster scope'
    )
    with pytest.raises(ApiException) as ei:
        v1.list_namespaced_secret("gpu-operator")
    assert ei.value.status == 403
    portal.close()


def test_discovery_lists_rbac_reviews_and_token_request(sim: SimCluster) -> None:
    def get(path: str) -> dict:
        req = urllib.request.Request(
            sim.url + path, headers={"Authorization": f"Bearer {sim.token}"}
        )
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    rbac = {r["name"]: r for r in get("/apis/rbac.authorization.k8s.io/v1")["resources"]}
    assert set(rbac) == {"roles", "rolebindings", "clusterroles", "clusterrolebindings"}
    assert rbac["roles"]["namespaced"] and not rbac["clusterroles"]["namespaced"]
    assert all("shortNames" not in r for r in rbac.values())
    authz = {r["name"]: r for r in get("/apis/authorization.k8s.io/v1")["resources"]}
    assert authz["selfsubjectaccessreviews"]["verbs"] == ["create"]
    assert authz["selfsubjectrulesreviews"]["kind"] == "SelfSubjectRulesReview"
    authn = {r["name"]: r for r in get("/apis/authentication.k8s.io/v1")["resources"]}
    assert authn["selfsubjectreviews"]["verbs"] == ["create"]
    core = {r["name"]: r for r in get("/api/v1")["resources"]}
    assert core["serviceaccounts/token"] == {
        "name": "serviceaccounts/token",
        "singularName": "",
        "namespaced": True,
        "group": "authentication.k8s.io",
        "version": "v1",
        "kind": "TokenRequest",
        "verbs": ["create"],
    }


def test_bootstrap_policy(sim: SimCluster) -> None:
    admin = sim.get("clusterrolebindings", "cluster-admin")
    assert admin["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}
    ]
    assert admin["metadata"]["labels"] == {"kubernetes.io/bootstrapping": "rbac-defaults"}
    basic = sim.get("clusterroles", "system:basic-user")["rules"]
    assert {r for rule in basic for r in rule["resources"]} == {
        "selfsubjectaccessreviews",
        "selfsubjectrulesreviews",
        "selfsubjectreviews",
    }


# ---------------------------------------------------------------------- reviews
def test_self_subject_access_review(sim: SimCluster, bot: client.ApiClient) -> None:
    authz = client.AuthorizationV1Api(bot)

    def review(**attrs: Any) -> client.V1SubjectAccessReviewStatus:
        key = "nonResourceAttributes" if "path" in attrs else "resourceAttributes"
        return authz.create_self_subject_access_review({"spec": {key: attrs}}).status

    denied = review(verb="list", resource="pods", namespace="ml-vision")
    assert (denied.allowed, denied.denied, denied.reason) == (False, None, None)
    _role(sim, "Role", "p", [_rule("pods", "list")], "ml-vision")
    _bind(sim, "p", "Role", "p", [SA], ns="ml-vision")
    allowed = review(verb="list", resource="pods", namespace="ml-vision")
    assert allowed.allowed is True
    assert allowed.reason == (
        'RBAC: allowed by RoleBinding "p/ml-vision" of Role "p" to ServiceAccount "bot/ml-vision"'
    )
    assert review(verb="get", path="/healthz").allowed is True
    assert review(verb="get", path="/metrics").allowed is False
    admin = client.AuthorizationV1Api(make_api(sim))
    masters = admin.create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"verb": "delete", "resource": "nodes"}}}
    ).status
    assert (masters.allowed, masters.reason) == (True, None)  # system:masters short-circuit
    with pytest.raises(ApiException) as ei:
        authz.create_self_subject_access_review({"spec": {}})
    assert ei.value.status == 422
    assert _status(ei.value)["message"] == (
        '.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: null: '
        "exactly one of nonResourceAttributes or resourceAttributes must be specified"
    )
    req = urllib.request.Request(
        sim.url + "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        headers={"Authorization": f"Bearer {sim.token}"},
    )
    with pytest.raises(urllib.error.HTTPError) as he:
        urllib.request.urlopen(req)
    assert he.value.code == 405


def test_self_subject_rules_review(sim: SimCluster, bot: client.ApiClient) -> None:
    authz = client.AuthorizationV1Api(bot)
    rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"]},
        {"nonResourceURLs": ["/logs/*"], "verbs": ["get"]},
    ]
    _role(sim, "ClusterRole", "mixed", rules)
    _bind(sim, "mixed", "ClusterRole", "mixed", [SA], ns="genomics")
    _bind(sim, "dangling", "Role", "gone", [SA], ns="genomics")
    status = authz.create_self_subject_rules_review({"spec": {"namespace": "genomics"}}).status
    resource = [
        (r.api_groups, r.resources, r.resource_names, r.verbs) for r in status.resource_rules
    ]
    assert ([""], ["configmaps"], ["a"], ["get"]) in resource
    reviews = ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]
    assert (["authorization.k8s.io"], reviews, None, ["create"]) in resource
    assert ["/logs/*"] in [r.non_resource_urls for r in status.non_resource_rules]
    assert status.incomplete is False
    assert status.evaluation_error == 'role.rbac.authorization.k8s.io "gone" not found'
    elsewhere = authz.create_self_subject_rules_review({"spec": {"namespace": "robotics"}}).status
    assert ([""], ["configmaps"], ["a"], ["get"]) not in [
        (r.api_groups, r.resources, r.resource_names, r.verbs) for r in elsewhere.resource_rules
    ]
    with pytest.raises(ApiException) as ei:
        authz.create_self_subject_rules_review({"spec": {}})
    assert ei.value.status == 400 and _status(ei.value)["message"] == "no namespace on request"
