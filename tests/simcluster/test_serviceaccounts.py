"""The ``default`` ServiceAccount of every namespace, and ServiceAccount admission of pods.

Follows ``pkg/controller/serviceaccount/serviceaccounts_controller.go`` (``default`` created
for every Active namespace, again when deleted) and
``plugin/pkg/admission/serviceaccount/admission.go`` (``serviceAccountName`` defaulted, a
missing ServiceAccount is a 403 -- after retries for ``default`` -- the projected
``kube-api-access-*`` token volume and its mounts unless ``automountServiceAccountToken``
is false, image pull secrets, ``kubernetes.io/enforce-mountable-secrets``, mirror pods),
with ``staging/src/k8s.io/apiserver/pkg/admission/errors.go`` for the 403's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster
from simcluster.errors import ApiError

from .helpers import DEMO, Kubectl, gone, pod, wait_until

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME = {
    "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {
            "downwardAPI": {
                "items": [
                    {
                        "path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                    }
                ]
            }
        },
    ],
    "defaultMode": 420,
}


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster.from_fleet(DEMO, serviceaccount_sync_s=0.05) as s:
        yield s


def _create(v1: client.CoreV1Api, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a pod and return the stored JSON (the client model drops nothing here)."""
    v1.create_namespaced_pod(ns, body)
    name = body["metadata"].get("name")
    return json.loads(v1.read_namespaced_pod(name, ns, _preload_content=False).data)


def _forbidden(err: ApiException) -> dict[str, Any]:
    assert err.status == 403
    return json.loads(err.body)


def test_every_fleet_namespace_has_its_default_serviceaccount(sim: SimCluster) -> None:
    namespaces = {n["metadata"]["name"] for n in sim.list("namespaces")}
    accounts = {
        (s["metadata"]["namespace"], s["metadata"]["name"]) for s in sim.list("serviceaccounts")
    }
    assert {(ns, "default") for ns in namespaces} <= accounts
    sa = sim.get("serviceaccounts", "default", "ml-vision")
    assert set(sa["metadata"]) == {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    }


def test_controller_creates_and_recreates_default(sim: SimCluster, v1: client.CoreV1Api) -> None:
    v1.create_namespace({"metadata": {"name": "fresh"}})
    sa = wait_until(lambda: not gone(v1.read_namespaced_service_account, "default", "fresh"))
    assert sa
    created = v1.read_namespaced_service_account("default", "fresh")
    assert created.metadata.managed_fields is None  # name/namespace only: nothing to own
    v1.delete_namespaced_service_account("default", "fresh")
    wait_until(lambda: not gone(v1.read_namespaced_service_account, "default", "fresh"))
    assert (
        v1.read_namespaced_service_account("default", "fresh").metadata.uid != created.metadata.uid
    )


def test_pod_in_a_new_namespace_waits_for_default(v1: client.CoreV1Api) -> None:
    # the plugin retries its GET of "default" (up to ten times): no race with the controller
    v1.create_namespace({"metadata": {"name": "brand-new"}})
    stored = _create(v1, "brand-new", pod("first"))
    assert stored["spec"]["serviceAccountName"] == "default"
    assert stored["spec"]["serviceAccount"] == "default"  # the deprecated alias, echoed


def test_a_lagging_controller_makes_default_missing() -> None:
    with SimCluster.from_fleet(DEMO, serviceaccount_sync_s=5.0) as s:
        s.create("namespaces", {"metadata": {"name": "lag"}})
        with pytest.raises(ApiError) as ei:
            s.create("pods", pod("p"), namespace="lag")
        assert ei.value.code == 403
        assert ei.value.message == (
            'pods "p" is forbidden: error looking up service account lag/default: '
            'serviceaccount "default" not found'
        )


def test_missing_serviceaccount_is_forbidden(v1: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("robotics", pod("x", serviceAccountName="nope"))
    status = _forbidden(ei.value)
    assert status["message"] == (
        'pods "x" is forbidden: error looking up service account robotics/nope: '
        'serviceaccount "nope" not found'
    )
    assert (status["reason"], status["details"]) == ("Forbidden", {"name": "x", "kind": "pods"})
    body = pod("", serviceAccountName="nope")
    body["metadata"] = {"generateName": "job-"}
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("robotics", body)
    assert _forbidden(ei.value)["message"].startswith('pods "job-" is forbidden: ')  # not named yet


def test_kubectl_sees_the_403(kubectl: Kubectl) -> None:
    manifest = json.dumps(
        {"apiVersion": "v1", "kind": "Pod", **pod("k", serviceAccountName="ghost")}
    )
    out = kubectl("create", "-n", "genomics", "-f", "-", ok=False, stdin=manifest)
    assert out.returncode == 1
    assert (
        'pods "k" is forbidden: error looking up service account genomics/ghost: '
        'serviceaccount "ghost" not found'
    ) in out.stderr


def test_token_volume_and_mounts(v1: client.CoreV1Api) -> None:
    body = pod("t")
    body["spec"]["initContainers"] = [{"name": "init", "image": "x"}]
    body["spec"]["containers"].append(
        {"name": "own", "image": "x", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_PATH}]}
    )
    body["spec"]["volumes"] = [{"name": "mine", "emptyDir": {}}]
    spec = _create(v1, "robotics", body)["spec"]
    vol = spec["volumes"][-1]
    assert re.fullmatch(r"kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}", vol["name"])
    assert vol["projected"] == TOKEN_VOLUME
    want = {"name": vol["name"], "readOnly": True, "mountPath": TOKEN_PATH}
    assert spec["initContainers"][0]["volumeMounts"] == [want]
    assert spec["containers"][0]["volumeMounts"] == [want]
    assert spec["containers"][1]["volumeMounts"] == [{"name": "mine", "mountPath": TOKEN_PATH}]


def test_existing_token_volume_is_reused(v1: client.CoreV1Api) -> None:
    body = pod("r")
    body["spec"]["volumes"] = [{"name": "kube-api-access-mine", "projected": {"sources": []}}]
    spec = _create(v1, "robotics", body)["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["kube-api-access-mine"]
    assert spec["containers"][0]["volumeMounts"][0]["name"] == "kube-api-access-mine"


def test_automount_preferences(v1: client.CoreV1Api) -> None:
    off = _create(v1, "robotics", pod("off", automountServiceAccountToken=False))["spec"]
    assert "volumes" not in off and "volumeMounts" not in off["containers"][0]
    v1.create_namespaced_service_account(
        "robotics", {"metadata": {"name": "quiet"}, "automountServiceAccountToken": False}
    )
    quiet = _create(v1, "robotics", pod("quiet", serviceAccountName="quiet"))["spec"]
    assert "volumes" not in quiet
    body = pod("loud", serviceAccountName="quiet", automountServiceAccountToken=True)
    assert _create(v1, "robotics", body)["spec"]["volumes"][0]["projected"] == TOKEN_VOLUME


def test_image_pull_secrets_from_the_serviceaccount(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_service_account(
        "robotics", {"metadata": {"name": "puller"}, "imagePullSecrets": [{"name": "regcred"}]}
    )
    spec = _create(v1, "robotics", pod("p", serviceAccountName="puller"))["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    own = pod("q", serviceAccountName="puller", imagePullSecrets=[{"name": "mine"}])
    assert _create(v1, "robotics", own)["spec"]["imagePullSecrets"] == [{"name": "mine"}]


def test_enforce_mountable_secrets(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_service_account(
        "robotics",
        {
            "metadata": {
                "name": "strict",
                "annotations": {"kubernetes.io/enforce-mountable-secrets": "true"},
            },
            "secrets": [{"name": "allowed"}],
        },
    )
    ok = pod(
        "ok",
        serviceAccountName="strict",
        volumes=[{"name": "s", "secret": {"secretName": "allowed"}}],
    )
    _create(v1, "robotics", ok)
    bad = pod(
        "bad",
        serviceAccountName="strict",
        volumes=[{"name": "s", "secret": {"secretName": "other"}}],
    )
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("robotics", bad)
    assert _forbidden(ei.value)["message"] == (
        'pods "bad" is forbidden: volume with secret.secretName="other" is not allowed because '
        "service account strict does not reference that secret"
    )
    env = pod("env", serviceAccountName="strict")
    env["spec"]["containers"][0]["env"] = [
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "other", "key": "pw"}}}
    ]
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("robotics", env)
    assert _forbidden(ei.value)["message"] == (
        'pods "env" is forbidden: container main with envVar PW referencing '
        'secret.secretName="other" is not allowed because service account strict does not '
        "reference that secret"
    )


def test_mirror_pods(v1: client.CoreV1Api) -> None:
    mirror = {"kubernetes.io/config.mirror": "abc"}
    body = pod("m", node="cpu-00", meta={"annotations": mirror})
    spec = _create(v1, "robotics", body)["spec"]
    assert "serviceAccountName" not in spec and "volumes" not in spec  # not mutated
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod(
            "robotics",
            pod("n", node="cpu-00", meta={"annotations": mirror}, serviceAccountName="default"),
        )
    assert _forbidden(ei.value)["message"] == (
        'pods "n" is forbidden: a mirror pod may not reference service accounts'
    )
    secret = pod(
        "o",
        node="cpu-00",
        meta={"annotations": mirror},
        volumes=[{"name": "s", "secret": {"secretName": "x"}}],
    )
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("robotics", secret)
    assert _forbidden(ei.value)["message"] == (
        'pods "o" is forbidden: a mirror pod may not reference secrets'
    )


def test_creator_does_not_own_what_admission_added(v1: client.CoreV1Api) -> None:
    stored = _create(v1, "robotics", pod("owned"))
    entry = next(m for m in stored["metadata"]["managedFields"] if m.get("subresource") != "status")
    spec_fields = entry["fieldsV1"]["f:spec"]
    assert "f:volumes" not in spec_fields and "f:serviceAccountName" not in spec_fields
    assert "f:volumeMounts" not in spec_fields["f:containers"]['k:{"name":"main"}']


def test_terminating_namespace_answers_before_serviceaccounts(v1: client.CoreV1Api) -> None:
    v1.create_namespace({"metadata": {"name": "going"}})
    v1.delete_namespace("going")
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_pod("going", pod("late", serviceAccountName="nope"))
    assert "because it is being terminated" in _forbidden(ei.value)["message"]
