"""The Eviction API and the disruption controller.

Follows ``pkg/registry/core/pod/storage/eviction.go`` (v1.32: canIgnorePDB,
checkAndDecrement, createTooManyRequestsError, addConditionAndDeletePod, the 500 for several
PDBs), ``pkg/controller/disruption/disruption.go`` (status upkeep, failSafe),
``pkg/registry/policy/poddisruptionbudget/strategy.go`` (generation) and
``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/writers.go``
(``Retry-After`` only from ``details.retryAfterSeconds``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import Kubectl, gone, make_api, pod, wait_until

FLEET = {
    "nodes": [
        {"name": "n-{i}", "count": 2, "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}}
    ],
    "namespaces": [{"name": "app"}, {"name": "other"}],
}
TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    """This module's simulator (the ``api`` and ``kubectl`` fixtures use it)."""
    with SimCluster.from_fleet(FLEET, pod_stop_s=0.3, pdb_sync_s=0.05, namespace_sync_s=0.1) as s:
        yield s


@pytest.fixture
def apis(api: client.ApiClient) -> tuple[client.CoreV1Api, client.PolicyV1Api]:
    return client.CoreV1Api(api), client.PolicyV1Api(api)


def _pod(name: str, app: str = "web", node: str | None = "n-0", **spec: Any) -> dict:
    return pod(name, node=node, meta={"labels": {"app": app}}, **spec)


def _evict(core: client.CoreV1Api, name: str, ns: str = "app", **kw: Any) -> Any:
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=ns),
        delete_options=kw.pop("delete_options", None),
    )
    return core.create_namespaced_pod_eviction(name, ns, body, **kw)


def _pdb(policy: client.PolicyV1Api, name: str, ns: str = "app", **kw: Any) -> Any:
    spec = {"".join(w.capitalize() if i else w for i, w in enumerate(k.split("_"))): v
            for k, v in kw.items()}  # fmt: skip
    spec.setdefault("selector", {"matchLabels": {"app": "web"}})
    return policy.create_namespaced_pod_disruption_budget(
        ns, {"metadata": {"name": name}, "spec": spec}
    )


def _synced(policy: client.PolicyV1Api, name: str, ns: str = "app") -> Any:
    def ok() -> Any:
        pdb = policy.read_namespaced_pod_disruption_budget(name, ns)
        return pdb if (pdb.status.observed_generation or 0) >= pdb.metadata.generation else None

    return wait_until(ok)


def test_eviction_marks_and_deletes_gracefully(apis: Any) -> None:
    core, _ = apis
    core.create_namespaced_pod("app", _pod("w"))
    resp = _evict(core, "w", _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201,
    }  # fmt: skip
    pod = core.read_namespaced_pod("w", "app")
    assert pod.metadata.deletion_timestamp is not None
    cond = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
    assert (cond.status, cond.reason, cond.message) == (
        "True", "EvictionByEvictionAPI", "Eviction API: evicting",
    )  # fmt: skip
    wait_until(lambda: gone(core.read_namespaced_pod, "w", "app"))


def test_dry_run_evicts_nothing(apis: Any) -> None:
    core, policy = apis
    for i in range(3):
        core.create_namespaced_pod("app", _pod(f"w{i}"))
    _pdb(policy, "web", min_available=1)
    allowed = _synced(policy, "web").status.disruptions_allowed
    assert allowed == 2
    before = core.read_namespaced_pod("w0", "app").metadata.resource_version
    _evict(core, "w0", delete_options=client.V1DeleteOptions(dry_run=["All"]))
    _evict(core, "w0", dry_run="All")
    pod = core.read_namespaced_pod("w0", "app")
    assert pod.metadata.resource_version == before and pod.metadata.deletion_timestamp is None
    st = policy.read_namespaced_pod_disruption_budget("web", "app").status
    assert st.disruptions_allowed == 2 and not st.disrupted_pods


def test_pdb_status_and_budget_use() -> None:
    with (
        SimCluster.from_fleet(FLEET, pod_stop_s=0.3, pdb_sync_s=0.5) as s,  # the checks beat it
        make_api(s) as a,
    ):
        _budget_use(client.CoreV1Api(a), client.PolicyV1Api(a))


def _budget_use(core: client.CoreV1Api, policy: client.PolicyV1Api) -> None:
    for i in range(3):
        core.create_namespaced_pod("app", _pod(f"w{i}"))
    _pdb(policy, "web", min_available=2)
    st = _synced(policy, "web").status
    assert (st.current_healthy, st.desired_healthy, st.expected_pods) == (3, 2, 3)
    assert st.disruptions_allowed == 1
    cond = next(c for c in st.conditions if c.type == "DisruptionAllowed")
    assert (cond.status, cond.reason) == ("True", "SufficientPods")
    _evict(core, "w0")
    st = policy.read_namespaced_pod_disruption_budget("web", "app").status
    assert st.disruptions_allowed == 0 and "w0" in st.disrupted_pods
    # the budget is spent: 429, the real message and cause, and no Retry-After header
    with pytest.raises(ApiException) as ei:
        _evict(core, "w1")
    assert ei.value.status == 429
    assert "Retry-After" not in ei.value.headers
    body = json.loads(ei.value.body)
    assert (body["message"], body["reason"]) == (TOO_MANY, "TooManyRequests")
    assert body["details"] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web needs 2 healthy pods and has 3 currently",
            }
        ]
    }
    # once w0 is gone the controller settles: 2 healthy of 2 desired
    wait_until(
        lambda: (
            (s := policy.read_namespaced_pod_disruption_budget("web", "app").status)
            and s.current_healthy == 2
            and s.expected_pods == 2
            and not s.disrupted_pods
        )
    )


def test_unprocessed_pdb_answers_429_with_retry_after() -> None:
    # the controller lags a minute
    with SimCluster.from_fleet(FLEET, pdb_sync_s=60) as s, make_api(s) as a:
        core, policy = client.CoreV1Api(a), client.PolicyV1Api(a)
        core.create_namespaced_pod("app", _pod("w"))
        pdb = _pdb(policy, "web", max_unavailable=1)
        assert pdb.metadata.generation == 1
        assert pdb.status.disruptions_allowed == 0 and pdb.status.observed_generation is None
        with pytest.raises(ApiException) as ei:
            _evict(core, "w")
        assert ei.value.status == 429 and ei.value.headers["Retry-After"] == "10"
        body = json.loads(ei.value.body)
        assert body["details"] == {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web is still being processed by the server.",
                }
            ],
            "retryAfterSeconds": 10,
        }
        # a spec change bumps the generation; a metadata change does not
        pdb.spec.max_unavailable = 2
        assert (
            policy.replace_namespaced_pod_disruption_budget("web", "app", pdb).metadata.generation
            == 2
        )
        patched = policy.patch_namespaced_pod_disruption_budget(
            "web", "app", {"metadata": {"labels": {"x": "y"}}}
        )
        assert patched.metadata.generation == 2


def test_several_pdbs_are_a_500(apis: Any) -> None:
    core, policy = apis
    core.create_namespaced_pod("app", _pod("w"))
    _pdb(policy, "a", min_available=0)
    _pdb(policy, "b", min_available=0)
    with pytest.raises(ApiException) as ei:
        _evict(core, "w")
    assert ei.value.status == 500
    assert json.loads(ei.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction "
        "subresource does not support.",
        "code": 500,
    }


def test_pending_terminal_and_terminating_pods_ignore_pdbs(sim: SimCluster, apis: Any) -> None:
    core, policy = apis
    core.create_namespaced_pod("app", _pod("pend", node=None))
    core.create_namespaced_pod("app", _pod("done"))
    core.create_namespaced_pod("app", _pod("dying", terminationGracePeriodSeconds=30))
    sim.set_pod_phase("app", "done", "Succeeded")
    core.delete_namespaced_pod("dying", "app")
    _pdb(policy, "web", min_available=10)
    _synced(policy, "web")
    for name in ("pend", "done", "dying"):
        _evict(core, name)
    names = {p.metadata.name for p in core.list_namespaced_pod("app").items}
    assert "pend" not in names and "done" not in names


def test_unready_pods(apis: Any) -> None:
    core, policy = apis
    for i in range(3):
        core.create_namespaced_pod("app", _pod(f"w{i}"))
    not_ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
    core.patch_namespaced_pod_status("w2", "app", {"status": {"conditions": [not_ready]}})
    _pdb(policy, "web", min_available=2)
    st = wait_until(lambda: (p := _synced(policy, "web").status) and p.current_healthy == 2 and p)
    assert st.disruptions_allowed == 0
    # IfHealthyBudget: 2 healthy >= 2 desired, so the unready pod may go, budget untouched
    _evict(core, "w2")
    assert (
        policy.read_namespaced_pod_disruption_budget("web", "app").status.disruptions_allowed == 0
    )
    # a ready pod may not
    with pytest.raises(ApiException) as ei:
        _evict(core, "w0")
    assert ei.value.status == 429


def test_unhealthy_always_allow(apis: Any) -> None:
    core, policy = apis
    core.create_namespaced_pod("app", _pod("w0"))
    not_ready = {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
    core.patch_namespaced_pod_status("w0", "app", {"status": {"conditions": [not_ready]}})
    _pdb(policy, "strict", min_available=1)
    _synced(policy, "strict")
    with pytest.raises(ApiException) as ei:  # IfHealthyBudget: 0 healthy < 1 desired
        _evict(core, "w0")
    assert ei.value.status == 429
    pdb = policy.read_namespaced_pod_disruption_budget("strict", "app")
    pdb.spec.unhealthy_pod_eviction_policy = "AlwaysAllow"
    policy.replace_namespaced_pod_disruption_budget("strict", "app", pdb)
    _synced(policy, "strict")
    _evict(core, "w0")
    assert core.read_namespaced_pod("w0", "app").metadata.deletion_timestamp is not None


def test_max_unavailable_over_bare_pods_allows_nothing(apis: Any) -> None:
    """Percentages and maxUnavailable count the pods' controllers: bare pods count 0."""
    core, policy = apis
    for i in range(3):
        core.create_namespaced_pod("app", _pod(f"w{i}"))
    _pdb(policy, "web", max_unavailable=1)
    st = _synced(policy, "web").status
    assert (st.expected_pods, st.desired_healthy, st.current_healthy) == (0, 0, 3)
    assert st.disruptions_allowed == 0
    with pytest.raises(ApiException) as ei:
        _evict(core, "w0")
    assert ei.value.status == 429


def test_pods_of_unknown_controllers_fail_the_sync(apis: Any) -> None:
    core, policy = apis
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1234",
             "controller": True}  # fmt: skip
    pod = _pod("w0")
    pod["metadata"]["ownerReferences"] = [owner]
    core.create_namespaced_pod("app", pod)
    _pdb(policy, "web", max_unavailable="50%")

    def failed() -> Any:
        st = policy.read_namespaced_pod_disruption_budget("web", "app").status
        return next((c for c in st.conditions or [] if c.reason == "SyncFailed"), None)

    cond = wait_until(failed)
    assert cond.status == "False" and cond.message == 'found no controllers for pod "w0"'


def test_fault_429_keeps_retry_after(sim: SimCluster, apis: Any) -> None:
    core, _ = apis
    sim.faults.update(error_rate=1.0, error_code=429)
    with pytest.raises(ApiException) as ei:
        core.list_namespaced_pod("app")
    assert ei.value.status == 429 and ei.value.headers["Retry-After"] == "1"


def test_eviction_in_terminating_namespace_is_forbidden(sim: SimCluster, apis: Any) -> None:
    core, _ = apis
    core.create_namespaced_pod("other", _pod("w", terminationGracePeriodSeconds=30,
                                              finalizers=None))  # fmt: skip
    sim.create("configmaps", {"metadata": {"name": "c", "finalizers": ["x/y"]}}, "other")
    core.delete_namespace("other", _preload_content=False)
    with pytest.raises(ApiException) as ei:
        _evict(core, "w", ns="other")
    assert ei.value.status == 403
    assert json.loads(ei.value.body)["message"] == (
        'pods "w" is forbidden: unable to create new content in namespace other because it '
        "is being terminated"
    )


def test_kubectl_drain_respects_the_budget(apis: Any, kubectl: Kubectl) -> None:
    core, policy = apis
    core.create_namespaced_pod("app", _pod("w0", node="n-1"))
    _pdb(policy, "web", min_available=1)
    _synced(policy, "web")
    r = kubectl("drain", "n-1", "--force", "--timeout=3s", ok=False)
    assert r.returncode != 0
    assert TOO_MANY in r.stderr
    assert core.read_namespaced_pod("w0", "app").metadata.deletion_timestamp is None
