"""Watch streams and fault injection."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import make_api, wait_until


def test_watch_events(sim: SimCluster, v1: client.CoreV1Api) -> None:
    rv = v1.list_node().metadata.resource_version

    def writer() -> None:
        time.sleep(0.2)
        v1.create_node({"metadata": {"name": "new-node", "labels": {"a": "b"}}})
        v1.patch_node("new-node", {"metadata": {"labels": {"a": "c"}}})
        v1.delete_node("new-node")

    t = threading.Thread(target=writer)
    t.start()
    seen = []
    w = watch.Watch()
    for ev in w.stream(v1.list_node, resource_version=rv, timeout_seconds=5):
        if ev["type"] == "BOOKMARK":
            continue
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "DELETED":
            w.stop()
    t.join()
    assert seen == [("ADDED", "new-node"), ("MODIFIED", "new-node"), ("DELETED", "new-node")]


def test_watch_bookmarks_and_selector(sim: SimCluster, v1: client.CoreV1Api) -> None:
    rv = v1.list_pod_for_all_namespaces(limit=1).metadata.resource_version
    sim.set_pod_phase("robotics", "sim-rl-1", "Failed")
    sim.set_pod_phase("genomics", "variant-call", "Failed")
    events = list(
        watch.Watch().stream(
            v1.list_namespaced_pod,
            "genomics",
            resource_version=rv,
            allow_watch_bookmarks=True,
            # the cacher sends no bookmark in a watch's last 2 s (cache_watcher.go
            # nextBookmarkTime): a 1 s watch would see none
            timeout_seconds=3,
        )
    )
    types = [e["type"] for e in events]
    assert types[0] == "MODIFIED" and "BOOKMARK" in types
    assert events[0]["object"].metadata.name == "variant-call"


def test_watch_too_old(sim: SimCluster, v1: client.CoreV1Api) -> None:
    rv = v1.list_node().metadata.resource_version
    v1.patch_node("a100-00", {"metadata": {"labels": {"x": "1"}}})
    sim.compact_history()
    with pytest.raises(ApiException) as ei:
        for _ in watch.Watch().stream(v1.list_node, resource_version=rv, timeout_seconds=2):
            pass
    assert ei.value.status == 410


def test_watch_from_zero_sends_initial_state(sim: SimCluster, v1: client.CoreV1Api) -> None:
    resp = v1.list_namespace(watch=True, timeout_seconds=1, _preload_content=False)
    lines = [json.loads(x) for x in resp.read().splitlines() if x.strip()]
    assert {ln["object"]["metadata"]["name"] for ln in lines} >= {"ml-vision", "genomics"}
    assert all(ln["type"] == "ADDED" for ln in lines)


def test_error_rate_fault(sim: SimCluster, v1: client.CoreV1Api) -> None:
    sim.faults.update(error_rate=1.0)
    with pytest.raises(ApiException) as ei:
        v1.list_node()
    assert ei.value.status == 500
    assert json.loads(ei.value.body)["kind"] == "Status"
    sim.faults.update(error_rate=1.0, error_code=503, path_regex="/pods")
    v1.list_node()  # not matched
    with pytest.raises(ApiException) as ei:
        v1.list_pod_for_all_namespaces()
    assert ei.value.status == 503
    sim.faults.reset()
    v1.list_pod_for_all_namespaces()


def test_latency_fault(sim: SimCluster, v1: client.CoreV1Api) -> None:
    sim.faults.update(latency_ms=200)
    t0 = time.monotonic()
    v1.list_node()
    assert time.monotonic() - t0 >= 0.2


def test_refuse_connections(sim: SimCluster) -> None:
    sim.faults.update(refuse_connections=True)
    api = make_api(sim, retries=0)
    t0 = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError):
        client.CoreV1Api(api).list_node(_request_timeout=5)
    assert time.monotonic() - t0 < 2
    api.close()


def test_fail_after_mid_pagination(sim: SimCluster, v1: client.CoreV1Api) -> None:
    sim.faults.update(fail_after=3, path_regex="^/api/v1/nodes$")
    token = v1.list_node(limit=2).metadata._continue
    token = v1.list_node(limit=2, _continue=token).metadata._continue
    with pytest.raises(ApiException) as ei:
        v1.list_node(limit=2, _continue=token)
    assert ei.value.status == 500


def test_http_control_endpoint(sim: SimCluster, v1: client.CoreV1Api) -> None:
    req = urllib.request.Request(
        sim.url + "/_sim/faults",
        data=json.dumps({"error_rate": 1.0, "error_code": 429}).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        assert json.loads(r.read())["error_code"] == 429
    with pytest.raises(ApiException) as ei:
        v1.list_node()
    assert ei.value.status == 429
    # control endpoints are never faulted
    with urllib.request.urlopen(sim.url + "/_sim/stats") as r:
        stats = json.loads(r.read())
    assert stats["faults.errors"] >= 1 and stats["objects"]["nodes"] == 13
    reset = urllib.request.Request(sim.url + "/_sim/reset-faults", data=b"", method="POST")
    with urllib.request.urlopen(reset) as r:
        assert json.loads(r.read())["error_rate"] == 0.0
    v1.list_node()
    bad = urllib.request.Request(sim.url + "/_sim/faults", data=b'{"nope": 1}', method="PUT")
    with pytest.raises(urllib.error.HTTPError) as he:
        urllib.request.urlopen(bad)
    assert he.value.code == 400


def test_mig_manager_protocol(sim: SimCluster, v1: client.CoreV1Api) -> None:
    # GPU pods on a100-02 make mig-manager fail (it never evicts workloads)
    v1.patch_node("a100-02", {"metadata": {"labels": {"nvidia.com/mig.config": "all-3g.40gb"}}})
    assert _wait_state(v1, "a100-02", {"failed"}) == "failed"
    for i in range(4):
        v1.delete_namespaced_pod(f"yolo-mig-{i}", "ml-vision")
    assert sim.wait_for_controllers()  # graceful deletion: the GPUs are free once they are gone
    v1.patch_node("a100-02", {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}})
    assert _wait_state(v1, "a100-02", {"success"}) == "success"
    # the device plugin and GFD restart after `success` (gpuoperator devicePluginRestart)
    sim.clock.advance(sim.gpu_operator.device_plugin_restart_s)
    wait_until(lambda: "nvidia.com/mig-3g.40gb" in v1.read_node("a100-02").status.capacity)
    n = v1.read_node("a100-02")
    assert n.status.capacity["nvidia.com/mig-3g.40gb"] == "8"
    assert n.status.capacity["nvidia.com/mig-1g.10gb"] == "16"
    assert n.metadata.labels["nvidia.com/mig-2g.20gb.count"] == "8"
    assert n.metadata.labels["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_mig_stuck_fault(sim: SimCluster, v1: client.CoreV1Api) -> None:
    sim.faults.update(mig_stuck=True)
    v1.patch_node("h200-00", {"metadata": {"labels": {"nvidia.com/mig.config": "all-enabled"}}})
    time.sleep(0.3)
    assert v1.read_node("h200-00").metadata.labels["nvidia.com/mig.config.state"] == "pending"


def _wait_state(v1: client.CoreV1Api, node: str, want: set[str]) -> str:
    def state() -> str | None:
        got = v1.read_node(node).metadata.labels.get("nvidia.com/mig.config.state", "")
        return got if got in want else None

    return wait_until(state, timeout=5)
