"""Authorization: the ``system:masters`` shortcut, then RBAC, evaluated like kube-apiserver.

Sources followed (kubernetes/kubernetes):

* ``plugin/pkg/auth/authorizer/rbac/rbac.go`` (``RBACAuthorizer.Authorize`` / ``RulesFor``,
  ``RuleAllows``) and ``pkg/apis/rbac/v1/evaluation_helpers.go`` (``VerbMatches``,
  ``APIGroupMatches``, ``ResourceMatches`` with ``*`` and ``*/subresource``,
  ``ResourceNameMatches``: a rule with ``resourceNames`` never matches a request without a
  name such as create or list, ``NonResourceURLMatches`` with a trailing ``*``);
* ``pkg/registry/rbac/validation/rule.go`` (``VisitRulesFor``: every ClusterRoleBinding,
  then the RoleBindings of the request's namespace only; ``appliesTo`` for User, Group and
  ServiceAccount subjects; the ``allowed by ...`` source strings; a binding whose role is
  missing contributes an error that ends up in the 403 message);
* ``staging/src/k8s.io/apiserver/pkg/authorization/authorizerfactory/builtin.go``
  (members of ``system:masters`` are allowed before RBAC is asked);
* ``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go``
  (``ForbiddenStatusError``/``forbiddenMessage``) wrapped by apimachinery
  ``errors.NewForbidden`` for the 403 body, and ``handlers/update.go``
  (``withAuthorization``) for the extra ``create`` check of a create-on-apply;
* ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`` for the default roles.

It runs on every request, so it is cached: the bindings are indexed by subject, each
user's rules per namespace are compiled once, and decisions are memoized. Everything is
rebuilt when an RBAC object or a ServiceAccount changes (seen from the store's per-type
histories, so a namespace deletion that removes RoleBindings invalidates it too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simcluster.context import User
from simcluster.errors import ApiError
from simcluster.requestinfo import RequestInfo, resource_attributes

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

GROUP = "rbac.authorization.k8s.io"
RESOURCES = ("clusterroles", "clusterrolebindings", "roles", "rolebindings")
_WATCHED = (*RESOURCES, "serviceaccounts")
PRIVILEGED_GROUP = "system:masters"
_CACHE_MAX = 50_000


class ForbiddenError(ApiError):
    """403 whose ``details`` is kept even when empty (non-resource paths send ``{}``)."""

    def status(self) -> dict[str, Any]:
        body = super().status()
        if "details" not in body:
            code = body.pop("code")
            body["details"] = self.details or {}
            body["code"] = code
        return body


def _q(s: str) -> str:
    """Go's ``%q`` for the plain strings used in RBAC messages."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sanitize(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _aggregate(errors: list[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``."""
    seen: list[str] = []
    for e in errors:
        if e not in seen:
            seen.append(e)
    if len(seen) <= 1:
        return seen[0] if seen else ""
    return "[" + ", ".join(seen) + "]"


class Rule:
    """One PolicyRule, compiled to sets for the matching helpers."""

    __slots__ = ("groups", "names", "raw", "resources", "url_prefixes", "urls", "verbs")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.verbs = frozenset(raw.get("verbs") or ())
        self.groups = frozenset(raw.get("apiGroups") or ())
        self.resources = frozenset(raw.get("resources") or ())
        self.names = frozenset(raw.get("resourceNames") or ())
        urls = raw.get("nonResourceURLs") or ()
        self.urls = frozenset(urls)
        self.url_prefixes = tuple(u.rstrip("*") for u in urls if u.endswith("*"))

    def allows(self, a: RequestInfo) -> bool:
        """``RuleAllows``."""
        if "*" not in self.verbs and a.verb not in self.verbs:
            return False
        if not a.is_resource_request:
            if "*" in self.urls or a.path in self.urls:
                return True
            return any(a.path.startswith(p) for p in self.url_prefixes)
        if "*" not in self.groups and a.api_group not in self.groups:
            return False
        res = self.resources
        if a.subresource:
            combined = a.resource + "/" + a.subresource
            if "*" not in res and combined not in res and "*/" + a.subresource not in res:
                return False
        elif "*" not in res and a.resource not in res:
            return False
        return not self.names or a.name in self.names


class Binding:
    """A (Cluster)RoleBinding as the resolver needs it."""

    __slots__ = ("kind", "name", "namespace", "role_kind", "role_name", "subjects")

    def __init__(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ref = obj.get("roleRef") or {}
        self.kind = kind
        self.name = meta.get("name", "")
        self.namespace = meta.get("namespace", "") if kind == "RoleBinding" else ""
        self.role_kind = ref.get("kind", "")
        self.role_name = ref.get("name", "")
        self.subjects = [s for s in obj.get("subjects") or [] if isinstance(s, dict)]

    def subject_keys(self) -> list[tuple[tuple[str, str], int]]:
        """Index keys (``("u", username)`` / ``("g", group)``) of the subjects, in order."""
        out = []
        for i, s in enumerate(self.subjects):
            kind, name = s.get("kind"), s.get("name") or ""
            if kind == "User":
                out.append((("u", name), i))
            elif kind == "Group":
                out.append((("g", name), i))
            elif kind == "ServiceAccount":
                ns = s.get("namespace") or self.namespace
                if ns:
                    out.append((("u", f"system:serviceaccount:{ns}:{name}"), i))
        return out

    def describe(self, index: int) -> str:
        """``clusterRoleBindingDescriber`` / ``roleBindingDescriber``."""
        s = self.subjects[index]
        kind, name = s.get("kind", ""), s.get("name", "")
        if kind == "ServiceAccount":
            subject = f"{kind} {_q(name + '/' + (s.get('namespace') or self.namespace))}"
        else:
            subject = f"{kind} {_q(name)}"
        me = self.name if self.kind == "ClusterRoleBinding" else f"{self.name}/{self.namespace}"
        return f"{self.kind} {_q(me)} of {self.role_kind} {_q(self.role_name)} to {subject}"


class _State:
    """An immutable snapshot of the RBAC objects, indexed for lookups."""

    def __init__(self, cluster: SimCluster) -> None:
        store = cluster.store
        self.cluster_roles: dict[str, list[Rule]] = {}
        self.roles: dict[tuple[str, str], list[Rule]] = {}
        self.crb: dict[tuple[str, str], list[tuple[int, Binding, int]]] = {}
        self.rb: dict[str, dict[tuple[str, str], list[tuple[int, Binding, int]]]] = {}
        # per-snapshot caches: a reader holding an older snapshot never pollutes a newer one
        self.resolved: dict[tuple[Any, ...], _Resolved] = {}
        self.decisions: dict[tuple[Any, ...], tuple[bool, str]] = {}
        for (_, name), rec in store.objects["clusterroles"].items():
            self.cluster_roles[name] = _compile(rec.obj())
        for (ns, name), rec in store.objects["roles"].items():
            self.roles[(ns, name)] = _compile(rec.obj())
        keys, _, _ = store.key_range("clusterrolebindings", None)
        for order, key in enumerate(keys):
            b = Binding("ClusterRoleBinding", store.objects["clusterrolebindings"][key].obj())
            for k, i in b.subject_keys():
                self.crb.setdefault(k, []).append((order, b, i))
        keys, _, _ = store.key_range("rolebindings", None)
        for order, key in enumerate(keys):
            b = Binding("RoleBinding", store.objects["rolebindings"][key].obj())
            per_ns = self.rb.setdefault(b.namespace, {})
            for k, i in b.subject_keys():
                per_ns.setdefault(k, []).append((order, b, i))

    def role_rules(self, b: Binding) -> tuple[list[Rule] | None, str]:
        """``GetRoleReferenceRules``: the role's rules, or the lister's error."""
        if b.role_kind == "ClusterRole":
            rules = self.cluster_roles.get(b.role_name)
            return rules, "" if rules is not None else (
                f'clusterrole.rbac.authorization.k8s.io "{b.role_name}" not found'
            )
        if b.role_kind == "Role":
            rules = self.roles.get((b.namespace, b.role_name))
            return rules, "" if rules is not None else (
                f'role.rbac.authorization.k8s.io "{b.role_name}" not found'
            )
        return None, f"unsupported role reference kind: {_q(b.role_kind)}"


def _compile(obj: dict[str, Any]) -> list[Rule]:
    return [Rule(r) for r in obj.get("rules") or [] if isinstance(r, dict)]


def _applicable(
    index: dict[tuple[str, str], list[tuple[int, Binding, int]]], user: User
) -> list[tuple[Binding, int]]:
    """Bindings whose subjects include the user, in store order, each with its first subject."""
    found: dict[int, tuple[Binding, int]] = {}
    for key in (("u", user.name), *(("g", g) for g in user.groups)):
        for order, b, i in index.get(key, ()):
            prev = found.get(order)
            if prev is None or i < prev[1]:
                found[order] = (b, i)
    return [found[o] for o in sorted(found)]


class _Resolved:
    """One user's rules in one namespace: (binding, subject index, rule) plus errors."""

    __slots__ = ("entries", "errors")

    def __init__(self, entries: list[tuple[Binding, int, Rule]], errors: list[str]) -> None:
        self.entries = entries
        self.errors = errors


class Authorizer:
    """The union authorizer of this simulator: privileged groups, then RBAC."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self._seen_rv = -1
        self._gen: tuple[int, ...] = ()
        self._state: _State | None = None

    # ----------------------------------------------------------------- cache
    def _generation(self) -> tuple[int, ...]:
        """The last write to each RBAC type and to serviceaccounts (from their histories)."""
        out = []
        for r in _WATCHED:
            h = self.cluster.store.histories[r]
            out.append(h.events[-1].rv if h.events else h.floor)
        return tuple(out)

    def _current(self) -> _State:
        store = self.cluster.store
        state = self._state
        rv = store.rv
        if state is not None and rv == self._seen_rv:
            return state
        gen = self._generation()  # no lock: a write racing this is seen on the next request
        if state is not None and gen == self._gen:
            self._seen_rv = rv
            return state
        with store.lock:  # iterating the RBAC objects needs them to hold still
            gen = self._generation()
            if self._state is None or gen != self._gen:
                self._state = _State(self.cluster)
                self._gen = gen
            self._seen_rv = store.rv
            return self._state

    def _resolve(self, state: _State, user: User, ns: str) -> _Resolved:
        key = (user.name, user.groups, ns)
        cache = state.resolved
        got = cache.get(key)
        if got is not None:
            return got
        entries: list[tuple[Binding, int, Rule]] = []
        errors: list[str] = []
        bindings = _applicable(state.crb, user)
        if ns:
            bindings += _applicable(state.rb.get(ns, {}), user)
        for b, i in bindings:
            rules, err = state.role_rules(b)
            if rules is None:
                errors.append(err)
                continue
            entries.extend((b, i, r) for r in rules)
        got = _Resolved(entries, errors)
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = got
        return got

    # ------------------------------------------------------------- decisions
    def authorize(self, user: User | None, a: RequestInfo) -> tuple[bool, str]:
        """(allowed, reason) as the union authorizer answers; ``None`` user: internal caller."""
        if user is None or PRIVILEGED_GROUP in user.groups:
            return True, ""
        state = self._current()
        decisions = state.decisions
        key = (user.name, user.groups, a)
        hit = decisions.get(key)
        if hit is not None:
            return hit
        resolved = self._resolve(state, user, a.namespace)
        result = (False, "RBAC: " + _aggregate(resolved.errors) if resolved.errors else "")
        for b, i, rule in resolved.entries:
            if rule.allows(a):
                result = (True, "RBAC: allowed by " + b.describe(i))
                break
        if len(decisions) >= _CACHE_MAX:
            decisions.clear()
        decisions[key] = result
        return result

    def check(self, user: User | None, a: RequestInfo) -> None:
        """Raise the API server's 403 unless the request is allowed."""
        allowed, reason = self.authorize(user, a)
        if not allowed:
            raise forbidden(user, a, reason)

    def check_create_on_apply(self, rt_group: str, resource: str, ns: str, name: str) -> None:
        """A server-side apply that creates the object needs ``create`` too (update.go)."""
        from simcluster import context

        user = context.current().user
        attrs = resource_attributes("create", resource, group=rt_group, namespace=ns, name=name)
        allowed, reason = self.authorize(user, attrs)
        if allowed:
            return
        gr = f"{resource}.{rt_group}" if rt_group else resource
        details = (
            {"name": name, "group": rt_group, "kind": resource}
            if rt_group
            else {
                "name": name,
                "kind": resource,
            }
        )
        raise ApiError(403, f'{gr} "{name}" is forbidden: {reason}', "Forbidden", details)

    def rules_for(self, user: User, ns: str) -> tuple[list[dict[str, Any]], str]:
        """``RulesFor``: the user's PolicyRules in ``ns`` and the evaluation error text."""
        resolved = self._resolve(self._current(), user, ns)
        return [rule.raw for _, _, rule in resolved.entries], _aggregate(resolved.errors)


def forbidden(user: User | None, a: RequestInfo, reason: str) -> ApiError:
    """``responsewriters.ForbiddenStatusError`` for a denied request."""
    username = user.name if user is not None else ""
    if not a.is_resource_request:
        msg = f"User {_q(username)} cannot {a.verb} path {_q(a.path)}"
    else:
        res = a.resource + ("/" + a.subresource if a.subresource else "")
        where = f"in the namespace {_q(a.namespace)}" if a.namespace else "at the cluster scope"
        msg = (
            f"User {_q(username)} cannot {a.verb} resource {_q(res)} in API group "
            f"{_q(a.api_group)} {where}"
        )
    msg = _sanitize(msg)
    if reason:
        msg = f"{msg}: {reason}"
    details: dict[str, str] = {}
    if a.name:
        details["name"] = a.name
    if a.api_group:
        details["group"] = a.api_group
    if a.resource:
        details["kind"] = a.resource
    if not a.resource and not a.api_group:
        text = f"forbidden: {msg}"
    else:
        gr = f"{a.resource}.{a.api_group}" if a.api_group else a.resource
        text = f"{gr} {_q(a.name)} is forbidden: {msg}" if a.name else f"{gr} is forbidden: {msg}"
    return ForbiddenError(403, text, "Forbidden", details)


# ------------------------------------------------------------------ bootstrap policy
_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
_ANNOTATIONS = {"rbac.authorization.kubernetes.io/autoupdate": "true"}


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": dict(_LABELS), "annotations": dict(_ANNOTATIONS)},
        "rules": rules,
    }


def _cluster_binding(name: str, groups: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(_LABELS), "annotations": dict(_ANNOTATIONS)},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups],
    }


def bootstrap_objects() -> list[tuple[str, dict[str, Any]]]:
    """The default roles and bindings this simulator needs (bootstrappolicy/policy.go).

    ``cluster-admin`` (bound to ``system:masters``), ``system:discovery`` and
    ``system:basic-user`` (every authenticated user: discovery, self access/rules/subject
    reviews) and ``system:public-info-viewer`` (health and version for everyone).
    """
    discovery = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi"]
    discovery += ["/openapi/*", "/readyz", "/version", "/version/"]
    roles = [
        _cluster_role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        _cluster_role("system:discovery", [{"nonResourceURLs": discovery, "verbs": ["get"]}]),
        _cluster_role(
            "system:basic-user",
            [
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
        _cluster_role(
            "system:public-info-viewer",
            [
                {
                    "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                    "verbs": ["get"],
                }
            ],
        ),
    ]
    bindings = [
        _cluster_binding("cluster-admin", [PRIVILEGED_GROUP]),
        _cluster_binding("system:basic-user", ["system:authenticated"]),
        _cluster_binding("system:discovery", ["system:authenticated"]),
        _cluster_binding(
            "system:public-info-viewer", ["system:authenticated", "system:unauthenticated"]
        ),
    ]
    return [("clusterroles", r) for r in roles] + [("clusterrolebindings", b) for b in bindings]


def install_bootstrap(store: Any, ts: str) -> None:
    """Store the bootstrap policy at startup (before anything can watch)."""
    import uuid

    for resource, obj in bootstrap_objects():
        obj["metadata"]["uid"] = str(uuid.uuid4())
        obj["metadata"]["creationTimestamp"] = ts
        store.put(resource, obj, "ADDED", emit=False)
