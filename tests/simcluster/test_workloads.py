"""Workload types and the DaemonSet controller, through the official client.

Follows ``pkg/apis/apps/validation/validation.go``, ``pkg/apis/batch/validation/
validation.go``, ``pkg/apis/networking/validation/validation.go`` (messages),
``pkg/apis/apps/v1/defaults.go``, ``pkg/apis/batch/v1/defaults.go`` (defaults),
``pkg/registry/apps/daemonset/strategy.go``, ``pkg/registry/batch/job/strategy.go``
(generation, status, generated selector) and ``pkg/controller/daemon/daemon_controller.go``
with ``pkg/controller/daemon/util/daemonset_util.go`` (one pod per eligible node, the default
tolerations, deletion when a node stops matching, status counts).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simcluster import SimCluster

from .helpers import DEMO, causes, quota, wait_until

NS = "agents"
CLIENT = "nvidia.com/gpu.deploy.client"


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster.from_fleet(DEMO, pod_stop_s=0.05, lease_renew_s=0) as s:
        s.create("namespaces", {"metadata": {"name": NS}})
        s.wait_for_controllers()
        yield s


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


def _template(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "agent", "image": "x:1"}], **spec},
    }


def daemonset(name: str = "agent", **spec: Any) -> dict[str, Any]:
    tpl = _template({"app": name}, nodeSelector={CLIENT: "true"})
    body = {"selector": {"matchLabels": {"app": name}}, "template": tpl, **spec}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name}, "spec": body}


@pytest.fixture(autouse=True)
def _no_node_matches_yet(sim: SimCluster, v1: client.CoreV1Api) -> None:
    """The fleet's GPU nodes carry the operator's gpu.deploy.client=true; these tests
    choose which nodes match, so they start from none."""
    for node in sim.list("nodes"):
        if CLIENT in (node["metadata"].get("labels") or {}):
            label(v1, node["metadata"]["name"], None)


def invalid(call: Any, *args: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as ei:
        call(*args)
    assert ei.value.status == 422, ei.value.body
    return json.loads(ei.value.body)


def label(v1: client.CoreV1Api, node: str, value: str | None) -> None:
    v1.patch_node(node, {"metadata": {"labels": {CLIENT: value}}})


def pods_by_node(v1: client.CoreV1Api) -> dict[str, list[client.V1Pod]]:
    out: dict[str, list[client.V1Pod]] = {}
    for p in v1.list_namespaced_pod(NS).items:
        out.setdefault(p.spec.node_name, []).append(p)
    return out


# ------------------------------------------------------------------ discovery, defaults
def test_discovery_serves_the_workload_groups(api: client.ApiClient) -> None:
    # real v1.32 discovery: short names and the `all` category (kubectl get all)
    res = {r.name: r for r in client.AppsV1Api(api).get_api_resources().resources}
    assert res["daemonsets"].short_names == ["ds"] and res["daemonsets"].categories == ["all"]
    assert res["deployments"].short_names == ["deploy"]
    assert "daemonsets/status" in res
    batch = {r.name: r for r in client.BatchV1Api(api).get_api_resources().resources}
    assert batch["cronjobs"].short_names == ["cj"] and batch["jobs"].categories == ["all"]
    net = {r.name: r for r in client.NetworkingV1Api(api).get_api_resources().resources}
    assert net["ingresses"].short_names == ["ing"] and not net["ingresses"].categories
    assert net["ingressclasses"].namespaced is False


def test_daemonset_create_defaults_generation_and_empty_status(apps: client.AppsV1Api) -> None:
    ds = apps.api_client.sanitize_for_serialization(
        apps.create_namespaced_daemon_set(NS, daemonset())
    )
    spec = ds["spec"]
    # SetDefaults_DaemonSet and SetDefaults_PodSpec
    assert spec["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    assert spec["revisionHistoryLimit"] == 10
    # the template's quantities are decoded canonically, as in a Pod
    body = daemonset(name="canon")
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1000m"}}
    canon = apps.create_namespaced_daemon_set(NS, body)
    assert canon.spec.template.spec.containers[0].resources.limits == {"cpu": "1"}
    tspec = spec["template"]["spec"]
    assert (tspec["restartPolicy"], tspec["dnsPolicy"], tspec["terminationGracePeriodSeconds"]) == (
        "Always",
        "ClusterFirst",
        30,
    )
    # PrepareForCreate: generation 1, TemplateGeneration as the apps/v1 annotation
    assert ds["metadata"]["generation"] == 1
    assert ds["metadata"]["annotations"] == {"deprecated.daemonset.template.generation": "1"}


def test_deployment_and_job_defaults_without_controllers(api: client.ApiClient) -> None:
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    body = {
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": _template({"app": "web"}),
        },
    }
    dep = api.sanitize_for_serialization(apps.create_namespaced_deployment(NS, body))
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["progressDeadlineSeconds"] == 600
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    # no Deployment controller: the status stays the empty struct (no invented Ready count)
    assert apps.read_namespaced_deployment_status("web", NS).status.ready_replicas is None
    job = {
        "metadata": {"name": "migrate"},
        "spec": {"template": _template({}, restartPolicy="Never")},
    }
    got = api.sanitize_for_serialization(batch.create_namespaced_job(NS, job))
    uid = got["metadata"]["uid"]
    # generateSelectorIfNeeded, then SetDefaults_Job on the way out of storage
    assert got["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert got["spec"]["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "migrate",
        "controller-uid": uid,
        "job-name": "migrate",
    }
    assert got["metadata"]["labels"] == got["spec"]["template"]["metadata"]["labels"]
    assert (got["spec"]["backoffLimit"], got["spec"]["completions"]) == (6, 1)
    assert got["spec"]["podReplacementPolicy"] == "TerminatingOrFailed"


# ------------------------------------------------------------------------ validation
def test_selector_must_match_the_template(apps: client.AppsV1Api) -> None:
    # bad values print as JSON since apimachinery v0.36 (the referee's ds-* cases,
    # tests/differential/test_validation.py, send these bodies to a real server)
    body = daemonset()
    body["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    st = invalid(apps.create_namespaced_daemon_set, NS, body)
    assert st["message"] == (
        'DaemonSet.apps "agent" is invalid: spec.template.metadata.labels: Invalid value: '
        '{"app":"agent"}: `selector` does not match template `labels`'
    )
    assert st["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: {"app":"agent"}: `selector` does not '
            "match template `labels`",
            "field": "spec.template.metadata.labels",
        }
    ]


def test_daemonset_strategy_restart_policy_and_surge(apps: client.AppsV1Api) -> None:
    body = daemonset(updateStrategy={"type": "Sometimes"})
    body["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    st = invalid(apps.create_namespaced_daemon_set, NS, body)
    assert causes(st) == [
        (
            "spec.template.spec.restartPolicy",
            'Unsupported value: "OnFailure": supported values: "Always"',
        ),
        (
            "spec.updateStrategy",
            'Unsupported value: {"Type":"Sometimes","RollingUpdate":null}: supported values: '
            '"RollingUpdate", "OnDelete"',
        ),
    ]
    both = daemonset(
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
        minReadySeconds=-1,
    )
    both["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = "10%"
    assert causes(invalid(apps.create_namespaced_daemon_set, NS, both)) == [
        ("spec.minReadySeconds", "Invalid value: -1: must be greater than or equal to 0"),
        (
            "spec.updateStrategy.rollingUpdate.maxSurge",
            "Invalid value: 1: may not be set when maxUnavailable is non-zero",
        ),
    ]


def test_selector_is_immutable_in_apps_v1(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_daemon_set(NS, daemonset())
    patch = {
        "spec": {
            "selector": {"matchLabels": {"app": "agent", "tier": "x"}},
            "template": {"metadata": {"labels": {"app": "agent", "tier": "x"}}},
        }
    }
    st = invalid(apps.patch_namespaced_daemon_set, "agent", NS, patch)
    assert causes(st) == [
        (
            "spec.selector",
            'Invalid value: {"matchLabels":{"app":"agent","tier":"x"}}: field is immutable',
        )
    ]
    # a template change is allowed and bumps generation and the template generation
    ok = apps.patch_namespaced_daemon_set(
        "agent",
        NS,
        {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "x:2"}]}}}},
    )
    assert ok.metadata.generation == 2
    assert ok.metadata.annotations["deprecated.daemonset.template.generation"] == "2"


def test_deployment_job_and_ingress_errors(api: client.ApiClient) -> None:
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    dep = {"metadata": {"name": "web"}, "spec": {"replicas": -1, "template": _template({"a": "b"})}}
    assert causes(invalid(apps.create_namespaced_deployment, NS, dep)) == [
        ("spec.replicas", "Invalid value: -1: must be greater than or equal to 0"),
        ("spec.selector", "Required value"),
    ]
    job = {"metadata": {"name": "j"}, "spec": {"parallelism": -2, "template": _template({})}}
    assert causes(invalid(batch.create_namespaced_job, NS, job)) == [
        ("spec.parallelism", "Invalid value: -2: must be greater than or equal to 0"),
        # defaulted to Always, which a Job refuses (validateJobSpec)
        ("spec.template.spec.restartPolicy", 'Required value: valid values: "OnFailure", "Never"'),
    ]
    svc = {"service": {"name": "web"}}
    with_port = {"service": {"name": "web", "port": {"number": 80}}}
    paths = [
        {"path": "api", "pathType": "Prefix", "backend": svc},
        {"path": "/", "pathType": "Regex", "backend": with_port},
    ]
    ing = {
        "metadata": {"name": "web"},
        "spec": {"rules": [{"host": "10.0.0.1", "http": {"paths": paths}}]},
    }
    st = invalid(client.NetworkingV1Api(api).create_namespaced_ingress, NS, ing)
    assert causes(st) == [
        ("spec.rules[0].host", 'Invalid value: "10.0.0.1": must be a DNS name, not an IP address'),
        ("spec.rules[0].http.paths[0].path", 'Invalid value: "api": must be an absolute path'),
        ("spec.rules[0].http.paths[0].backend", "Required value: port name or number is required"),
        (
            "spec.rules[0].http.paths[1].pathType",
            'Unsupported value: "Regex": supported values: "Exact", "ImplementationSpecific", '
            '"Prefix"',
        ),
    ]


def test_template_is_validated_as_a_pod_template(apps: client.AppsV1Api) -> None:
    body = daemonset()
    c = body["spec"]["template"]["spec"]["containers"][0]
    c["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    body["spec"]["template"]["metadata"]["labels"]["bad key"] = "x"
    body["spec"]["selector"]["matchLabels"]["bad key"] = "x"
    st = invalid(apps.create_namespaced_daemon_set, NS, body)
    fields = [f for f, _ in causes(st)]
    # ValidatePodTemplateSpec: template labels at spec.template.labels, the pod spec below
    assert "spec.template.labels" in fields and "spec.selector.matchLabels" in fields
    assert (
        "spec.template.spec.containers[0].resources.requests",
        'Invalid value: "2": must be less than or equal to cpu limit of 1',
    ) in causes(st)


# ------------------------------------------------------------ the DaemonSet controller
def test_one_pod_per_matching_node_and_pause_protocol(
    sim: SimCluster, v1: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    for n in ("a100-00", "a100-01"):
        label(v1, n, "true")
    apps.create_namespaced_daemon_set(NS, daemonset())
    by_node = wait_until(lambda: (p := pods_by_node(v1)) and len(p) == 2 and p)
    assert sorted(by_node) == ["a100-00", "a100-01"]
    pod = by_node["a100-00"][0]
    ds = apps.read_namespaced_daemon_set("agent", NS)
    assert pod.metadata.name.startswith("agent-") and len(pod.metadata.name) == len("agent-") + 5
    ref = pod.metadata.owner_references[0]
    assert (ref.kind, ref.name, ref.uid, ref.controller, ref.block_owner_deletion) == (
        "DaemonSet",
        "agent",
        ds.metadata.uid,
        True,
        True,
    )
    assert pod.metadata.labels["pod-template-generation"] == "1"
    assert pod.metadata.labels["controller-revision-hash"]
    # AddOrUpdateDaemonPodTolerations, ReplaceDaemonSetPodNodeNameNodeAffinity
    assert [(t.key, t.effect) for t in pod.spec.tolerations] == [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
    term = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    assert term.node_selector_terms[0].match_fields[0].values == ["a100-00"]
    wait_until(lambda: pod_phase(v1, pod.metadata.name) == "Running")  # its kubelet ran it
    st = wait_until(lambda: (s := apps.read_namespaced_daemon_set_status("agent", NS).status)
                    .number_ready == 2 and s)  # fmt: skip
    assert (st.desired_number_scheduled, st.current_number_scheduled, st.number_available) == (
        2,
        2,
        2,
    )
    assert (st.updated_number_scheduled, st.observed_generation, st.number_misscheduled) == (
        2,
        1,
        0,
    )

    # mig-manager pauses the node's GPU clients: the pod is deleted gracefully, not recreated
    label(v1, "a100-00", "paused-for-mig-change")
    wait_until(lambda: v1.read_namespaced_pod(pod.metadata.name, NS).metadata.deletion_timestamp)
    wait_until(lambda: "a100-00" not in pods_by_node(v1))
    st = wait_until(lambda: (s := apps.read_namespaced_daemon_set("agent", NS).status)
                    .desired_number_scheduled == 1 and s)  # fmt: skip
    assert st.current_number_scheduled == 1 and st.number_unavailable is None
    # and back: a new pod (another name) on that node
    label(v1, "a100-00", "true")
    again = wait_until(lambda: pods_by_node(v1).get("a100-00"))
    assert again[0].metadata.name != pod.metadata.name
    # a node that never matched never had one
    assert "h100-00" not in pods_by_node(v1)


def pod_phase(v1: client.CoreV1Api, name: str) -> str:
    return v1.read_namespaced_pod(name, NS).status.phase


def test_taints_against_tolerations(v1: client.CoreV1Api, apps: client.AppsV1Api) -> None:
    for n in ("a100-00", "a100-01", "a100-02"):
        label(v1, n, "true")
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    v1.patch_node("a100-01", {"spec": {"taints": [gpu]}})
    v1.patch_node("a100-02", {"spec": {"unschedulable": True}})  # cordoned: tolerated
    apps.create_namespaced_daemon_set(NS, daemonset())
    wait_until(lambda: len(pods_by_node(v1)) == 2)
    assert sorted(pods_by_node(v1)) == ["a100-00", "a100-02"]
    st = wait_until(lambda: (s := apps.read_namespaced_daemon_set("agent", NS).status)
                    .current_number_scheduled == 2 and s)  # fmt: skip
    assert st.desired_number_scheduled == 2
    # a NoSchedule taint on a node with a pod: kept (shouldContinueRunning), no longer desired
    v1.patch_node("a100-00", {"spec": {"taints": [gpu]}})
    st = wait_until(lambda: (s := apps.read_namespaced_daemon_set("agent", NS).status)
                    .number_misscheduled == 1 and s)  # fmt: skip
    assert st.desired_number_scheduled == 1 and "a100-00" in pods_by_node(v1)
    # NoExecute evicts it
    evict = {"key": "maintenance", "effect": "NoExecute"}
    v1.patch_node("a100-00", {"spec": {"taints": [gpu, evict]}})
    wait_until(lambda: "a100-00" not in pods_by_node(v1))
    # tolerating the GPU taint brings a pod to a100-01
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    apps.patch_namespaced_daemon_set(
        "agent", NS, {"spec": {"template": {"spec": {"tolerations": tol}}}}
    )
    wait_until(lambda: "a100-01" in pods_by_node(v1))
    assert "a100-00" not in pods_by_node(v1)


def test_pods_go_through_admission_and_the_garbage_collector(
    sim: SimCluster, v1: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    v1.create_namespaced_resource_quota(NS, quota("pods", {"count/pods": "0"}))
    sim.wait_for_controllers()
    label(v1, "a100-00", "true")
    apps.create_namespaced_daemon_set(NS, daemonset())
    st = wait_until(lambda: (s := apps.read_namespaced_daemon_set("agent", NS).status)
                    .desired_number_scheduled == 1 and s)  # fmt: skip
    assert st.current_number_scheduled == 0 and not pods_by_node(v1)  # the quota refused it
    v1.patch_namespaced_resource_quota("pods", NS, {"spec": {"hard": {"count/pods": "5"}}})
    wait_until(lambda: pods_by_node(v1).get("a100-00"), timeout=15)
    apps.delete_namespaced_daemon_set("agent", NS)  # background propagation: its pods go
    wait_until(lambda: not pods_by_node(v1))


def test_status_subresource_validation(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_daemon_set(NS, daemonset(name="x"))
    st = invalid(apps.patch_namespaced_daemon_set_status, "x", NS, {"status": {"numberReady": -1}})
    assert causes(st) == [
        ("status.numberReady", "Invalid value: -1: must be greater than or equal to 0")
    ]


def test_a_failed_daemon_pod_is_replaced(
    sim: SimCluster, v1: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    # podsShouldBeOnNode: a Failed daemon pod is deleted, and the node gets a new one
    label(v1, "a100-00", "true")
    apps.create_namespaced_daemon_set(NS, daemonset())
    first = wait_until(lambda: pods_by_node(v1).get("a100-00"))[0].metadata.name
    wait_until(lambda: pod_phase(v1, first) == "Running")
    sim.set_pod_phase(NS, first, "Failed")
    fresh = wait_until(
        lambda: (p := pods_by_node(v1).get("a100-00")) and p[0].metadata.name != first and p
    )
    assert len(fresh) == 1 and fresh[0].status.phase == "Running"


def test_update_validates_the_spec_twice(apps: client.AppsV1Api) -> None:
    # daemonSetStrategy.ValidateUpdate: ValidateDaemonSet, then ValidateDaemonSetUpdate, which
    # validates the spec again; NewInvalid keeps both causes, ToAggregate one message
    apps.create_namespaced_daemon_set(NS, daemonset())
    st = invalid(apps.patch_namespaced_daemon_set, "agent", NS, {"spec": {"minReadySeconds": -1}})
    err = ("spec.minReadySeconds", "Invalid value: -1: must be greater than or equal to 0")
    assert causes(st) == [err, err]
    assert st["message"] == (
        'DaemonSet.apps "agent" is invalid: spec.minReadySeconds: Invalid value: -1: must be '
        "greater than or equal to 0"
    )


def test_cronjob_statefulset_and_ingressclass(api: client.ApiClient) -> None:
    batch, apps = client.BatchV1Api(api), client.AppsV1Api(api)
    tpl = _template({}, restartPolicy="OnFailure")
    cj = {"metadata": {"name": "nightly"}, "spec": {"jobTemplate": {"spec": {"template": tpl}}}}
    cj["spec"]["concurrencyPolicy"] = "Sometimes"
    assert causes(invalid(batch.create_namespaced_cron_job, NS, cj)) == [
        ("spec.schedule", "Required value"),
        (
            "spec.concurrencyPolicy",
            'Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace"',
        ),
    ]
    cj["spec"] |= {"schedule": "0 3 * * *", "concurrencyPolicy": None}
    got = api.sanitize_for_serialization(batch.create_namespaced_cron_job(NS, cj))["spec"]
    # SetDefaults_CronJob; the job template's pod template gets SetDefaults_PodSpec only
    assert (got["concurrencyPolicy"], got["suspend"]) == ("Allow", False)
    assert (got["successfulJobsHistoryLimit"], got["failedJobsHistoryLimit"]) == (3, 1)
    assert "backoffLimit" not in got["jobTemplate"]["spec"]

    sts = {
        "metadata": {"name": "db"},
        "spec": {
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": _template({"app": "db"}),
        },
    }
    made = api.sanitize_for_serialization(apps.create_namespaced_stateful_set(NS, sts))["spec"]
    assert made["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert made["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    st = invalid(apps.patch_namespaced_stateful_set, "db", NS, {"spec": {"serviceName": "other"}})
    assert causes(st) == [
        (
            "spec",
            "Forbidden: updates to statefulset spec for fields other than 'replicas', "
            "'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' "
            "and 'minReadySeconds' are forbidden",
        )
    ]

    net = client.NetworkingV1Api(api)
    bad = {"metadata": {"name": "nginx"}, "spec": {"controller": "nginx"}}
    msg = 'Invalid value: "nginx": must be a domain-prefixed path (such as "acme.io/foo")'
    assert causes(invalid(net.create_ingress_class, bad)) == [("spec.controller", msg)]
    net.create_ingress_class(
        {"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}
    )
    st = invalid(net.patch_ingress_class, "nginx", {"spec": {"controller": "example.com/other"}})
    assert causes(st) == [
        ("spec.controller", 'Invalid value: "example.com/other": field is immutable')
    ]
