"""Graceful deletion, finalizers, the kubelet emulation, namespace termination, the GC.

Follows ``staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`` (BeforeDelete),
``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`` (Delete,
updateForGracefulDeletionAndFinalizers, ShouldDeleteDuringUpdate),
``pkg/registry/core/pod/strategy.go`` (CheckGracefulDelete), ``pkg/kubelet/status/
status_manager.go`` (terminal status, then delete with grace 0), ``pkg/controller/podgc/
gc_controller.go`` (orphaned pods), ``pkg/registry/core/namespace/storage/storage.go``,
``pkg/controller/namespace/deletion/namespaced_resources_deleter.go`` and
``staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from simcluster import SimCluster
from tests.prereqs import need_kubectl

from .helpers import DEMO, Kubectl, gone, make_api, pod, wait_until

FLEET = {
    "nodes": [
        {"name": "gpu-{i}", "count": 2, "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}},
        {"name": "down-0", "ready": False},
    ],
    "namespaces": [{"name": "team"}],
}


def _sim(fleet: Any = DEMO, **kw: Any) -> SimCluster:
    opts: dict[str, Any] = {"pod_stop_s": 0.3, "namespace_sync_s": 0.1, "quota_sync_s": 0.05}
    opts.update(kw)
    s = SimCluster.from_fleet(fleet, mig_step_s=0.05, **opts)
    s.start()
    return s


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    """This module's simulator (the ``api`` and ``v1`` fixtures use it)."""
    with _sim(FLEET) as s:
        yield s


def _pod(name: str, node: str | None = "gpu-0", grace: int | None = None, **meta: Any) -> dict:
    spec = {} if grace is None else {"terminationGracePeriodSeconds": grace}
    return pod(name, node=node, meta=meta, **spec)


def _raw(fn: Callable[..., Any], *args: Any, **kw: Any) -> dict[str, Any]:
    """The JSON body (the client would squeeze a returned object into V1Status)."""
    return json.loads(fn(*args, _preload_content=False, **kw).data)


def _gone(v1: client.CoreV1Api, name: str, ns: str = "team") -> bool:
    return gone(v1.read_namespaced_pod, name, ns)


def test_delete_running_pod_is_graceful_then_kubelet_removes_it(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", _pod("web", grace=20))
    before = time.time()
    out = v1.delete_namespaced_pod("web", "team")
    # 200 with the pod itself, now carrying deletionTimestamp = now + grace
    assert out.metadata.deletion_grace_period_seconds == 20
    ts = out.metadata.deletion_timestamp.timestamp()
    assert before + 19 <= ts <= time.time() + 21
    assert v1.read_namespaced_pod("web", "team").metadata.deletion_timestamp is not None
    # the kubelet stops the containers (pod_stop_s), posts Failed, deletes with grace 0
    wait_until(lambda: _gone(v1, "web"))


def test_default_grace_is_termination_grace_period(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", _pod("a"))  # spec default: 30
    assert v1.delete_namespaced_pod("a", "team").metadata.deletion_grace_period_seconds == 30
    v1.create_namespaced_pod("team", _pod("b", grace=5))
    out = v1.delete_namespaced_pod("b", "team", grace_period_seconds=12)
    assert out.metadata.deletion_grace_period_seconds == 12


def test_unscheduled_and_terminal_pods_and_grace_zero_go_at_once(
    sim: SimCluster, v1: client.CoreV1Api
) -> None:
    v1.create_namespaced_pod("team", _pod("pending", node=None))
    out = v1.delete_namespaced_pod("pending", "team")
    assert out.metadata.deletion_grace_period_seconds == 0
    assert _gone(v1, "pending")
    v1.create_namespaced_pod("team", _pod("done"))
    sim.set_pod_phase("team", "done", "Succeeded")
    v1.delete_namespaced_pod("done", "team")
    assert _gone(v1, "done")
    v1.create_namespaced_pod("team", _pod("forced"))
    v1.delete_namespaced_pod("forced", "team", grace_period_seconds=0)
    assert _gone(v1, "forced")


def test_grace_zero_delete_writes_the_deletion_first(v1: client.CoreV1Api) -> None:
    """The store updates the object (deletionTimestamp, grace 0) before deleting it."""
    v1.create_namespaced_pod("team", _pod("w"))
    rv = v1.list_namespaced_pod("team").metadata.resource_version
    v1.delete_namespaced_pod("w", "team", grace_period_seconds=0)
    events = [
        (e["type"], e["object"].metadata.deletion_grace_period_seconds)
        for e in watch.Watch().stream(
            v1.list_namespaced_pod, "team", resource_version=rv, timeout_seconds=1
        )
        if e["type"] != "BOOKMARK"
    ]
    assert events == [("MODIFIED", 0), ("DELETED", 0)]


def test_second_delete_may_only_shorten_the_grace_period(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", _pod("s", grace=60))
    first = v1.delete_namespaced_pod("s", "team").metadata
    again = v1.delete_namespaced_pod("s", "team", grace_period_seconds=120).metadata
    assert again.deletion_timestamp == first.deletion_timestamp
    assert again.resource_version == first.resource_version  # nothing written
    shorter = v1.delete_namespaced_pod("s", "team", grace_period_seconds=10).metadata
    assert shorter.deletion_grace_period_seconds == 10
    assert 49 <= (first.deletion_timestamp - shorter.deletion_timestamp).total_seconds() <= 51


def _running(v1: client.CoreV1Api, name: str) -> client.V1Pod | None:
    pod = v1.read_namespaced_pod(name, "team")
    return pod if pod.status.phase == "Running" else None


def test_preconditions_and_dry_run(v1: client.CoreV1Api) -> None:
    pod = v1.create_namespaced_pod("team", _pod("p"))
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid"))
    with pytest.raises(ApiException) as ei:
        v1.delete_namespaced_pod("p", "team", body=body)
    assert ei.value.status == 409
    assert json.loads(ei.value.body)["message"] == (
        f'Operation cannot be fulfilled on Pod "p": the UID in the precondition (not-the-uid) '
        f"does not match the UID in record ({pod.metadata.uid}). The object might have been "
        "deleted and then recreated"
    )
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1"))
    with pytest.raises(ApiException) as ei:
        v1.delete_namespaced_pod("p", "team", body=body)
    assert "the ResourceVersion in the precondition (1) does not match" in ei.value.body
    # The kubelet has written the started status since the create (a newer resourceVersion).
    before = wait_until(lambda: _running(v1, "p"))
    dry = v1.delete_namespaced_pod("p", "team", dry_run="All")
    assert dry.metadata.deletion_timestamp is not None
    live = v1.read_namespaced_pod("p", "team")
    assert live.metadata.deletion_timestamp is None
    assert live.metadata.resource_version == before.metadata.resource_version


def test_bad_delete_options_are_422(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", _pod("o"))
    with pytest.raises(ApiException) as ei:
        v1.delete_namespaced_pod("o", "team", propagation_policy="Sideways")
    assert ei.value.status == 422
    assert json.loads(ei.value.body)["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
        '"Sideways": supported values: "Foreground", "Background", "Orphan", "nil"'
    )
    v1.delete_namespaced_pod("o", "team", propagation_policy="Background")


def test_finalizers_keep_any_object_until_removed(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_config_map(
        "team", {"metadata": {"name": "cm", "finalizers": ["example.com/hold"]}}
    )
    out = _raw(v1.delete_namespaced_config_map, "cm", "team")
    # not deleted: the object comes back, marked (grace 0)
    assert out["metadata"]["deletionTimestamp"]
    assert out["metadata"]["deletionGracePeriodSeconds"] == 0
    cm = v1.read_namespaced_config_map("cm", "team")
    assert cm.metadata.deletion_timestamp is not None
    # an update may not take the deletion timestamp away
    cm.metadata.deletion_timestamp = None
    cm.data = {"k": "v"}
    cm = v1.replace_namespaced_config_map("cm", "team", cm)
    assert cm.metadata.deletion_timestamp is not None
    v1.patch_namespaced_config_map("cm", "team", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as ei:
        v1.read_namespaced_config_map("cm", "team")
    assert ei.value.status == 404


def test_pod_with_finalizer_is_removed_only_after_both(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", _pod("f", finalizers=["example.com/hold"]))
    v1.delete_namespaced_pod("f", "team")
    # the kubelet finishes it (grace 0 now) but the finalizer keeps it
    wait_until(
        lambda: v1.read_namespaced_pod("f", "team").metadata.deletion_grace_period_seconds == 0
    )
    pod = v1.read_namespaced_pod("f", "team")
    assert pod.status.phase == "Failed"
    v1.patch_namespaced_pod("f", "team", {"metadata": {"finalizers": None}})
    assert _gone(v1, "f")


def test_pods_on_notready_nodes_stay_terminating(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", _pod("stuck", node="down-0", grace=1))
    v1.delete_namespaced_pod("stuck", "team")
    time.sleep(1.5)
    assert v1.read_namespaced_pod("stuck", "team").metadata.deletion_timestamp is not None
    # the node comes back: its kubelet finishes the pod
    cond = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    v1.patch_node_status("down-0", {"status": {"conditions": [cond]}})
    wait_until(lambda: _gone(v1, "stuck"))


def test_pods_ignoring_sigterm_take_the_full_grace_period(
    sim: SimCluster, v1: client.CoreV1Api
) -> None:
    sim.faults.update(pods_ignore_sigterm=True)
    v1.create_namespaced_pod("team", _pod("slow", grace=2))
    t0 = time.monotonic()
    v1.delete_namespaced_pod("slow", "team")
    time.sleep(1.0)
    assert not _gone(v1, "slow")
    wait_until(lambda: _gone(v1, "slow"))
    assert time.monotonic() - t0 >= 1.8


def test_podgc_deletes_pods_of_a_vanished_node() -> None:
    with _sim(FLEET, podgc_quarantine_s=0.3) as s, make_api(s) as a:
        v1 = client.CoreV1Api(a)
        v1.create_namespaced_pod("team", _pod("orphan", node="gpu-1"))
        v1.delete_node("gpu-1")
        time.sleep(0.1)
        assert not _gone(v1, "orphan")
        wait_until(lambda: _gone(v1, "orphan"))


def test_terminating_gpu_pods_keep_the_node_busy_for_mig() -> None:
    """mig-manager refuses while the GPU pods still run; once they are gone it applies.

    The pods take a minute to stop (no race with mig-manager's own steps); a second
    DELETE with ``gracePeriodSeconds=0`` then shortens their grace, as a real API server
    allows (pkg/registry/rest/delete.go: a second delete may only shorten)."""
    with _sim(DEMO, pod_stop_s=60) as s, make_api(s) as a:
        v1 = client.CoreV1Api(a)
        for i in range(4):
            v1.delete_namespaced_pod(f"yolo-mig-{i}", "ml-vision")
        # The state label still says "success" (the old config's) until mig-manager takes the
        # new config up: drop it in the same patch, so the first answer read is the new run's
        # (the full suite under load read the stale "success" before mig-manager woke up).
        labels = {"nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/mig.config.state": None}
        v1.patch_node("a100-02", {"metadata": {"labels": labels}})

        def state() -> str | None:
            st = v1.read_node("a100-02").metadata.labels.get("nvidia.com/mig.config.state")
            return st if st in ("success", "failed") else None

        assert wait_until(state) == "failed"  # pods terminating: GPUs still in use
        for i in range(4):
            v1.delete_namespaced_pod(f"yolo-mig-{i}", "ml-vision", grace_period_seconds=0)
        wait_until(
            lambda: (
                not v1.list_namespaced_pod("ml-vision", label_selector="app=yolo").items
                and not any(
                    p.metadata.name.startswith("yolo")
                    for p in v1.list_namespaced_pod("ml-vision").items
                )
            )
        )
        v1.patch_node(
            "a100-02", {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}}
        )
        wait_until(
            lambda: (
                v1.read_node("a100-02").metadata.labels.get("nvidia.com/mig.config.state")
                == "success"
            )
        )


def test_namespace_termination(v1: client.CoreV1Api) -> None:
    v1.create_namespace({"metadata": {"name": "gone-soon"}})
    v1.create_namespaced_pod("gone-soon", _pod("x", grace=1))
    v1.create_namespaced_config_map("gone-soon", {"metadata": {"name": "c"}})
    ns = _raw(v1.delete_namespace, "gone-soon")
    assert ns["status"]["phase"] == "Terminating" and ns["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_config_map("gone-soon", {"metadata": {"name": "late"}})
    assert ei.value.status == 403
    body = json.loads(ei.value.body)
    assert body["message"] == (
        'configmaps "late" is forbidden: unable to create new content in namespace gone-soon '
        "because it is being terminated"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "NamespaceTerminating",
            "message": "namespace gone-soon is being terminated",
            "field": "metadata.namespace",
        }
    ]
    with pytest.raises(ApiException) as ei:
        v1.delete_namespace("gone-soon")
    assert ei.value.status == 409
    assert "The system is ensuring all content is removed from this namespace." in ei.value.body
    wait_until(lambda: gone(v1.read_namespace, "gone-soon"))
    assert not v1.list_pod_for_all_namespaces(field_selector="metadata.namespace=gone-soon").items


def test_namespace_reports_content_remaining(v1: client.CoreV1Api) -> None:
    v1.create_namespace({"metadata": {"name": "held"}})
    v1.create_namespaced_config_map(
        "held", {"metadata": {"name": "c", "finalizers": ["example.com/hold"]}}
    )
    v1.delete_namespace("held")

    def conditions() -> dict[str, Any]:
        ns = v1.read_namespace("held")
        return {c.type: (c.status, c.reason, c.message) for c in ns.status.conditions or []}

    conds = wait_until(
        lambda: (
            (c := conditions()) and c.get("NamespaceFinalizersRemaining", ("",))[0] == "True" and c
        )
    )
    assert conds["NamespaceContentRemaining"] == (
        "True",
        "SomeResourcesRemain",
        "Some resources are remaining: configmaps. has 1 resource instances",
    )
    assert conds["NamespaceFinalizersRemaining"] == (
        "True",
        "SomeFinalizerRemain",
        "Some finalizers are remaining: example.com/hold in 1 resource instances",
    )
    assert conds["NamespaceDeletionDiscoveryFailure"][1] == "ResourcesDiscovered"
    v1.patch_namespaced_config_map("c", "held", {"metadata": {"finalizers": None}})
    wait_until(lambda: gone(v1.read_namespace, "held"), timeout=20)


def test_immortal_namespaces(v1: client.CoreV1Api) -> None:
    for name in ("default", "kube-system", "kube-public"):
        with pytest.raises(ApiException) as ei:
            v1.delete_namespace(name)
        assert ei.value.status == 403
        assert json.loads(ei.value.body)["message"] == (
            f'namespaces "{name}" is forbidden: this namespace may not be deleted'
        )


def test_garbage_collector_follows_owner_references(v1: client.CoreV1Api) -> None:
    owner = v1.create_namespaced_config_map("team", {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    v1.create_namespaced_config_map("team", {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    v1.delete_namespaced_config_map("owner", "team")
    wait_until(lambda: gone(v1.read_namespaced_config_map, "dep", "team"))
    # Orphan: the owner goes, the dependent stays without the reference
    owner = v1.create_namespaced_config_map("team", {"metadata": {"name": "owner2"}})
    ref = {**ref, "name": "owner2", "uid": owner.metadata.uid}
    v1.create_namespaced_config_map(
        "team", {"metadata": {"name": "kept", "ownerReferences": [ref]}}
    )
    out = _raw(v1.delete_namespaced_config_map, "owner2", "team", propagation_policy="Orphan")
    assert out["metadata"]["finalizers"] == ["orphan"]
    wait_until(
        lambda: not (v1.read_namespaced_config_map("kept", "team").metadata.owner_references)
    )
    wait_until(
        lambda: (
            v1.list_namespaced_config_map("team", field_selector="metadata.name=owner2").items == []
        )
    )


def test_delete_collection_is_graceful(v1: client.CoreV1Api) -> None:
    for n in ("c1", "c2"):
        v1.create_namespaced_pod("team", _pod(n, grace=5, labels={"batch": "x"}))
    out = _raw(v1.delete_collection_namespaced_pod, "team", label_selector="batch=x")
    assert sorted(p["metadata"]["name"] for p in out["items"]) == ["c1", "c2"]
    pods = v1.list_namespaced_pod("team", label_selector="batch=x").items
    assert len(pods) == 2 and all(p.metadata.deletion_timestamp for p in pods)
    wait_until(lambda: not v1.list_namespaced_pod("team", label_selector="batch=x").items)


def test_kubectl_shows_terminating(tmp_path) -> None:
    binary = need_kubectl()
    with _sim(FLEET, pod_stop_s=30) as s:
        s.create("pods", _pod("web", grace=60), "team")
        kubectl = Kubectl(binary, s, tmp_path)

        def k(*args: str) -> str:
            return kubectl(*args).stdout

        assert "deleted" in k("delete", "pod", "web", "-n", "team", "--wait=false")
        out = k("get", "pod", "web", "-n", "team", "-o", "jsonpath={.metadata.deletionTimestamp}")
        assert out.endswith("Z")  # still there, terminating
        grace = "{.metadata.deletionGracePeriodSeconds}"
        assert k("get", "pod", "web", "-n", "team", "-o", f"jsonpath={grace}") == "60"
        # a forced delete (grace 0) removes it at once
        k("delete", "pod", "web", "-n", "team", "--grace-period=0", "--force")
        assert s.list("pods", "team") == []


def test_watchers_see_terminating_then_deleted(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("team", _pod("seen", grace=3))
    rv = v1.list_namespaced_pod("team").metadata.resource_version
    seen: list[tuple[str, bool, str]] = []

    def watcher() -> None:
        for e in watch.Watch().stream(
            v1.list_namespaced_pod, "team", resource_version=rv, timeout_seconds=5
        ):
            if e["type"] == "BOOKMARK":
                continue
            o = e["object"]
            seen.append((e["type"], o.metadata.deletion_timestamp is not None, o.status.phase))
            if e["type"] == "DELETED":
                return

    t = threading.Thread(target=watcher)
    t.start()
    time.sleep(0.2)
    v1.delete_namespaced_pod("seen", "team")
    t.join(timeout=10)
    assert seen[0] == ("MODIFIED", True, "Running")
    assert ("MODIFIED", True, "Failed") in seen
    assert seen[-1][0] == "DELETED"
