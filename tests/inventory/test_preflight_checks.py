"""The preflight's pure checks (inventory/preflight_checks.py) on answers the simulated
cluster cannot give: old or odd versions, a cluster without the ClusterPolicy CRD
(``list_cluster_policies()`` is None on a 404), several ClusterPolicies, an operator in
another namespace. Shapes follow NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go.
"""

from __future__ import annotations

import pytest

from inventory.preflight import Report, report_from
from inventory.preflight_checks import (
    Finding,
    check_identity,
    check_limits,
    check_mig_config,
    check_operator,
    check_version,
    missing_in,
    unlabelled_gpu_node,
    worst,
)


@pytest.mark.parametrize(
    ("version", "level"),
    [
        ("v1.27.16", "error"),
        ("v1.28.0", "ok"),
        ("v1.32.4-eks-abc", "ok"),
        ("v2.0.0", "ok"),
        ("", "warning"),
        ("nonsense", "warning"),
    ],
)
def test_version_floor_is_1_28(version, level):
    assert check_version(version).level == level


def test_an_old_version_says_what_to_do():
    f = check_version("v1.26.3")
    assert f.summary == "Kubernetes v1.26.3 is older than 1.28."
    assert "Upgrade" in f.fix


def test_identity():
    f = check_identity(
        {"username": "system:serviceaccount:p:p", "groups": ["system:authenticated"]}
    )
    assert (f.level, f.summary) == (
        "ok",
        "Connected as system:serviceaccount:p:p (groups: system:authenticated).",
    )
    assert check_identity({}).level == "warning"


def test_no_clusterpolicy_crd_is_a_warning_that_mig_will_fail():
    [f] = check_operator(None)
    assert f.level == "warning"
    assert "not installed" in f.summary
    assert "MIG changes will fail" in f.summary


def policy(name="cluster-policy", created="2026-01-01T00:00:00Z", state="ready", **spec):
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": spec,
        "status": {"state": state, "namespace": "gpu-operator"},
    }


def test_the_active_policy_is_the_one_not_ignored():
    old = policy("a", "2026-01-01T00:00:00Z", state="ignored", mig={"strategy": "none"})
    live = policy("b", "2026-02-01T00:00:00Z", mig={"strategy": "mixed"})
    operator, strategy = check_operator([old, live])
    assert operator.level == "warning"
    assert "ClusterPolicy b: ready" in operator.summary
    assert "2 ClusterPolicies" in operator.summary
    assert (strategy.level, strategy.summary) == ("ok", "MIG strategy mixed.")


def test_an_operator_in_another_namespace_says_what_to_set():
    p = policy(mig={"strategy": "single"})
    p["status"]["namespace"] = "nvidia-gpu-operator"
    operator, _ = check_operator([p])
    assert operator.level == "warning"
    assert "MIG_CONFIGMAP_NAMESPACE=nvidia-gpu-operator" in operator.fix


def test_no_strategy_is_a_warning():
    _, strategy = check_operator([policy()])
    assert strategy.level == "warning"
    assert "spec.mig.strategy" in strategy.fix


def test_mig_config_unset_tells_exactly_what_to_set(settings):
    settings.MIG_CONFIGMAP_NAME = "gpu-quota-portal-mig-config"
    f = check_mig_config([policy(migManager={"config": {"default": "all-disabled"}})], None)
    assert f.level == "warning"
    assert "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge" in f.fix
    assert '"name":"gpu-quota-portal-mig-config"' in f.fix


def test_mig_manager_disabled_is_a_warning():
    f = check_mig_config([policy(migManager={"enabled": False})], None)
    assert f.level == "warning"
    assert "spec.migManager.enabled" in f.fix


def test_gpu_node_detection():
    def node(alloc, labels):
        return {"metadata": {"labels": labels}, "status": {"allocatable": alloc}}

    full = {"nvidia.com/gpu.product": "X", "nvidia.com/gpu.count": "8"}
    assert unlabelled_gpu_node(node({"nvidia.com/gpu": "8"}, {}))
    assert unlabelled_gpu_node(node({"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"}, {}))
    assert not unlabelled_gpu_node(node({"nvidia.com/gpu": "8"}, full))
    assert not unlabelled_gpu_node(node({"nvidia.com/gpu": "0", "cpu": "8"}, {}))


def test_limits_ownership(settings):
    def quota(name, hard, labels=None):
        return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"hard": hard}}

    gpu = {"requests.nvidia.com/gpu": "4"}
    quotas = {
        "a": [
            quota(settings.QUOTA_NAME, gpu),
            quota("renamed", gpu, {"app.kubernetes.io/managed-by": "gpu-quota-portal"}),
            quota("cpu", {"requests.cpu": "8"}),
            quota("theirs", {"requests.nvidia.com/mig-1g.10gb": "0"}),
        ]
    }
    f = check_limits(quotas, {"a": []})
    assert [i["name"] for i in f.items] == ["theirs"]
    assert f.items[0]["limits"] == {"requests.nvidia.com/mig-1g.10gb": "0"}
    assert check_limits({}, {}).level == "ok"


def test_limits_an_admin_decided_on_no_longer_warn():
    gpu = {"requests.nvidia.com/gpu": "16"}
    quotas = {"a": [{"metadata": {"name": "theirs"}, "spec": {"hard": gpu}}],
              "b": [{"metadata": {"name": "other"}, "spec": {"hard": gpu}}]}  # fmt: skip
    some = check_limits(quotas, {}, {("a", "theirs"): "adopted"})
    assert some.level == "warning"
    assert "b/other" in some.summary and "a/theirs" not in some.summary
    assert "1 more decided" in some.summary
    every = check_limits(quotas, {}, {("a", "theirs"): "adopted", ("b", "other"): "kept"})
    assert every.level == "ok"
    assert [i["decision"] for i in every.items] == ["adopted", "kept"]
    limit_range = {"metadata": {"name": "lr"},
                   "spec": {"limits": [{"max": {"nvidia.com/gpu": "2"}}]}}  # fmt: skip
    with_range = check_limits(quotas, {"a": [limit_range]}, {("a", "theirs"): "adopted",
                                                             ("b", "other"): "kept"})  # fmt: skip
    assert with_range.level == "warning" and "a/lr" in with_range.summary


def test_worst_and_missing():
    findings = [
        Finding("version", "ok", "x"),
        Finding("permissions", "error", "y", items=[{"key": "a", "granted": False},
                                                    {"key": "b", "granted": True}]),
    ]  # fmt: skip
    assert worst(f.level for f in findings) == "error"
    assert worst([]) == "ok"
    assert missing_in(findings) == ["a"]


def test_a_stored_report_reads_back():
    report = Report(findings=[Finding("version", "warning", "odd")], ran_at="t", namespaces=["n"])
    again = report_from(report.as_dict())
    assert again == report
    assert again.status == "warning"
    assert report_from({}) is None


def test_kueue_check_needs_the_api_only_where_kueue_enforces():
    from inventory.preflight_checks import check_kueue

    assert check_kueue("resourcequota", None).level == "ok"
    assert "not installed" in check_kueue("resourcequota", None).summary
    assert "can switch" in check_kueue("resourcequota", []).summary
    missing = check_kueue("kueue", None)
    assert missing.level == "error" and "does not serve kueue.x-k8s.io/v1beta2" in missing.summary
    assert check_kueue("kueue", [{}, {}]).summary == "Kueue serves v1beta2; 2 portal flavor(s)."
