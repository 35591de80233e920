"""The self reviews: what may I do, what are my rules, who am I (nothing is stored).

``kubectl auth can-i`` posts a SelfSubjectAccessReview, ``kubectl auth can-i --list`` a
SelfSubjectRulesReview and ``kubectl auth whoami`` a SelfSubjectReview. Each is answered
from the requesting user and the same authorizer that guards every request, as the real
REST handlers do:

* ``pkg/registry/authorization/selfsubjectaccessreview/rest.go`` with
  ``pkg/apis/authorization/validation/validation.go`` and
  ``pkg/registry/authorization/util/helpers.go`` (the review's attributes; an empty
  version means ``*``); status ``allowed``/``denied``/``reason`` of the authorizer;
* ``pkg/registry/authorization/selfsubjectrulesreview/rest.go`` (a namespace is required;
  ``RulesFor`` of ``plugin/pkg/auth/authorizer/rbac/rbac.go``: a rule is listed under
  ``resourceRules`` when it names resources and under ``nonResourceRules`` when it names
  URLs; the answer is a new object without the spec);
* ``pkg/registry/authentication/selfsubjectreview/rest.go`` (``status.userInfo``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from simcluster import auth
from simcluster.context import User
from simcluster.errors import ApiError
from simcluster.requestinfo import non_resource_attributes, resource_attributes

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

AUTHZ = "authorization.k8s.io/v1"
AUTHN = "authentication.k8s.io/v1"


def _check_kind(body: Any, api_version: str, kind: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "the body of the request must be a JSON object", "BadRequest")
    if body.get("kind") not in (None, "", kind):
        raise ApiError(
            400,
            f"the API version in the data ({body.get('apiVersion')}) does not match the "
            f"expected API version ({api_version}) or kind {body.get('kind')!r} is not "
            f"{kind!r}",
            "BadRequest",
        )
    return body


def _field_value(value: Any) -> str:
    """How ``field.Invalid`` prints a value: JSON of the internal type (its Go field names,
    ``authorization.NonResourceAttributes{Path, Verb}``), ``null`` for a nil pointer
    (apimachinery v0.36 ``field.Error.ErrorBody``)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict) and set(value) <= {"path", "verb"}:
        value = {"Path": value.get("path") or "", "Verb": value.get("verb") or ""}
    return json.dumps(value, separators=(",", ":"))


def _invalid(kind_group: str, causes: list[tuple[str, Any, str]]) -> ApiError:
    """``apierrors.NewInvalid`` with the review's (empty, internal) kind and name ``""``."""
    bodies = [f"Invalid value: {_field_value(v)}: {d}" for _, v, d in causes]
    errs = [f"{f}: {b}" for (f, _, _), b in zip(causes, bodies, strict=True)]
    agg = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
    details = {
        "group": kind_group,
        "causes": [
            {"reason": "FieldValueInvalid", "message": b, "field": f}
            for (f, _, _), b in zip(causes, bodies, strict=True)
        ],
    }
    return ApiError(422, f'.{kind_group} "" is invalid: {agg}', "Invalid", details)


def _meta_not_empty(meta: Any) -> bool:
    if not isinstance(meta, dict):
        return bool(meta)
    return any(v not in (None, "", {}, [], 0) for k, v in meta.items() if k != "managedFields")


def self_subject_access_review(cluster: SimCluster, user: User, body: Any) -> dict[str, Any]:
    """Answer a SelfSubjectAccessReview with the authorizer's decision."""
    body = _check_kind(body, AUTHZ, "SelfSubjectAccessReview")
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise ApiError(400, "spec must be an object", "BadRequest")
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    for value in (ra, nra):
        if value is not None and not isinstance(value, dict):
            raise ApiError(400, "the attributes of the review must be objects", "BadRequest")
    causes: list[tuple[str, Any, str]] = []
    if ra is not None and nra is not None:
        causes.append(
            (
                "spec.nonResourceAttributes",
                nra,
                "cannot be specified in combination with resourceAttributes",
            )
        )
    if ra is None and nra is None:
        causes.append(
            (
                "spec.resourceAttributes",
                None,
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )
        )
    if _meta_not_empty(body.get("metadata")):
        causes.append(("metadata", body.get("metadata"), "must be empty"))
    if causes:
        raise _invalid("authorization.k8s.io", causes)
    if ra is not None:
        attrs = resource_attributes(
            ra.get("verb") or "",
            ra.get("resource") or "",
            group=ra.get("group") or "",
            version=ra.get("version") or "*",
            namespace=ra.get("namespace") or "",
            name=ra.get("name") or "",
            subresource=ra.get("subresource") or "",
        )
    else:
        attrs = non_resource_attributes(nra.get("verb") or "", nra.get("path") or "")
    allowed, reason = cluster.authz.authorize(user, attrs)
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": AUTHZ,
        "metadata": {},  # the create handler's field manager fills it (server.py)
        "spec": spec,
        "status": status,
    }


def self_subject_rules_review(cluster: SimCluster, user: User, body: Any) -> dict[str, Any]:
    """Answer a SelfSubjectRulesReview with the user's rules in ``spec.namespace``."""
    body = _check_kind(body, AUTHZ, "SelfSubjectRulesReview")
    ns = (body.get("spec") or {}).get("namespace") or ""
    if not ns:
        raise ApiError(400, "no namespace on request", "BadRequest")
    rules, error = cluster.authz.rules_for(user, ns)
    resource_rules, non_resource_rules = [], []
    for r in rules:
        if r.get("resources"):
            rr: dict[str, Any] = {"verbs": r.get("verbs")}
            for key in ("apiGroups", "resources", "resourceNames"):
                if r.get(key):
                    rr[key] = r[key]
            resource_rules.append(rr)
        if r.get("nonResourceURLs"):
            non_resource_rules.append(
                {"verbs": r.get("verbs"), "nonResourceURLs": r["nonResourceURLs"]}
            )
    status: dict[str, Any] = {
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": False,
    }
    if error:
        status["evaluationError"] = error
    return {
        "kind": "SelfSubjectRulesReview",
        "apiVersion": AUTHZ,
        "metadata": {},  # a new object: zero creationTimestamp is omitted (omitzero, v1.33+)
        "spec": {},
        "status": status,
    }


def self_subject_review(cluster: SimCluster, user: User, body: Any) -> dict[str, Any]:
    """Answer a SelfSubjectReview with the requesting user's attributes."""
    _check_kind(body, AUTHN, "SelfSubjectReview")
    info: dict[str, Any] = {"username": user.name}
    if user.uid:
        info["uid"] = user.uid
    if user.groups:
        info["groups"] = list(user.groups)
    if user.extra:
        info["extra"] = {k: list(v) for k, v in user.extra.items()}
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": AUTHN,
        "metadata": {"creationTimestamp": auth.rfc3339(auth.clock())},
        "status": {"userInfo": info},
    }


def with_managed_fields(request: dict[str, Any], answer: dict[str, Any], manager: str) -> None:
    """A SelfSubjectAccessReview answers with the request's own metadata, which the create
    handler's field manager has filled: an ``Update`` entry of ``manager`` for the fields
    sent (pkg/registry/authorization/selfsubjectaccessreview/rest.go returns the request
    object; staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go)."""
    from simcluster.ssa import record_update

    sent = {
        "apiVersion": AUTHZ,
        "kind": "SelfSubjectAccessReview",
        "metadata": {},
        "spec": request.get("spec") or {},
    }
    record_update(None, sent, manager)
    answer["metadata"] = sent["metadata"]


HANDLERS = {
    "selfsubjectaccessreviews": self_subject_access_review,
    "selfsubjectrulesreviews": self_subject_rules_review,
    "selfsubjectreviews": self_subject_review,
}
