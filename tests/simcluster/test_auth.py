"""Authentication: bearer tokens, the TokenRequest API, TLS and protobuf request bodies.

Real sources followed (kubernetes/kubernetes):
``staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go`` (the 401 body),
``staging/src/k8s.io/apiserver/pkg/authentication/request/bearertoken/bearertoken.go``,
``pkg/registry/core/serviceaccount/storage/token.go`` and
``pkg/apis/authentication/validation/validation.go`` (TokenRequest),
``pkg/serviceaccount/claims.go`` (claims and the bound-token validator),
``staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go`` (the user),
``staging/src/k8s.io/client-go/tools/clientcmd/client_config.go`` (kubectl sends a token
only over TLS), ``staging/src/k8s.io/apimachinery/pkg/runtime/serializer/protobuf/
protobuf.go`` and ``runtime/generated.proto`` (the protobuf envelope).
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from simcluster import SimCluster, auth, protobuf
from simcluster.errors import ApiError

from .helpers import jwt_claims, make_api

UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


def _raw(sim: SimCluster, path: str, headers: dict[str, str] | None = None, **kw: Any):
    """(status, decoded body) of a plain HTTP request to the simulator."""
    req = urllib.request.Request(sim.url + path, headers=headers or {}, **kw)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _sa(v1: client.CoreV1Api, ns: str = "ml-vision", name: str = "bot") -> str:
    return v1.create_namespaced_service_account(ns, {"metadata": {"name": name}}).metadata.uid


def _whoami(sim: SimCluster, token: str) -> dict[str, Any]:
    with make_api(sim, token=token) as a:
        review = client.AuthenticationV1Api(a).create_self_subject_review({})
        return a.sanitize_for_serialization(review.status.user_info)


# ------------------------------------------------------------------- bearer tokens
@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Bearer not-a-token", "bearer x.y.z"],
)
def test_missing_or_bad_token_is_401_with_the_real_body(sim: SimCluster, header) -> None:
    headers = {} if header is None else {"Authorization": header}
    assert _raw(sim, "/api/v1/nodes", headers) == (401, UNAUTHORIZED)


def test_anonymous_requests_are_refused_even_for_health_and_discovery(sim: SimCluster) -> None:
    # like --anonymous-auth=false: system:public-info-viewer never sees an anonymous user
    for path in ("/healthz", "/version", "/api", "/apis"):
        assert _raw(sim, path)[0] == 401
    assert _raw(sim, "/_sim/stats")[0] == 200  # the test harness's endpoints stay open


def test_admin_token_given_or_random(sim: SimCluster) -> None:
    assert len(sim.token) >= 32 and sim.token != SimCluster.from_fleet({}).token
    fixed = SimCluster.from_fleet({}, token="sekret")
    assert fixed.token == "sekret"
    assert fixed.authn.authenticate("Bearer sekret").name == "kubernetes-admin"
    assert fixed.authn.authenticate("Bearer sekret2") is None
    me = _whoami(sim, sim.token)
    assert me == {
        "username": "kubernetes-admin",
        "groups": ["system:masters", "system:authenticated"],
    }


def test_token_request_issues_a_working_serviceaccount_token(
    sim: SimCluster, v1: client.CoreV1Api
) -> None:
    uid = _sa(v1)
    before = time.time()
    tr = v1.create_namespaced_service_account_token("bot", "ml-vision", {"spec": {}})
    assert tr.metadata.name == "bot" and tr.metadata.namespace == "ml-vision"
    assert tr.spec.expiration_seconds == 3600
    assert tr.spec.audiences == ["https://kubernetes.default.svc.cluster.local"]
    exp = tr.status.expiration_timestamp.timestamp()
    assert before + 3600 - 2 <= exp <= time.time() + 3600 + 1
    token = tr.status.token
    claims = jwt_claims(token)
    assert claims["iss"] == "https://kubernetes.default.svc.cluster.local"
    assert claims["sub"] == "system:serviceaccount:ml-vision:bot"
    assert claims["aud"] == ["https://kubernetes.default.svc.cluster.local"]
    assert claims["exp"] - claims["iat"] == 3600 and claims["nbf"] == claims["iat"]
    assert claims["kubernetes.io"] == {
        "namespace": "ml-vision",
        "serviceaccount": {"name": "bot", "uid": uid},
    }
    assert _whoami(sim, token) == {
        "username": "system:serviceaccount:ml-vision:bot",
        "uid": uid,
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:ml-vision",
            "system:authenticated",
        ],
        "extra": {"authentication.kubernetes.io/credential-id": [f"JTI={claims['jti']}"]},
    }


def test_token_request_validation_errors(sim: SimCluster, v1: client.CoreV1Api) -> None:
    _sa(v1)
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_service_account_token(
            "bot", "ml-vision", {"spec": {"expirationSeconds": 599}}
        )
    body = json.loads(ei.value.body)
    assert ei.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"] == (
        'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: '
        "Invalid value: 599: may not specify a duration less than 10 minutes"
    )
    assert body["details"] == {
        "group": "authentication.k8s.io",
        "kind": "TokenRequest",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 599: may not specify a duration less than 10 minutes",
                "field": "spec.expirationSeconds",
            }
        ],
    }
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_service_account_token(
            "bot", "ml-vision", {"spec": {"expirationSeconds": (1 << 32) + 1}}
        )
    assert (
        "may not specify a duration larger than 2^32 seconds"
        in json.loads(ei.value.body)["message"]
    )
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_service_account_token(
            "bot", "ml-vision", {"metadata": {"name": "other"}, "spec": {}}
        )
    assert json.loads(ei.value.body)["message"] == (
        'TokenRequest.authentication.k8s.io "bot" is invalid: metadata.name: Invalid value: '
        '"other": must match the service account name if specified'
    )
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_service_account_token("nope", "ml-vision", {"spec": {}})
    assert ei.value.status == 404
    assert json.loads(ei.value.body)["message"] == 'serviceaccounts "nope" not found'
    with pytest.raises(ApiError) as ae:
        sim.issue_token("ml-vision", "nope")
    assert ae.value.code == 404


def test_token_rejected_when_expired_with_go_jose_leeway(
    sim: SimCluster, v1: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sa(v1)
    token = sim.issue_token("ml-vision", "bot", expiration_s=600)
    now = time.time()
    monkeypatch.setattr(auth, "clock", lambda: now + 600 + 30)  # within the 60 s leeway
    assert (
        _raw(sim, "/api/v1/namespaces/ml-vision/pods", {"Authorization": f"Bearer {token}"})[0]
        == 403
    )  # authenticated (no RBAC grant)
    monkeypatch.setattr(auth, "clock", lambda: now + 600 + 61)
    assert _raw(sim, "/api/v1/pods", {"Authorization": f"Bearer {token}"}) == (401, UNAUTHORIZED)


def test_token_revoked_when_serviceaccount_deleted_or_recreated(
    sim: SimCluster, v1: client.CoreV1Api
) -> None:
    _sa(v1)
    token = sim.issue_token("ml-vision", "bot")
    assert _whoami(sim, token)["username"] == "system:serviceaccount:ml-vision:bot"
    v1.delete_namespaced_service_account("bot", "ml-vision")
    assert _raw(sim, "/api", {"Authorization": f"Bearer {token}"}) == (401, UNAUTHORIZED)
    _sa(v1)  # same name, new uid: the old token stays invalid
    assert _raw(sim, "/api", {"Authorization": f"Bearer {token}"}) == (401, UNAUTHORIZED)
    assert (
        _whoami(sim, sim.issue_token("ml-vision", "bot"))["uid"]
        == sim.get("serviceaccounts", "bot", "ml-vision")["metadata"]["uid"]
    )


def test_tampered_or_foreign_audience_token_is_401(sim: SimCluster, v1: client.CoreV1Api) -> None:
    _sa(v1)
    token = sim.issue_token("ml-vision", "bot")
    head, payload, sig = token.split(".")
    claims = jwt_claims(token)
    claims["sub"] = "system:serviceaccount:kube-system:admin"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    for bad in (f"{head}.{forged}.{sig}", f"{head}.{payload}.{sig[:-2]}AA"):
        assert _raw(sim, "/api", {"Authorization": f"Bearer {bad}"}) == (401, UNAUTHORIZED)
    other = sim.issue_token("ml-vision", "bot", audiences=["vault"])
    assert jwt_claims(other)["aud"] == ["vault"]
    assert _raw(sim, "/api", {"Authorization": f"Bearer {other}"}) == (401, UNAUTHORIZED)
    # another simulator's tokens are signed with another key
    foreign = SimCluster.from_fleet({})
    foreign.create("serviceaccounts", {"metadata": {"name": "bot", "namespace": "default"}})
    assert sim.authn.authenticate("Bearer " + foreign.issue_token("default", "bot")) is None


def test_pod_bound_token(sim: SimCluster, v1: client.CoreV1Api) -> None:
    _sa(v1)
    pod = {
        "metadata": {"name": "runner"},
        "spec": {"serviceAccountName": "bot", "containers": [{"name": "c", "image": "x"}]},
    }
    uid = v1.create_namespaced_pod("ml-vision", pod).metadata.uid
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "runner", "uid": uid}
    tr = v1.create_namespaced_service_account_token(
        "bot", "ml-vision", {"spec": {"boundObjectRef": ref}}
    )
    token = tr.status.token
    extra = _whoami(sim, token)["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["runner"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [uid]
    v1.delete_namespaced_pod("runner", "ml-vision")
    assert _raw(sim, "/api", {"Authorization": f"Bearer {token}"}) == (401, UNAUTHORIZED)
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_service_account_token(
            "bot", "ml-vision", {"spec": {"boundObjectRef": {**ref, "kind": "ConfigMap"}}}
        )
    assert ei.value.status == 400
    assert json.loads(ei.value.body)["message"] == (
        "cannot bind token to object of type /v1, Kind=ConfigMap"
    )
    other = {**pod, "metadata": {"name": "other"}, "spec": {**pod["spec"]}}
    other["spec"]["serviceAccountName"] = "default"
    v1.create_namespaced_pod("ml-vision", other)
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_service_account_token(
            "bot", "ml-vision", {"spec": {"boundObjectRef": {"kind": "Pod", "name": "other"}}}
        )
    assert json.loads(ei.value.body)["message"] == (
        'cannot bind token for serviceaccount "bot" to pod running with different '
        "serviceaccount name."
    )


# ------------------------------------------------------------------ kubeconfig + TLS
def test_kubeconfig_is_https_with_the_pinned_certificate(sim: SimCluster, v1, tmp_path) -> None:
    _sa(v1)
    admin = config.new_client_from_config(config_file=str(sim.write_kubeconfig(tmp_path / "a")))
    assert admin.configuration.host.startswith("https://")
    assert client.CoreV1Api(admin).read_namespace("ml-vision").metadata.name == "ml-vision"
    kc = sim.write_kubeconfig(tmp_path / "b", token=sim.issue_token("ml-vision", "bot"), user="bot")
    doc = yaml.safe_load(kc.read_text())
    assert doc["current-context"] == "bot" and doc["users"][0]["name"] == "bot"
    bot = config.new_client_from_config(config_file=str(kc))
    review = client.AuthenticationV1Api(bot).create_self_subject_review({})
    assert review.status.user_info.username == "system:serviceaccount:ml-vision:bot"
    # the certificate verifies for 127.0.0.1 with the stdlib too (no skip-verify anywhere)
    ctx = ssl.create_default_context(cadata=sim.ca_pem)
    req = urllib.request.Request(
        "https" + sim.url.removeprefix("http") + "/version",
        headers={"Authorization": f"Bearer {sim.token}"},
    )
    with urllib.request.urlopen(req, context=ctx) as r:
        assert json.loads(r.read())["major"] == "1"
    admin.close()
    bot.close()


# ------------------------------------------------------------------------ protobuf
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, payload: bytes | str | int) -> bytes:
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version) + _field(2, kind)
    return protobuf.MAGIC + _field(1, type_meta) + _field(2, raw)


def test_protobuf_configmap_decodes_like_json(sim: SimCluster) -> None:
    meta = _field(1, "pb") + _field(3, "") + _field(7, 0) + _field(8, b"")
    meta += _field(11, _field(1, "team") + _field(2, "ml"))
    raw = _field(1, meta) + _field(2, _field(1, "k") + _field(2, "v")) + _field(4, 0)
    obj = protobuf.decode(_envelope("v1", "ConfigMap", raw))
    # zero omitempty scalars dropped, a zero Time is null, a present pointer bool kept
    assert obj == {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": "pb", "creationTimestamp": None, "labels": {"team": "ml"}},
        "immutable": False,
        "data": {"k": "v"},
    }
    headers = {"Content-Type": protobuf.MEDIA_TYPE, "Authorization": f"Bearer {sim.token}"}
    body = _envelope("v1", "ConfigMap", raw)
    code, out = _raw(sim, "/api/v1/namespaces/ml-vision/configmaps", headers, data=body)
    assert code == 201 and out["data"] == {"k": "v"}
    assert sim.get("configmaps", "pb", "ml-vision")["metadata"]["labels"] == {"team": "ml"}


def test_protobuf_of_other_types_keeps_415(sim: SimCluster) -> None:
    headers = {"Content-Type": protobuf.MEDIA_TYPE, "Authorization": f"Bearer {sim.token}"}
    raw = _field(1, _field(1, "p"))
    body = _envelope("v1", "Pod", raw)
    code, out = _raw(sim, "/api/v1/namespaces/ml-vision/pods", headers, data=body)
    assert code == 415 and out["reason"] == "UnsupportedMediaType"
    code, out = _raw(sim, "/api/v1/namespaces/ml-vision/configmaps", headers, data=b"{}")
    assert code == 400 and out["reason"] == "BadRequest"
