"""Node Leases (``coordination.k8s.io/v1``) kept by the kubelet emulation.

Follows ``pkg/kubelet/nodelease/controller.go`` (setNodeOwnerFunc: the owner reference),
``staging/src/k8s.io/component-helpers/apimachinery/lease/controller.go`` (newLease,
ensureLease, retryUpdateLease: holderIdentity, leaseDurationSeconds, renewTime),
``pkg/kubelet/apis/config/v1beta1/defaults.go`` (nodeLeaseDurationSeconds 40, renew
interval = 0.25 of it) and ``pkg/controller/garbagecollector`` (the lease goes with its node).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import Kubectl, make_api, wait_until

FLEET = {
    "nodes": [
        {"name": "up-{i}", "count": 2},
        {"name": "down-0", "ready": False},
    ]
}
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    """This module's simulator (the ``api`` and ``kubectl`` fixtures use it)."""
    with SimCluster.from_fleet(FLEET, lease_renew_s=0.3) as s:
        yield s


@pytest.fixture
def apis(api: client.ApiClient) -> tuple[client.CoreV1Api, client.CoordinationV1Api]:
    return client.CoreV1Api(api), client.CoordinationV1Api(api)


def _renew_time(coord: client.CoordinationV1Api, name: str) -> Any:
    return coord.read_namespaced_lease(name, "kube-node-lease").spec.renew_time


def test_discovery(api: client.ApiClient) -> None:
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups["coordination.k8s.io"].preferred_version.group_version == "coordination.k8s.io/v1"
    res = client.CoordinationV1Api(api).get_api_resources()
    lease = next(r for r in res.resources if r.name == "leases")
    assert (lease.kind, lease.namespaced, lease.singular_name) == ("Lease", True, "lease")
    assert not lease.short_names
    assert set(lease.verbs) >= {"create", "delete", "get", "list", "patch", "update", "watch"}


def test_every_node_has_a_lease(apis: Any) -> None:
    core, coord = apis
    leases = {x.metadata.name: x for x in coord.list_namespaced_lease("kube-node-lease").items}
    assert set(leases) == {"up-0", "up-1", "down-0"}
    node = core.read_node("up-0")
    lease = leases["up-0"]
    assert lease.spec.holder_identity == "up-0"
    assert lease.spec.lease_duration_seconds == 40
    ref = lease.metadata.owner_references[0]
    assert (ref.api_version, ref.kind, ref.name, ref.uid) == (
        "v1",
        "Node",
        "up-0",
        node.metadata.uid,
    )
    assert ref.controller is None
    assert [m.manager for m in lease.metadata.managed_fields] == ["kubelet"]
    raw = coord.read_namespaced_lease("up-0", "kube-node-lease", _preload_content=False)
    assert MICRO.match(json.loads(raw.data)["spec"]["renewTime"])


def test_ready_nodes_renew_notready_do_not(apis: Any) -> None:
    _, coord = apis
    first_up = _renew_time(coord, "up-0")
    first_down = _renew_time(coord, "down-0")
    wait_until(lambda: _renew_time(coord, "up-0") > first_up)
    wait_until(lambda: _renew_time(coord, "up-1") > first_up)
    time.sleep(0.4)
    assert _renew_time(coord, "down-0") == first_down


def test_watch_sees_renewals(apis: Any) -> None:
    _, coord = apis
    rv = coord.list_namespaced_lease("kube-node-lease").metadata.resource_version
    names = set()
    for e in watch.Watch().stream(
        coord.list_namespaced_lease, "kube-node-lease", resource_version=rv, timeout_seconds=1
    ):
        if e["type"] == "MODIFIED":
            names.add(e["object"].metadata.name)
    assert names == {"up-0", "up-1"}


def test_node_created_and_deleted(apis: Any) -> None:
    core, coord = apis
    node = core.create_node({"metadata": {"name": "late"}})
    lease = wait_until(lambda: _get(coord, "late"))
    assert lease.metadata.owner_references[0].uid == node.metadata.uid
    core.delete_node("late")
    wait_until(lambda: _get(coord, "late") is None)


def test_deleted_lease_is_recreated(apis: Any) -> None:
    _, coord = apis
    old = coord.read_namespaced_lease("up-0", "kube-node-lease")
    coord.delete_namespaced_lease("up-0", "kube-node-lease")
    new = wait_until(lambda: _get(coord, "up-0"))
    assert new.metadata.uid != old.metadata.uid


def test_leases_are_ordinary_objects(apis: Any) -> None:
    """Leader election: any component may hold a Lease of its own."""
    _, coord = apis
    body = {
        "metadata": {"name": "my-controller"},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15},
    }
    made = coord.create_namespaced_lease("default", body)
    made.spec.holder_identity = "pod-b"
    made.spec.lease_transitions = 1
    upd = coord.replace_namespaced_lease("my-controller", "default", made)
    assert upd.spec.holder_identity == "pod-b"
    stale = made
    stale.spec.holder_identity = "pod-c"
    with pytest.raises(ApiException) as ei:  # optimistic concurrency, as leader election needs
        coord.replace_namespaced_lease("my-controller", "default", stale)
    assert ei.value.status == 409


def test_renewals_can_be_turned_off() -> None:
    with SimCluster.from_fleet(FLEET, lease_renew_s=0) as s, make_api(s) as a:
        coord = client.CoordinationV1Api(a)
        before = _renew_time(coord, "up-0")
        time.sleep(0.5)
        assert _renew_time(coord, "up-0") == before


def test_kubectl_get_leases(kubectl: Kubectl) -> None:
    r = kubectl(
        "get", "lease", "up-1", "-n", "kube-node-lease",
        "-o", "jsonpath={.spec.holderIdentity} {.spec.leaseDurationSeconds}",
    )  # fmt: skip
    assert r.stdout == "up-1 40"


def _get(coord: client.CoordinationV1Api, name: str) -> Any:
    try:
        return coord.read_namespaced_lease(name, "kube-node-lease")
    except ApiException as err:
        if err.status == 404:
            return None
        raise
