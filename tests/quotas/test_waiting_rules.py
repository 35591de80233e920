"""quotas/waiting.py's reading of the cluster's signals (unit tests; the same signals made
by the real control plane are in tests/figures/test_waiting.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from quotas.waiting import (
    DraView,
    QueuePosition,
    findings,
    parse_exceeded,
    place_in_queues,
    scheduler_reasons,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"
# k8s.io/apiserver pkg/admission/plugin/resourcequota/controller.go, via the job controller
REFUSED = (
    'Error creating: pods "train-x7k2p" is forbidden: exceeded quota: gpu-quota, requested: '
    "requests.cpu=4,requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=12, "
    "limited: requests.nvidia.com/gpu=16"
)


def ts(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(reason: str, kind: str, name: str, message: str, minutes_ago: float = 1, **kw) -> dict:
    return {
        "metadata": {"name": f"{name}.{reason}", "namespace": "lab"},
        "involvedObject": {"kind": kind, "namespace": "lab", "name": name},
        "reason": reason,
        "message": message,
        "type": kw.get("type", "Warning"),
        "lastTimestamp": ts(minutes_ago),
    }


def gpu_pod(name: str, gpus: int = 2, **spec) -> dict:
    res = {"requests": {GPU: str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": "lab", "creationTimestamp": ts(5)},
        "spec": {"containers": [{"name": "main", "resources": res}], **spec},
        "status": {"phase": "Pending"},
    }


def test_a_quota_refusal_is_read_with_its_gpu_figures():
    assert parse_exceeded(REFUSED) == {
        "quota": "gpu-quota",
        "requested": {GPU: 8},
        "used": {GPU: 12},
        "limited": {GPU: 16},
        "selector": {},  # the class of a DRA DeviceClass key, none here
    }
    assert parse_exceeded("pods is forbidden: unable to validate against any pod security") is None


def test_a_refused_job_waits_until_it_creates_a_pod_and_old_refusals_lapse():
    refused = event("FailedCreate", "Job", "train", REFUSED)
    [f] = findings([], [refused], None, NOW)
    assert (f.kind, f.cause, f.name, f.owner, f.resource, f.amount) == (
        "workload", "quota", "train", "Job/train", GPU, 8,
    )  # fmt: skip
    assert (f.quota, f.used, f.limited) == ("gpu-quota", 12, 16)
    created = event("SuccessfulCreate", "Job", "train", "Created pod: train-abc", 0.5,
                    type="Normal")  # fmt: skip
    assert findings([], [refused, created], None, NOW) == []
    assert findings([], [event("FailedCreate", "Job", "train", REFUSED, 16)], None, NOW) == []


def test_pods_by_what_holds_them():
    unschedulable = gpu_pod("a")
    unschedulable["status"]["conditions"] = [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't "
                   "match Pod's node affinity/selector. preemption: 0/3 nodes are available",
    }]  # fmt: skip
    bound = gpu_pod("b", nodeName="h-0")
    gated = gpu_pod("c", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    held = gpu_pod("d", schedulerName="gpuemu-hold")
    cpu_only = gpu_pod("e", gpus=0)
    kubelet = event("UnexpectedAdmissionError", "Pod", "b", "Allocate failed")
    out = {f.name: f for f in findings([unschedulable, bound, gated, held, cpu_only],
                                       [kubelet], None, NOW)}  # fmt: skip
    assert set(out) == {"a", "b", "c", "d"}
    assert (out["a"].cause, out["a"].reasons) == ("unschedulable", ("capacity", "selector"))
    assert (out["b"].cause, out["b"].message) == (
        "starting", "UnexpectedAdmissionError: Allocate failed",
    )  # fmt: skip
    assert out["c"].cause == "queued"
    assert out["d"].message == "No scheduler has placed it yet (schedulerName gpuemu-hold)."


def test_a_queued_workload_with_kueues_message_hides_its_gated_pod():
    message = (
        "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor gpu-portal-h100, 4 more needed"
    )
    wl = {
        "metadata": {"name": "pod-sam-3f2a", "namespace": "lab",
                     "ownerReferences": [{"kind": "Pod", "name": "sam", "controller": True}]},
        "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {
            "containers": [{"name": "main", "resources": {"requests": {GPU: "8"}}}]}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                                   "reason": "Pending", "message": message}]},
    }  # fmt: skip
    reserved = {"conditions": [{"type": "QuotaReserved", "status": "True"}]}
    admitted = {**wl, "metadata": {**wl["metadata"], "name": "pod-ok-1"}, "status": reserved}
    gated = gpu_pod("sam", 8, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    [f] = findings([gated], [], [wl, admitted], NOW)
    assert (f.kind, f.cause, f.name, f.title, f.amount) == (
        "workload", "queued", "pod-sam-3f2a", "sam", 8,
    )  # fmt: skip
    assert (f.flavor, f.needed, f.message) == ("gpu-portal-h100", 4, message)


def test_queue_positions_are_kueues_from_one_and_missing_ones_say_why():
    def queued(name: str, lq: str = "default") -> dict:
        return {
            "metadata": {"name": name, "namespace": "lab"},
            "spec": {"queueName": lq, "podSets": [{"name": "main", "count": 2, "template": {
                "spec": {"containers": [{"name": "m", "resources": {"requests": {GPU: "4"}}}]}}}]},
        }  # fmt: skip

    found = findings([], [], [queued("a"), queued("b"), queued("c", "other")], NOW)
    assert [(f.name, f.local_queue, f.amount) for f in found] == [
        ("a", "default", 8), ("b", "default", 8), ("c", "other", 8),
    ]  # fmt: skip
    # PendingWorkload items as Kueue's visibility API lists them (positions from 0)
    pending = {
        "default": [
            {"metadata": {"name": "b"}, "localQueueName": "default", "priority": 5,
             "positionInLocalQueue": 0, "positionInClusterQueue": 3},
            {"metadata": {"name": "a"}, "localQueueName": "default", "priority": 0,
             "positionInLocalQueue": 1, "positionInClusterQueue": 4},
        ],
        "other": [],
    }  # fmt: skip
    place_in_queues(found, pending)
    a, b, c = found
    assert a.queue_position == QueuePosition("default", 2, 5)
    assert b.queue_position == QueuePosition("default", 1, 4)
    assert c.queue_position is None and "does not list it" in c.queue_note
    again = findings([], [], [queued("a")], NOW)
    place_in_queues(again, None, "not served")
    assert (again[0].queue_position, again[0].queue_note) == (None, "not served")


def test_scheduler_reasons_name_the_resource_asked_for():
    msg = "0/2 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb."
    assert scheduler_reasons(msg, "nvidia.com/mig-1g.10gb") == ("capacity",)
    assert scheduler_reasons(msg, GPU) == ()
    assert scheduler_reasons("1 node(s) had untolerated taint(s)", GPU) == ("taint",)


def test_on_a_dra_cluster_a_refused_claim_and_a_pods_claims_count_as_its_request():
    key = "gpu-portal-h100.deviceclass.resource.k8s.io/devices"
    selector = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    refusal = (
        'PodResourceClaim gpus: resourceclaims.resource.k8s.io "big-gpus-x2k9" is forbidden: '
        f"exceeded quota: gpu-portal-quota, requested: {key}=5, used: {key}=0, limited: {key}=4"
    )
    claimless = {"metadata": {"name": "big", "namespace": "lab", "creationTimestamp": ts(3)},
                 "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "t"}],
                          "containers": [{"name": "main"}]},
                 "status": {"phase": "Pending"}}  # fmt: skip
    verdict = "0/3 nodes are available: 3 cannot allocate all claims."
    waiting = {**claimless, "metadata": {**claimless["metadata"], "name": "wait"},
               "status": {"phase": "Pending", "conditions": [{
                   "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": verdict}]}}  # fmt: skip
    dra = DraView(usage={"wait": ({GPU: 3}, selector)}, keys={key: (GPU, selector)})
    events = [event("FailedResourceClaimCreation", "Pod", "big", refusal)]
    refused, waits = findings([claimless, waiting], events, None, NOW, dra)
    assert (refused.kind, refused.name, refused.cause, refused.resource, refused.amount) == (
        "pod", "big", "quota", GPU, 5,
    )  # fmt: skip
    assert (refused.quota, refused.used, refused.limited, refused.selector) == (
        "gpu-portal-quota", 0, 4, selector,
    )  # fmt: skip
    assert (waits.name, waits.cause, waits.amount, waits.reasons, waits.selector) == (
        "wait", "unschedulable", 3, ("capacity",), selector,
    )  # fmt: skip
    # without the DRA view a claim-only pod asks for no GPU the portal can name
    assert findings([claimless, waiting], events, None, NOW) == []
