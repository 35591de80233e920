"""Authentication: the admin's static token and ServiceAccount tokens from the TokenRequest API.

Every API request must carry ``Authorization: Bearer <token>`` (anonymous requests are
refused, like ``kube-apiserver --anonymous-auth=false``); a missing, malformed, expired or
unknown token gets the real ``401 Unauthorized`` Status. Two kinds of token exist:

* the admin token (``SimCluster(token=...)``, random when not given): user
  ``kubernetes-admin`` in ``system:masters`` (a static token file entry);
* ServiceAccount tokens issued by ``POST .../serviceaccounts/{name}/token``
  (``pkg/registry/core/serviceaccount/storage/token.go``): JWTs (HMAC-signed with a
  per-simulator secret) with the claims of ``pkg/serviceaccount/claims.go``. Like the real
  bound-token validator a token is accepted only while it is unexpired (one minute of
  leeway, as go-jose allows), its audiences include the API server's, its signature
  checks, and its ServiceAccount (and the Pod, Secret or Node it is bound to) still exists
  with the same uid: deleting the ServiceAccount revokes its tokens.

The user of a ServiceAccount token is ``system:serviceaccount:<ns>:<name>`` with the
groups and ``extra`` (credential id, pod and node) that
``staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go`` gives it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from simcluster.context import User
from simcluster.errors import ApiError, not_found

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = (ISSUER,)
ADMIN_USER = User("kubernetes-admin", "", ("system:masters", "system:authenticated"))
LEEWAY_S = 60  # jwt.DefaultLeeway
MIN_EXPIRATION_S = 600
MAX_EXPIRATION_S = 1 << 32
DEFAULT_EXPIRATION_S = 3600
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
POD_NAME, POD_UID = "authentication.kubernetes.io/pod-name", "authentication.kubernetes.io/pod-uid"
NODE_NAME = "authentication.kubernetes.io/node-name"
NODE_UID = "authentication.kubernetes.io/node-uid"
_CACHE_MAX = 10_000

_WALL0, _MONO0 = time.time(), time.monotonic()


def _server_clock() -> float:
    """Wall-clock seconds from the monotonic clock: a cluster keeps its own time, so a test
    that travels in time in-process (time-machine patches ``time.time``) does not expire the
    simulator's tokens."""
    return _WALL0 + (time.monotonic() - _MONO0)


# time source for token expiry (tests move it forward instead of sleeping)
clock = _server_clock


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unauthorized() -> ApiError:
    """``apierrors.NewUnauthorized("Unauthorized")`` (filters/authentication.go)."""
    return ApiError(401, "Unauthorized", "Unauthorized")


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization`` header, as the bearertoken authenticator reads it."""
    auth = (header or "").strip()
    parts = auth.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return ""
    return parts[1]


class _Verified:
    """A token whose signature and claims checked once; re-validated cheaply per request."""

    __slots__ = ("exp", "nbf", "refs", "user")

    def __init__(self, user: User, exp: int, nbf: int, refs: list[tuple[str, str, str, str]]):
        self.user = user
        self.exp = exp
        self.nbf = nbf
        self.refs = refs  # (resource, namespace, name, uid): must still exist


class Authenticator:
    """Turns a bearer token into a :class:`~simcluster.context.User` (or ``None``)."""

    def __init__(self, cluster: SimCluster, admin_token: str | None) -> None:
        self.cluster = cluster
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self._admin_bytes = self.admin_token.encode("utf-8", "surrogateescape")
        self._key = os.urandom(32)
        self._kid = _b64(hashlib.sha256(self._key).digest()[:12])
        self._verified: dict[str, _Verified] = {}
        self._uids: dict[tuple[str, str, str], tuple[int, str]] = {}

    # ---------------------------------------------------------- authenticate
    def authenticate(self, header: str | None) -> User | None:
        """The user of the request's bearer token; ``None`` means 401."""
        token = bearer_token(header)
        if not token:
            return None
        if hmac.compare_digest(token.encode("utf-8", "surrogateescape"), self._admin_bytes):
            return ADMIN_USER
        v = self._verified.get(token)
        if v is None:
            v = self._verify(token)
            if v is None:
                return None
            if len(self._verified) >= _CACHE_MAX:
                self._verified.clear()
            self._verified[token] = v
        now = clock()
        if now - LEEWAY_S > v.exp or now + LEEWAY_S < v.nbf:
            return None
        for ref in v.refs:
            if not self._still_exists(*ref):
                return None
        return v.user

    def _verify(self, token: str) -> _Verified | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        signed = f"{parts[0]}.{parts[1]}".encode()
        try:
            sig = _unb64(parts[2])
            header = json.loads(_unb64(parts[0]))
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, binascii.Error):
            return None
        if not isinstance(header, dict) or header.get("alg") != "HS256":
            return None
        if not hmac.compare_digest(sig, hmac.new(self._key, signed, hashlib.sha256).digest()):
            return None
        if not isinstance(claims, dict) or claims.get("iss") != ISSUER:
            return None
        aud = claims.get("aud") or []
        if isinstance(aud, str):
            aud = [aud]
        if not set(aud) & set(API_AUDIENCES):
            return None
        k8s = claims.get("kubernetes.io") or {}
        ns = k8s.get("namespace") or ""
        sa = k8s.get("serviceaccount") or {}
        refs = [("serviceaccounts", ns, sa.get("name") or "", sa.get("uid") or "")]
        extra: dict[str, tuple[str, ...]] = {}
        pod, node, secret = k8s.get("pod"), k8s.get("node"), k8s.get("secret")
        if pod:
            refs.append(("pods", ns, pod["name"], pod["uid"]))
            extra[POD_NAME], extra[POD_UID] = (pod["name"],), (pod["uid"],)
        if secret:
            refs.append(("secrets", ns, secret["name"], secret["uid"]))
        if node:
            if not pod:  # a node-bound token; a pod's node is informational only
                refs.append(("nodes", "", node["name"], node.get("uid") or ""))
            extra[NODE_NAME] = (node["name"],)
            if node.get("uid"):
                extra[NODE_UID] = (node["uid"],)
        if claims.get("jti"):
            extra[CREDENTIAL_ID] = ("JTI=" + claims["jti"],)
        user = User(
            f"system:serviceaccount:{ns}:{sa.get('name')}",
            sa.get("uid") or "",
            ("system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"),
            dict(sorted(extra.items())),
        )
        try:
            return _Verified(user, int(claims["exp"]), int(claims.get("nbf") or 0), refs)
        except (KeyError, TypeError, ValueError):
            return None

    def _still_exists(self, resource: str, ns: str, name: str, uid: str) -> bool:
        """Does the bound object still exist with this uid? O(1) unless it was rewritten."""
        rec = self.cluster.store.get(resource, ns, name)
        if rec is None:
            return False
        key = (resource, ns, name)
        seen = self._uids.get(key)
        if seen is None or seen[0] != rec.rv:
            seen = (rec.rv, (rec.obj().get("metadata") or {}).get("uid") or "")
            if len(self._uids) >= _CACHE_MAX:
                self._uids.clear()
            self._uids[key] = seen
        return seen[1] == uid

    # ------------------------------------------------------------------ issue
    def sign(self, claims: dict[str, Any]) -> str:
        header = _b64(
            json.dumps({"alg": "HS256", "kid": self._kid}, separators=(",", ":")).encode()
        )
        payload = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        sig = hmac.new(self._key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        return f"{header}.{payload}.{_b64(sig)}"


def _invalid(name: str, field: str, value: Any, detail: str) -> ApiError:
    """``apierrors.NewInvalid`` for TokenRequest.authentication.k8s.io with one cause."""
    shown = f'"{value}"' if isinstance(value, str) else json.dumps(value)
    body = f"Invalid value: {shown}: {detail}"
    details: dict[str, Any] = {"group": "authentication.k8s.io", "kind": "TokenRequest"}
    if name:
        details = {"name": name, **details}
    details["causes"] = [{"reason": "FieldValueInvalid", "message": body, "field": field}]
    msg = f'TokenRequest.authentication.k8s.io "{name}" is invalid: {field}: {body}'
    return ApiError(422, msg, "Invalid", details)


def _gvk_string(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    if api_version.count("/") > 1:
        group, version = "", ""
    return f"{group}/{version}, Kind={kind}"


def token_request(
    cluster: SimCluster, ns: str, name: str, body: Any, params: dict[str, str]
) -> dict[str, Any]:
    """``POST .../serviceaccounts/{name}/token``: the TokenRequest with ``status.token``."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body of the request must be a JSON object", "BadRequest")
    if body.get("kind") not in (None, "", "TokenRequest"):
        raise ApiError(
            400,
            f"the API version in the data ({body.get('apiVersion')}) does not match the "
            f"expected API version (authentication.k8s.io/v1) or kind {body.get('kind')!r} "
            "is not 'TokenRequest'",
            "BadRequest",
        )
    meta = dict(body.get("metadata") or {})
    if meta.get("name") and meta["name"] != name:
        raise _invalid(
            name, "metadata.name", meta["name"], "must match the service account name if specified"
        )
    if meta.get("namespace") and meta["namespace"] != ns:
        raise _invalid(
            name,
            "metadata.namespace",
            meta["namespace"],
            "must match the service account namespace if specified",
        )
    store = cluster.store
    with store.lock:
        sa_rec = store.get("serviceaccounts", ns, name)
        if sa_rec is None:
            raise not_found("serviceaccounts", name)
        sa = sa_rec.obj()
        spec = dict(body.get("spec") or {})
        audiences = list(spec.get("audiences") or []) or list(API_AUDIENCES)
        exp = spec.get("expirationSeconds")
        exp = DEFAULT_EXPIRATION_S if exp is None else exp
        if not isinstance(exp, int) or isinstance(exp, bool):
            raise ApiError(400, f"expirationSeconds must be an integer, got {exp!r}", "BadRequest")
        now = clock()
        meta.setdefault("name", name)
        meta.setdefault("namespace", ns)
        meta["creationTimestamp"] = rfc3339(now)
        if exp < MIN_EXPIRATION_S:
            raise _invalid(
                "", "spec.expirationSeconds", exp, "may not specify a duration less than 10 minutes"
            )
        if exp > MAX_EXPIRATION_S:
            raise _invalid(
                "",
                "spec.expirationSeconds",
                exp,
                "may not specify a duration larger than 2^32 seconds",
            )
        k8s: dict[str, Any] = {
            "namespace": ns,
            "serviceaccount": {"name": name, "uid": sa["metadata"].get("uid", "")},
        }
        ref = spec.get("boundObjectRef")
        if ref:
            _bind(store, ns, name, ref, k8s)
    jti = str(uuid.uuid4())
    claims = {
        "aud": audiences,
        "exp": int(now) + exp,
        "iat": int(now),
        "iss": ISSUER,
        "jti": jti,
        "kubernetes.io": k8s,
        "nbf": int(now),
        "sub": f"system:serviceaccount:{ns}:{name}",
    }
    token = cluster.authn.sign(claims)
    out_spec = {"audiences": audiences, "expirationSeconds": exp, "boundObjectRef": ref or None}
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": meta,
        "spec": out_spec,
        "status": {"token": token, "expirationTimestamp": rfc3339(now + exp)},
    }


def _bind(store: Any, ns: str, sa_name: str, ref: dict[str, Any], k8s: dict[str, Any]) -> None:
    """Resolve ``spec.boundObjectRef`` (Pod, Secret or Node) into the token's claims."""
    api_version, kind, name = ref.get("apiVersion") or "", ref.get("kind") or "", ref.get("name")
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    resource = (
        {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}.get(kind) if not group else None
    )
    if resource is None:
        raise ApiError(
            400,
            f"cannot bind token to object of type {_gvk_string(api_version, kind)}",
            "BadRequest",
        )
    rec = store.get(resource, "" if kind == "Node" else ns, name or "")
    if rec is None:
        raise not_found(resource, name or "")
    obj = rec.obj()
    uid = obj["metadata"].get("uid", "")
    if kind == "Pod" and (obj.get("spec") or {}).get("serviceAccountName") != sa_name:
        raise ApiError(
            400,
            f'cannot bind token for serviceaccount "{sa_name}" to pod running with different '
            "serviceaccount name.",
            "BadRequest",
        )
    if ref.get("uid") and ref["uid"] != uid:
        raise ApiError(
            409,
            f'Operation cannot be fulfilled on {kind} "{name}": the UID in the bound object '
            f"reference ({ref['uid']}) does not match the UID in record. The object might have "
            "been deleted and then recreated",
            "Conflict",
            {"name": name, "kind": kind},
        )
    k8s[kind.lower()] = {"name": name, "uid": uid}
    if kind == "Pod":
        node_name = (obj.get("spec") or {}).get("nodeName")
        if node_name:
            node = store.get("nodes", "", node_name)
            node_uid = node.obj()["metadata"].get("uid", "") if node is not None else ""
            k8s["node"] = {"name": node_name, "uid": node_uid} if node_uid else {"name": node_name}


# ------------------------------------------------------------------ impersonation
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _split_sa_username(username: str) -> tuple[str, str] | None:
    """``serviceaccount.SplitUsername``: (namespace, name) of a valid SA user name."""
    prefix = "system:serviceaccount:"
    if not username.startswith(prefix):
        return None
    parts = username[len(prefix) :].split(":")
    if len(parts) != 2:
        return None
    ns, name = parts
    if not (len(ns) <= 63 and _DNS_LABEL.match(ns)):
        return None
    if not (len(name) <= 253 and _DNS_SUBDOMAIN.match(name)):
        return None
    return ns, name


def impersonate(authz: Any, requestor: User, headers: Any, path: str) -> User:
    """``filters/impersonation.go``: act as ``Impersonate-User`` (and groups, uid, extra).

    Each requested identity needs the ``impersonate`` verb on users, groups,
    serviceaccounts, uids or userextras; the first one refused is the 403. Without
    impersonation headers the requestor is returned unchanged.
    """
    from simcluster.rbac import forbidden
    from simcluster.requestinfo import resource_attributes

    requested = headers.get("Impersonate-User") or ""
    groups_req = headers.get_all("Impersonate-Group") or []
    uid_req = headers.get("Impersonate-Uid") or ""
    extras: list[tuple[str, str]] = []
    for key, value in headers.items():
        if key.lower().startswith("impersonate-extra-"):
            extras.append((unquote(key[len("Impersonate-Extra-") :].lower()), value))
    if not (requested or groups_req or extras or uid_req):
        return requestor
    if not requested:
        raise ApiError(
            500,
            f'Internal Server Error: "{path}": requested impersonation without '
            "impersonating a user",
            "InternalError",
        )
    checks = []
    sa = _split_sa_username(requested)
    if sa is not None:
        checks.append(
            resource_attributes(
                "impersonate", "serviceaccounts", namespace=sa[0], name=sa[1], version=""
            )
        )
    else:
        checks.append(resource_attributes("impersonate", "users", name=requested, version=""))
    checks += [resource_attributes("impersonate", "groups", name=g, version="") for g in groups_req]
    checks += [
        resource_attributes(
            "impersonate",
            "userextras",
            group="authentication.k8s.io",
            version="v1",
            name=v,
            subresource=k,
        )
        for k, v in extras
    ]
    if uid_req:
        checks.append(
            resource_attributes(
                "impersonate", "uids", group="authentication.k8s.io", version="v1", name=uid_req
            )
        )
    for attrs in checks:
        allowed, reason = authz.authorize(requestor, attrs)
        if not allowed:
            raise forbidden(requestor, attrs, reason)
    groups = list(groups_req)
    if sa is not None and not groups_req:
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa[0]}"]
    if requested == "system:anonymous":
        if "system:unauthenticated" not in groups:
            groups.append("system:unauthenticated")
    elif not {"system:authenticated", "system:unauthenticated"} & set(groups):
        groups.append("system:authenticated")
    extra: dict[str, tuple[str, ...]] = {}
    for k, v in extras:
        extra[k] = (*extra.get(k, ()), v)
    return User(requested, uid_req, tuple(groups), extra)
