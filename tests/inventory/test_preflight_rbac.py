"""The permission table (inventory/kube/permissions.py) and deploy/kubernetes/rbac.yaml agree
exactly, and every KubeGateway method is covered by the table.

The manifest's rules are evaluated the way Kubernetes' RBAC authorizer does
(kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go ``RuleAllows`` and
pkg/apis/rbac/v1/evaluation_helpers.go: ``VerbMatches``, ``APIGroupMatches``,
``ResourceMatches`` with ``resource/subresource`` and ``*/subresource``,
``ResourceNameMatches``: a rule with resourceNames matches only requests for those
names; a ClusterRole bound by a ClusterRoleBinding applies in every namespace, a Role
only in its own).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest
from django.conf import settings

from inventory.kube import KubeGateway
from inventory.kube.permissions import (
    NO_RBAC_METHODS,
    PERMISSIONS,
    Permission,
    Scope,
    for_method,
    rule_snippet,
)
from tests.kubesim import DEPLOY, PORTAL_SERVICE_ACCOUNT, manifest_objects

RBAC = DEPLOY / "rbac.yaml"


@dataclass(frozen=True)
class Grant:
    """One (rule, verb, group, resource, name) a manifest grants, and where."""

    role: str
    namespace: str  # "" = every namespace (ClusterRole through a ClusterRoleBinding)
    verb: str
    group: str
    resource: str  # "pods/eviction" for a subresource
    name: str  # "" = any name

    def allows(self, perm: Permission) -> bool:
        if self.verb not in ("*", perm.verb) or self.group not in ("*", perm.group):
            return False
        wanted = perm.resource_path
        sub = f"*/{perm.subresource}" if perm.subresource else None
        if self.resource not in ("*", wanted, sub):
            return False
        if self.name and self.name != perm.name:
            return False  # ResourceNameMatches: names only match named requests
        if self.namespace:
            return perm.scope == Scope.OPERATOR and self.namespace == perm.namespace()
        return True

    def __str__(self) -> str:
        where = self.namespace or "cluster-wide"
        name = f" named {self.name}" if self.name else ""
        return f"{self.role} ({where}): {self.verb} {self.resource} in group {self.group!r}{name}"


def portal_grants() -> list[Grant]:
    """Every grant of rbac.yaml's roles that is bound to the portal's ServiceAccount."""
    objs = manifest_objects(RBAC)
    sa_ns, sa_name = PORTAL_SERVICE_ACCOUNT
    bound: set[tuple[str, str, str]] = set()  # (role kind, role name, binding namespace)
    for obj in objs:
        if obj["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        ours = any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == sa_name
            and s.get("namespace") == sa_ns
            for s in obj.get("subjects") or []
        )
        if ours:
            ns = obj["metadata"].get("namespace", "") if obj["kind"] == "RoleBinding" else ""
            bound.add((obj["roleRef"]["kind"], obj["roleRef"]["name"], ns))
    grants = []
    for obj in objs:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        name = obj["metadata"]["name"]
        role_ns = obj["metadata"].get("namespace", "")
        for kind, ref, binding_ns in bound:
            if kind != obj["kind"] or ref != name:
                continue
            if kind == "Role" and binding_ns != role_ns:
                continue
            for rule in obj.get("rules") or []:
                for verb in rule.get("verbs") or []:
                    for group in rule.get("apiGroups") or []:
                        for resource in rule.get("resources") or []:
                            for rname in rule.get("resourceNames") or [""]:
                                grants.append(
                                    Grant(
                                        f"{kind} {name}", binding_ns, verb, group, resource, rname
                                    )
                                )
    return grants


def test_the_manifest_binds_roles_to_the_portal():
    roles = {g.role for g in portal_grants()}
    assert "ClusterRole gpu-quota-portal" in roles
    assert "Role gpu-quota-portal-mig-config" in roles


def test_every_table_entry_is_granted_by_rbac_yaml():
    grants = portal_grants()
    missing = [p.key for p in PERMISSIONS if not any(g.allows(p) for g in grants)]
    assert not missing, (
        "deploy/kubernetes/rbac.yaml does not grant these entries of "
        f"inventory/kube/permissions.py: {missing}"
    )


def test_every_rbac_yaml_grant_is_needed_by_a_table_entry():
    unneeded = [str(g) for g in portal_grants() if not any(g.allows(p) for p in PERMISSIONS)]
    assert not unneeded, (
        "deploy/kubernetes/rbac.yaml grants what no entry of inventory/kube/permissions.py "
        f"needs (remove it, or add the entry with the gateway method that needs it): {unneeded}"
    )


def test_the_evaluator_follows_rbac_matching():
    """The rules above, on hand-made grants: a test of the test's RBAC evaluation."""
    evict = Permission("create", "pods", subresource="eviction")
    assert Grant("r", "", "create", "", "pods/eviction", "").allows(evict)
    assert Grant("r", "", "create", "", "*/eviction", "").allows(evict)
    assert not Grant("r", "", "create", "", "pods", "").allows(evict)
    named = Permission("get", "configmaps", scope=Scope.OPERATOR, resource_name="x")
    ns = settings.MIG_CONFIGMAP_NAMESPACE
    assert Grant("r", ns, "get", "", "configmaps", "x").allows(named)
    assert not Grant("r", ns, "get", "", "configmaps", "y").allows(named)
    assert not Grant("r", "other", "get", "", "configmaps", "x").allows(named)
    unnamed = Permission("create", "configmaps", scope=Scope.OPERATOR)
    assert not Grant("r", ns, "create", "", "configmaps", "x").allows(unnamed)
    assert Grant("r", "", "*", "*", "*", "").allows(unnamed)
    team = Permission("list", "resourcequotas", scope=Scope.TEAM)
    assert not Grant("r", ns, "list", "", "resourcequotas", "").allows(team)


def _public_methods() -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(KubeGateway, inspect.isfunction)
        if not name.startswith("_")
    }


def test_every_gateway_method_has_its_permissions_in_the_table():
    uncovered = sorted(m for m in _public_methods() - NO_RBAC_METHODS if not for_method(m))
    assert not uncovered, (
        "KubeGateway methods without an entry in inventory/kube/permissions.py (add the "
        f"permission they need, with the method in `methods`): {uncovered}"
    )


def test_the_table_names_only_real_gateway_methods():
    named = {m for p in PERMISSIONS for m in p.methods} | NO_RBAC_METHODS
    assert not named - _public_methods(), f"no such KubeGateway method: {named - _public_methods()}"


def test_table_entries_are_unique():
    keys = [p.key for p in PERMISSIONS]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    ("perm", "expected"),
    [
        (
            Permission("create", "pods", subresource="eviction"),
            '# ClusterRole gpu-quota-portal\n- apiGroups: [""]\n  resources: ["pods/eviction"]\n'
            '  verbs: ["create"]',
        ),
        (
            Permission("list", "clusterpolicies", group="nvidia.com"),
            '# ClusterRole gpu-quota-portal\n- apiGroups: ["nvidia.com"]\n'
            '  resources: ["clusterpolicies"]\n  verbs: ["list"]',
        ),
    ],
)
def test_rule_snippet_is_the_rule_to_add(perm, expected):
    assert rule_snippet(perm) == expected


def test_rule_snippet_for_the_operator_namespace_names_the_role_and_the_name(settings):
    settings.MIG_CONFIGMAP_NAME = "my-mig-config"
    settings.MIG_CONFIGMAP_NAMESPACE = "nvidia-gpu-operator"
    perm = Permission(
        "update", "configmaps", scope=Scope.OPERATOR, resource_name="$MIG_CONFIGMAP_NAME"
    )
    snippet = rule_snippet(perm)
    assert snippet.splitlines()[0] == (
        "# Role gpu-quota-portal-mig-config, namespace nvidia-gpu-operator"
    )
    assert '  resourceNames: ["my-mig-config"]' in snippet
    assert perm.namespace() == "nvidia-gpu-operator"
