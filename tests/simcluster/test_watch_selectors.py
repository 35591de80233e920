"""Watches as the watch cache serves them: selector transitions, watch-list, bookmarks, history.

Real sources followed (kubernetes/kubernetes, v1.32):
``staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go`` (convertToWatchEvent,
nextBookmarkTime, process), ``staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go``
(Watch, getBookmarkAfterResourceVersionLockedFunc, waitUntilWatchCacheFreshAndForceAllEvents),
``staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`` (getAllEventsSinceLocked,
one event buffer per resource type), ``staging/src/k8s.io/apimachinery/pkg/apis/meta/
internalversion/{defaults.go,validation/validation.go}`` (SetListOptionsDefaults,
ValidateListOptions for watch) and ``staging/src/k8s.io/apiserver/pkg/storage/util.go``
(AnnotateInitialEventsEndBookmark).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from simcluster import SimCluster

from .helpers import DEMO, Kubectl, make_api


def watch(sim: SimCluster, path: str, timeout: float = 3, **query: Any) -> list[dict[str, Any]]:
    """The events of one watch request (read until the server ends the stream)."""
    q = {"watch": "1", "timeoutSeconds": str(int(timeout)), **query}
    url = f"{sim.url}{path}?{urllib.parse.urlencode(q)}"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {sim.token}"})
    with urllib.request.urlopen(req, timeout=timeout + 10) as r:
        return [json.loads(line) for line in r.read().splitlines() if line.strip()]


def watch_error(sim: SimCluster, path: str, **query: Any) -> tuple[int, dict[str, Any]]:
    url = f"{sim.url}{path}?{urllib.parse.urlencode({'watch': '1', **query})}"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {sim.token}"})
    try:
        urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    raise AssertionError("the watch was accepted")


def later(delay: float, fn: Any) -> threading.Timer:
    t = threading.Timer(delay, fn)
    t.start()
    return t


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


def test_label_selector_transitions(sim: SimCluster, v1: client.CoreV1Api) -> None:
    rv = v1.list_node(limit=1).metadata.resource_version

    def changes() -> None:
        v1.patch_node("h100-00", {"metadata": {"labels": {"pool": "train"}}})  # starts matching
        v1.patch_node("h100-00", {"metadata": {"labels": {"note": "x"}}})  # keeps matching
        v1.patch_node("h100-00", {"metadata": {"labels": {"pool": "serve"}}})  # stops
        v1.patch_node("h100-01", {"metadata": {"labels": {"note": "y"}}})  # never matched
        v1.create_node({"metadata": {"name": "gone", "labels": {"pool": "train"}}})
        v1.delete_node("gone")

    t = later(0.3, changes)
    events = watch(sim, "/api/v1/nodes", timeout=2, resourceVersion=rv, labelSelector="pool=train")
    t.join()
    assert summary(events) == [
        ("ADDED", "h100-00"),
        ("MODIFIED", "h100-00"),
        ("DELETED", "h100-00"),
        ("ADDED", "gone"),
        ("DELETED", "gone"),
    ]
    stopped = events[2]["object"]
    # the previous object (still matching), at the resourceVersion of the change
    assert stopped["metadata"]["labels"]["pool"] == "train"
    current = v1.read_node("h100-00").metadata
    assert stopped["metadata"]["resourceVersion"] == current.resource_version
    # a watch from the same resourceVersion replays the same transitions from history
    replay = watch(sim, "/api/v1/nodes", timeout=1, resourceVersion=rv, labelSelector="pool=train")
    assert summary(replay) == summary(events)


def test_field_selector_transitions(sim: SimCluster, v1: client.CoreV1Api) -> None:
    rv = v1.list_pod_for_all_namespaces(limit=1).metadata.resource_version
    sim.set_pod_phase("genomics", "variant-call", "Failed")  # stops matching
    events = watch(
        sim,
        "/api/v1/pods",
        timeout=1,
        resourceVersion=rv,
        fieldSelector="status.phase=Running,metadata.namespace=genomics",
    )
    assert summary(events) == [("DELETED", "variant-call")]
    assert events[0]["object"]["status"]["phase"] == "Running"
    events = watch(
        sim, "/api/v1/namespaces/genomics/pods", timeout=1, resourceVersion=rv,
        fieldSelector="status.phase=Failed",
    )  # fmt: skip
    assert summary(events) == [("ADDED", "variant-call")]


def test_watch_list_initial_events_end_bookmark(sim: SimCluster, v1: client.CoreV1Api) -> None:
    rv = int(v1.list_namespace(limit=1).metadata.resource_version)
    events = watch(
        sim, "/api/v1/namespaces", timeout=2, sendInitialEvents="true",
        resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true",
    )  # fmt: skip
    kinds = [e["type"] for e in events]
    n = kinds.index("BOOKMARK")
    assert set(kinds[:n]) == {"ADDED"} and n == len(sim.list("namespaces"))
    mark = events[n]["object"]
    assert mark["kind"] == "Namespace" and mark["apiVersion"] == "v1"
    assert mark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(mark["metadata"]["resourceVersion"]) >= rv
    # later bookmarks carry no annotation
    assert all("annotations" not in e["object"]["metadata"] for e in events[n + 1 :])


def test_plain_watch_from_zero_is_a_watch_list(sim: SimCluster) -> None:
    """SetListOptionsDefaults: resourceVersion=0 without sendInitialEvents gets it."""
    events = watch(sim, "/api/v1/nodes", timeout=2, resourceVersion="0", allowWatchBookmarks="1")
    assert [e["type"] for e in events[:13]] == ["ADDED"] * 13
    assert events[13]["type"] == "BOOKMARK"
    assert events[13]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
    # without bookmarks: the initial state only
    events = watch(sim, "/api/v1/nodes", timeout=1, resourceVersion="0")
    assert [e["type"] for e in events] == ["ADDED"] * 13


def test_send_initial_events_false_starts_now(sim: SimCluster, v1: client.CoreV1Api) -> None:
    t = later(0.3, lambda: v1.patch_node("cpu-00", {"metadata": {"labels": {"a": "b"}}}))
    events = watch(
        sim, "/api/v1/nodes", timeout=2, sendInitialEvents="false",
        resourceVersionMatch="NotOlderThan",
    )  # fmt: skip
    t.join()
    assert summary(events) == [("MODIFIED", "cpu-00")]


def test_bookmarks_follow_the_cachers_schedule(sim: SimCluster, v1: client.CoreV1Api) -> None:
    rv = v1.list_node(limit=1).metadata.resource_version
    v1.patch_node("cpu-00", {"metadata": {"labels": {"a": "b"}}})
    # the last 2 s of a watch get no bookmark: a 2 s watch sees none
    events = watch(sim, "/api/v1/nodes", timeout=2, resourceVersion=rv, allowWatchBookmarks="1")
    assert [e["type"] for e in events] == ["MODIFIED"]
    # a longer one gets them (every bookmark_interval_s = 0.2 s here), newer than its start
    events = watch(sim, "/api/v1/nodes", timeout=3, resourceVersion=rv, allowWatchBookmarks="1")
    marks = [e for e in events if e["type"] == "BOOKMARK"]
    assert marks and all(int(m["object"]["metadata"]["resourceVersion"]) > int(rv) for m in marks)
    # nothing changed after the start: a bookmark would not be newer, none is sent
    now = v1.list_node(limit=1).metadata.resource_version
    events = watch(sim, "/api/v1/nodes", timeout=3, resourceVersion=now, allowWatchBookmarks="1")
    assert events == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"resourceVersionMatch": "NotOlderThan", "resourceVersion": "5"},
         "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
         "sendInitialEvents is provided"),
        ({"sendInitialEvents": "true", "resourceVersion": "5"},
         "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
         "resourceVersionMatch to NotOlderThan"),
        ({"sendInitialEvents": "true", "resourceVersionMatch": "Exact"},
         "[resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
         "resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: "
         '"Exact": supported values: "NotOlderThan"]'),
    ],
)  # fmt: skip
def test_watch_options_validation(sim: SimCluster, query: dict[str, str], message: str) -> None:
    code, st = watch_error(sim, "/api/v1/nodes", **query)
    assert code == 422 and st["reason"] == "Invalid"
    assert st["message"] == f'ListOptions.meta.k8s.io "" is invalid: {message}'


def test_unparsable_watch_resource_version(sim: SimCluster) -> None:
    code, st = watch_error(sim, "/api/v1/nodes", resourceVersion="-1")
    assert code == 500 and "reason" not in st
    assert st["message"] == (
        'resourceVersion: Invalid value: "-1": strconv.ParseUint: parsing "-1": invalid syntax'
    )


def test_too_old_and_too_new(sim: SimCluster, v1: client.CoreV1Api) -> None:
    rv = v1.list_node(limit=1).metadata.resource_version
    v1.patch_node("cpu-00", {"metadata": {"labels": {"a": "b"}}})
    sim.compact_history()
    events = watch(sim, "/api/v1/nodes", timeout=1, resourceVersion=rv)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    st = events[0]["object"]
    assert (st["code"], st["reason"]) == (410, "Expired")
    assert st["message"] == f"too old resource version: {rv} ({sim.store.rv})"
    # a watch-list request for a version the cache never reaches: ERROR 504 after 3 s
    ahead = str(sim.store.rv + 100)
    t0 = time.monotonic()
    events = watch(
        sim, "/api/v1/nodes", timeout=5, resourceVersion=ahead, sendInitialEvents="true",
        resourceVersionMatch="NotOlderThan",
    )  # fmt: skip
    assert time.monotonic() - t0 >= 2.9
    st = events[0]["object"]
    assert (events[0]["type"], st["code"], st["reason"]) == ("ERROR", 504, "Timeout")
    assert st["message"].startswith(f"Timeout: Too large resource version: {ahead}, current: ")
    # a plain watch ahead of the cache is accepted and waits for newer events
    events = watch(sim, "/api/v1/nodes", timeout=1, resourceVersion=ahead)
    assert events == []


def test_each_type_has_its_own_history() -> None:
    """A burst of writes to one type does not push another type's events out."""
    with SimCluster.from_fleet(DEMO, history_size=20, bookmark_interval_s=0.2) as sim:
        v1 = client.CoreV1Api(make_api(sim))
        rv = v1.list_node(limit=1).metadata.resource_version
        v1.patch_node("cpu-00", {"metadata": {"labels": {"a": "b"}}})
        for i in range(60):
            v1.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
        events = watch(sim, "/api/v1/nodes", timeout=1, resourceVersion=rv)
        assert summary(events) == [("MODIFIED", "cpu-00")]
        events = watch(sim, "/api/v1/configmaps", timeout=1, resourceVersion=rv)
        assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
        # lists at an older version need the history too
        page = v1.list_config_map_for_all_namespaces(limit=2)
        v1.create_namespaced_config_map("default", {"metadata": {"name": "one-more"}})
        for i in range(60):
            v1.patch_namespaced_config_map(f"cm-{i}", "default", {"data": {"k": "v"}})
        with pytest.raises(client.ApiException) as ei:
            v1.list_config_map_for_all_namespaces(limit=2, _continue=page.metadata._continue)
        assert ei.value.status == 410


def test_kubectl_watch_with_selector(v1: client.CoreV1Api, kubectl: Kubectl) -> None:
    """``kubectl get -w -l`` sees a node arrive in and leave the selection."""
    proc = kubectl.popen(
        "get", "nodes", "-l", "pool=batch", "--watch-only", "--output-watch-events",
        "-o", "json", "--request-timeout=6s",
    )  # fmt: skip
    try:
        time.sleep(1.5)
        v1.patch_node("v100-00", {"metadata": {"labels": {"pool": "batch"}}})
        v1.patch_node("v100-00", {"metadata": {"labels": {"pool": None}}})
        time.sleep(1.0)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    decoder, events, pos = json.JSONDecoder(), [], 0
    while out[pos:].strip():
        obj, end = decoder.raw_decode(out[pos:].lstrip())
        pos += len(out[pos:]) - len(out[pos:].lstrip()) + end
        events.append(obj)
    assert summary(events) == [("ADDED", "v100-00"), ("DELETED", "v100-00")], err
    assert events[1]["object"]["metadata"]["labels"]["pool"] == "batch"
