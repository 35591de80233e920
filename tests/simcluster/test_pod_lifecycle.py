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
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .conftest import DEMO, make_api

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
def lsim() -> Iterator[SimCluster]:
    s = _sim(FLEET)
    yield s
    s.stop()


@pytest.fixture
def core(lsim: SimCluster) -> Iterator[client.CoreV1Api]:
    a = make_api(lsim)
    yield client.CoreV1Api(a)
    a.close()


def _pod(name: str, node: str | None = "gpu-0", grace: int | None = None, **meta: Any) -> dict:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, **meta}, "spec": spec}


def _wait(pred: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _raw(fn: Callable[..., Any], *args: Any, **kw: Any) -> dict[str, Any]:
    """The JSON body (the client would squeeze a returned object into V1Status)."""
    return json.loads(fn(*args, _preload_content=False, **kw).data)


def _gone(core: client.CoreV1Api, name: str, ns: str = "team") -> bool:
    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as err:
        return err.status == 404
    return False


def test_delete_running_pod_is_graceful_then_kubelet_removes_it(
    lsim: SimCluster, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod("team", _pod("web", grace=20))
    before = time.time()
    out = core.delete_namespaced_pod("web", "team")
    # 200 with the pod itself, now carrying deletionTimestamp = now + grace
    assert out.metadata.deletion_grace_period_seconds == 20
    ts = out.metadata.deletion_timestamp.timestamp()
    assert before + 19 <= ts <= time.time() + 21
    assert core.read_namespaced_pod("web", "team").metadata.deletion_timestamp is not None
    # the kubelet stops the containers (pod_stop_s), posts Failed, deletes with grace 0
    _wait(lambda: _gone(core, "web"))


def test_default_grace_is_termination_grace_period(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("team", _pod("a"))  # spec default: 30
    assert core.delete_namespaced_pod("a", "team").metadata.deletion_grace_period_seconds == 30
    core.create_namespaced_pod("team", _pod("b", grace=5))
    out = core.delete_namespaced_pod("b", "team", grace_period_seconds=12)
    assert out.metadata.deletion_grace_period_seconds == 12


def test_unscheduled_and_terminal_pods_and_grace_zero_go_at_once(
    lsim: SimCluster, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod("team", _pod("pending", node=None))
    out = core.delete_namespaced_pod("pending", "team")
    assert out.metadata.deletion_grace_period_seconds == 0
    assert _gone(core, "pending")
    core.create_namespaced_pod("team", _pod("done"))
    lsim.set_pod_phase("team", "done", "Succeeded")
    core.delete_namespaced_pod("done", "team")
    assert _gone(core, "done")
    core.create_namespaced_pod("team", _pod("forced"))
    core.delete_namespaced_pod("forced", "team", grace_period_seconds=0)
    assert _gone(core, "forced")


def test_grace_zero_delete_writes_the_deletion_first(
    lsim: SimCluster, core: client.CoreV1Api
) -> None:
    """The store updates the object (deletionTimestamp, grace 0) before deleting it."""
    core.create_namespaced_pod("team", _pod("w"))
    rv = core.list_namespaced_pod("team").metadata.resource_version
    core.delete_namespaced_pod("w", "team", grace_period_seconds=0)
    events = [
        (e["type"], e["object"].metadata.deletion_grace_period_seconds)
        for e in watch.Watch().stream(
            core.list_namespaced_pod, "team", resource_version=rv, timeout_seconds=1
        )
        if e["type"] != "BOOKMARK"
    ]
    assert events == [("MODIFIED", 0), ("DELETED", 0)]


def test_second_delete_may_only_shorten_the_grace_period(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("team", _pod("s", grace=60))
    first = core.delete_namespaced_pod("s", "team").metadata
    again = core.delete_namespaced_pod("s", "team", grace_period_seconds=120).metadata
    assert again.deletion_timestamp == first.deletion_timestamp
    assert again.resource_version == first.resource_version  # nothing written
    shorter = core.delete_namespaced_pod("s", "team", grace_period_seconds=10).metadata
    assert shorter.deletion_grace_period_seconds == 10
    assert 49 <= (first.deletion_timestamp - shorter.deletion_timestamp).total_seconds() <= 51


def test_preconditions_and_dry_run(core: client.CoreV1Api) -> None:
    pod = core.create_namespaced_pod("team", _pod("p"))
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid"))
    with pytest.raises(ApiException) as ei:
        core.delete_namespaced_pod("p", "team", body=body)
    assert ei.value.status == 409
    assert json.loads(ei.value.body)["message"] == (
        f'Operation cannot be fulfilled on Pod "p": the UID in the precondition (not-the-uid) '
        f"does not match the UID in record ({pod.metadata.uid}). The object might have been "
        "deleted and then recreated"
    )
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1"))
    with pytest.raises(ApiException) as ei:
        core.delete_namespaced_pod("p", "team", body=body)
    assert "the ResourceVersion in the precondition (1) does not match" in ei.value.body
    dry = core.delete_namespaced_pod("p", "team", dry_run="All")
    assert dry.metadata.deletion_timestamp is not None
    live = core.read_namespaced_pod("p", "team")
    assert live.metadata.deletion_timestamp is None
    assert live.metadata.resource_version == pod.metadata.resource_version


def test_bad_delete_options_are_422(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("team", _pod("o"))
    with pytest.raises(ApiException) as ei:
        core.delete_namespaced_pod("o", "team", propagation_policy="Sideways")
    assert ei.value.status == 422
    assert json.loads(ei.value.body)["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
        '"Sideways": supported values: "Foreground", "Background", "Orphan", "nil"'
    )
    core.delete_namespaced_pod("o", "team", propagation_policy="Background")


def test_finalizers_keep_any_object_until_removed(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(
        "team", {"metadata": {"name": "cm", "finalizers": ["example.com/hold"]}}
    )
    out = _raw(core.delete_namespaced_config_map, "cm", "team")
    # not deleted: the object comes back, marked (grace 0)
    assert out["metadata"]["deletionTimestamp"]
    assert out["metadata"]["deletionGracePeriodSeconds"] == 0
    cm = core.read_namespaced_config_map("cm", "team")
    assert cm.metadata.deletion_timestamp is not None
    # an update may not take the deletion timestamp away
    cm.metadata.deletion_timestamp = None
    cm.data = {"k": "v"}
    cm = core.replace_namespaced_config_map("cm", "team", cm)
    assert cm.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("cm", "team", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as ei:
        core.read_namespaced_config_map("cm", "team")
    assert ei.value.status == 404


def test_pod_with_finalizer_is_removed_only_after_both(
    lsim: SimCluster, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod("team", _pod("f", finalizers=["example.com/hold"]))
    core.delete_namespaced_pod("f", "team")
    # the kubelet finishes it (grace 0 now) but the finalizer keeps it
    _wait(lambda: core.read_namespaced_pod("f", "team").metadata.deletion_grace_period_seconds == 0)
    pod = core.read_namespaced_pod("f", "team")
    assert pod.status.phase == "Failed"
    core.patch_namespaced_pod("f", "team", {"metadata": {"finalizers": None}})
    assert _gone(core, "f")


def test_pods_on_notready_nodes_stay_terminating(lsim: SimCluster, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("team", _pod("stuck", node="down-0", grace=1))
    core.delete_namespaced_pod("stuck", "team")
    time.sleep(1.5)
    assert core.read_namespaced_pod("stuck", "team").metadata.deletion_timestamp is not None
    # the node comes back: its kubelet finishes the pod
    cond = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    core.patch_node_status("down-0", {"status": {"conditions": [cond]}})
    _wait(lambda: _gone(core, "stuck"))


def test_pods_ignoring_sigterm_take_the_full_grace_period(
    lsim: SimCluster, core: client.CoreV1Api
) -> None:
    lsim.faults.update(pods_ignore_sigterm=True)
    core.create_namespaced_pod("team", _pod("slow", grace=2))
    t0 = time.monotonic()
    core.delete_namespaced_pod("slow", "team")
    time.sleep(1.0)
    assert not _gone(core, "slow")
    _wait(lambda: _gone(core, "slow"))
    assert time.monotonic() - t0 >= 1.8


def test_podgc_deletes_pods_of_a_vanished_node() -> None:
    s = _sim(FLEET, podgc_quarantine_s=0.3)
    try:
        a = make_api(s)
        core = client.CoreV1Api(a)
        core.create_namespaced_pod("team", _pod("orphan", node="gpu-1"))
        core.delete_node("gpu-1")
        time.sleep(0.1)
        assert not _gone(core, "orphan")
        _wait(lambda: _gone(core, "orphan"))
        a.close()
    finally:
        s.stop()


def test_terminating_gpu_pods_keep_the_node_busy_for_mig() -> None:
    """mig-manager refuses while the GPU pods still run; the kubelet frees them later."""
    s = _sim(DEMO, pod_stop_s=1.5)
    try:
        a = make_api(s)
        core = client.CoreV1Api(a)
        for i in range(4):
            core.delete_namespaced_pod(f"yolo-mig-{i}", "ml-vision")
        core.patch_node(
            "a100-02", {"metadata": {"labels": {"nvidia.com/mig.config": "all-3g.40gb"}}}
        )

        def state() -> str | None:
            st = core.read_node("a100-02").metadata.labels.get("nvidia.com/mig.config.state")
            return st if st in ("success", "failed") else None

        assert _wait(state) == "failed"  # pods terminating: GPUs still in use
        _wait(
            lambda: (
                not core.list_namespaced_pod("ml-vision", label_selector="app=yolo").items
                and not any(
                    p.metadata.name.startswith("yolo")
                    for p in core.list_namespaced_pod("ml-vision").items
                )
            )
        )
        core.patch_node(
            "a100-02", {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}}
        )
        _wait(
            lambda: (
                core.read_node("a100-02").metadata.labels.get("nvidia.com/mig.config.state")
                == "success"
            )
        )
        a.close()
    finally:
        s.stop()


def test_namespace_termination(lsim: SimCluster, core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "gone-soon"}})
    core.create_namespaced_pod("gone-soon", _pod("x", grace=1))
    core.create_namespaced_config_map("gone-soon", {"metadata": {"name": "c"}})
    ns = _raw(core.delete_namespace, "gone-soon")
    assert ns["status"]["phase"] == "Terminating" and ns["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as ei:
        core.create_namespaced_config_map("gone-soon", {"metadata": {"name": "late"}})
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
        core.delete_namespace("gone-soon")
    assert ei.value.status == 409
    assert "The system is ensuring all content is removed from this namespace." in ei.value.body

    def removed() -> bool:
        try:
            core.read_namespace("gone-soon")
        except ApiException as err:
            return err.status == 404
        return False

    _wait(removed)
    assert not core.list_pod_for_all_namespaces(field_selector="metadata.namespace=gone-soon").items


def test_namespace_reports_content_remaining(lsim: SimCluster, core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "held"}})
    core.create_namespaced_config_map(
        "held", {"metadata": {"name": "c", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespace("held")

    def conditions() -> dict[str, Any]:
        ns = core.read_namespace("held")
        return {c.type: (c.status, c.reason, c.message) for c in ns.status.conditions or []}

    conds = _wait(
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
    core.patch_namespaced_config_map("c", "held", {"metadata": {"finalizers": None}})

    def removed() -> bool:
        try:
            core.read_namespace("held")
        except ApiException as err:
            return err.status == 404
        return False

    _wait(removed, timeout=20)


def test_immortal_namespaces(core: client.CoreV1Api) -> None:
    for name in ("default", "kube-system", "kube-public"):
        with pytest.raises(ApiException) as ei:
            core.delete_namespace(name)
        assert ei.value.status == 403
        assert json.loads(ei.value.body)["message"] == (
            f'namespaces "{name}" is forbidden: this namespace may not be deleted'
        )


def test_garbage_collector_follows_owner_references(
    lsim: SimCluster, core: client.CoreV1Api
) -> None:
    owner = core.create_namespaced_config_map("team", {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(
        "team", {"metadata": {"name": "dep", "ownerReferences": [ref]}}
    )
    core.delete_namespaced_config_map("owner", "team")

    def dep_gone() -> bool:
        try:
            core.read_namespaced_config_map("dep", "team")
        except ApiException as err:
            return err.status == 404
        return False

    _wait(dep_gone)
    # Orphan: the owner goes, the dependent stays without the reference
    owner = core.create_namespaced_config_map("team", {"metadata": {"name": "owner2"}})
    ref = {**ref, "name": "owner2", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(
        "team", {"metadata": {"name": "kept", "ownerReferences": [ref]}}
    )
    out = _raw(core.delete_namespaced_config_map, "owner2", "team", propagation_policy="Orphan")
    assert out["metadata"]["finalizers"] == ["orphan"]
    _wait(lambda: not (core.read_namespaced_config_map("kept", "team").metadata.owner_references))
    _wait(
        lambda: (
            core.list_namespaced_config_map("team", field_selector="metadata.name=owner2").items
            == []
        )
    )


def test_delete_collection_is_graceful(lsim: SimCluster, core: client.CoreV1Api) -> None:
    for n in ("c1", "c2"):
        core.create_namespaced_pod("team", _pod(n, grace=5, labels={"batch": "x"}))
    out = _raw(core.delete_collection_namespaced_pod, "team", label_selector="batch=x")
    assert sorted(p["metadata"]["name"] for p in out["items"]) == ["c1", "c2"]
    pods = core.list_namespaced_pod("team", label_selector="batch=x").items
    assert len(pods) == 2 and all(p.metadata.deletion_timestamp for p in pods)
    _wait(lambda: not core.list_namespaced_pod("team", label_selector="batch=x").items)


@pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="kubectl not installed (Debian package kubernetes-client)",
)
def test_kubectl_shows_terminating(tmp_path) -> None:
    s = _sim(FLEET, pod_stop_s=30)
    try:
        kc = s.write_kubeconfig(tmp_path / "kc")
        env = dict(os.environ, HOME=str(tmp_path))
        s.create("pods", _pod("web", grace=60), "team")

        def k(*args: str) -> str:
            r = subprocess.run(
                ["kubectl", "--kubeconfig", str(kc), *args],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )
            assert r.returncode == 0, r.stderr
            return r.stdout

        assert "deleted" in k("delete", "pod", "web", "-n", "team", "--wait=false")
        out = k("get", "pod", "web", "-n", "team", "-o", "jsonpath={.metadata.deletionTimestamp}")
        assert out.endswith("Z")  # still there, terminating
        grace = "{.metadata.deletionGracePeriodSeconds}"
        assert k("get", "pod", "web", "-n", "team", "-o", f"jsonpath={grace}") == "60"
        # a forced delete (grace 0) removes it at once
        k("delete", "pod", "web", "-n", "team", "--grace-period=0", "--force")
        assert s.list("pods", "team") == []
    finally:
        s.stop()


def test_watchers_see_terminating_then_deleted(lsim: SimCluster, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("team", _pod("seen", grace=3))
    rv = core.list_namespaced_pod("team").metadata.resource_version
    seen: list[tuple[str, bool, str]] = []

    def watcher() -> None:
        for e in watch.Watch().stream(
            core.list_namespaced_pod, "team", resource_version=rv, timeout_seconds=5
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
    core.delete_namespaced_pod("seen", "team")
    t.join(timeout=10)
    assert seen[0] == ("MODIFIED", True, "Running")
    assert ("MODIFIED", True, "Failed") in seen
    assert seen[-1][0] == "DELETED"
