"""The fake DRA driver (gpuemu/dra.py) on the real control plane: its ResourceSlices are what
the real kube-scheduler allocates from, the real ResourceQuota admission counts claims per
DeviceClass, and a MIG reconfiguration republishes the node's devices.

Every expectation is the control plane's own behaviour (allocation results, the quota
evaluator's message, kubernetes ``pkg/quota/v1/evaluator/core/resource_claims.go``), never
the emulation's bookkeeping.
"""

from __future__ import annotations

import pytest

from devstack.kubeapi import KubeError, wait_for
from gpuemu.dra import DRIVER
from tests import kubesim

H100_NAME = "NVIDIA H100 80GB HBM3"  # NVML's name (nvmlDeviceGetName), not GFD's label
FLEET = {
    "dra": True,
    "gpuOperator": {"migStrategy": "mixed", "configMountDelay": 0.2, "devicePluginRestart": 0.2},
    "nodes": [
        {"name": "h100-0", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}},
        {"name": "a100-0", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8}},
        {"name": "mig-0", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8,
                                  "mig": {"strategy": "mixed", "config": "all-1g.10gb"}}},
    ],
    "namespaces": [{"name": "team"}],
}  # fmt: skip
RESOURCE = "resource.k8s.io/v1"


def device_class(name: str, expression: str) -> dict:
    return {"apiVersion": RESOURCE, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}  # fmt: skip


def claim(name: str, device_class: str, count: int) -> dict:
    return {"apiVersion": RESOURCE, "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": device_class, "count": count}}]}}}  # fmt: skip


def pod_with_claim(name: str, claim_name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": claim_name}],
                     "containers": [{"name": "main", "image": "cuda",
                                     "resources": {"claims": [{"name": "gpus"}]}}]}}  # fmt: skip


def running(api, name: str, namespace: str = "team") -> dict:
    """The pod once its kubelet (kwok) runs it."""
    return wait_for(
        lambda: (p := api.get("pods", name, namespace))["status"].get("phase") == "Running" and p,
        what=f"{namespace}/{name} Running",
    )


def attr(device: dict, key: str):
    value = device["attributes"][key]
    return next(iter(value.values()))


@pytest.fixture
def cluster(tmp_path):
    sim = kubesim.start(FLEET, tmp_path, portal=False)
    yield sim
    sim.stop()


def slices(api) -> dict[str, dict]:
    return {s["spec"]["nodeName"]: s for s in api.list("resourceslices")}


def test_each_gpu_node_publishes_its_devices_in_the_drivers_format(cluster):
    api = cluster.api
    by_node = wait_for(lambda: (s := slices(api)) and len(s) == 3 and s, what="three slices")
    h100 = by_node["h100-0"]["spec"]
    assert (h100["driver"], h100["pool"]["name"], h100["pool"]["resourceSliceCount"]) == (
        DRIVER, "h100-0", 1,
    )  # fmt: skip
    assert [d["name"] for d in h100["devices"]] == [f"gpu-{i}" for i in range(8)]
    gpu = h100["devices"][0]
    assert (attr(gpu, "type"), attr(gpu, "productName"), attr(gpu, "architecture")) == (
        "gpu", H100_NAME, "Hopper",
    )  # fmt: skip
    assert attr(gpu, "cudaComputeCapability") == "9.0.0"
    assert len({attr(d, "uuid") for d in h100["devices"]}) == 8
    owner = by_node["h100-0"]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Node", "h100-0")
    # all-1g.10gb: 7 MIG devices on each of 8 GPUs, each naming its parent and profile
    mig = by_node["mig-0"]["spec"]["devices"]
    assert len(mig) == 56 and {attr(d, "type") for d in mig} == {"mig"}
    assert {attr(d, "profile") for d in mig} == {"1g.10gb"}
    assert mig[0]["name"] == "gpu-0-mig-1g10gb-0-0"
    assert len({attr(d, "parentUUID") for d in mig}) == 8
    # the device plugin is off on a DRA node: no extended resource to hand the GPUs out twice
    alloc = api.get("nodes", "h100-0")["status"]["allocatable"]
    assert not [r for r in alloc if r.startswith("nvidia.com/")]
    # the driver's own DeviceClasses are installed
    assert {"gpu.nvidia.com", "mig.nvidia.com"} <= {
        d["metadata"]["name"] for d in api.list("deviceclasses")
    }


def test_the_scheduler_allocates_a_model_and_quota_counts_devices_per_class(cluster):
    api = cluster.api
    wait_for(lambda: len(slices(api)) == 3, what="three slices")
    api.create("deviceclasses", device_class(
        "h100", f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu' "
                f"&& device.attributes['{DRIVER}'].productName == '{H100_NAME}'"))  # fmt: skip
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {
        "h100.deviceclass.resource.k8s.io/devices": "4",
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "0"}}}  # fmt: skip
    api.create("resourcequotas", quota, "team")
    wait_for(
        lambda: api.get("resourcequotas", "gpus", "team").get("status", {}).get("used"),
        what="the quota controller's first count",
    )
    api.create("resourceclaims", claim("two", "h100", 2), "team")
    api.create("pods", pod_with_claim("train", "two"), "team")
    pod = running(api, "train")
    assert pod["spec"]["nodeName"] == "h100-0"
    allocated = api.get("resourceclaims", "two", "team")["status"]
    assert {(r["pool"], r["driver"]) for r in allocated["allocation"]["devices"]["results"]} == {
        ("h100-0", DRIVER)
    }
    assert len(allocated["allocation"]["devices"]["results"]) == 2
    assert [r["name"] for r in allocated["reservedFor"]] == ["train"]
    wait_for(
        lambda: (
            api.get("resourcequotas", "gpus", "team")["status"]["used"].get(
                "h100.deviceclass.resource.k8s.io/devices"
            )
            == "2"
        ),
        # quota admission charges the claim at once, but the quota controller's own count
        # (from its claim informer) may overwrite it for a while on a loaded machine: the
        # full suite on 2 cores once took over 30 s to settle
        timeout=90,
        what="2 H100 devices used",
    )
    with pytest.raises(KubeError) as beyond:
        api.create("resourceclaims", claim("three", "h100", 3), "team")
    assert beyond.value.status == 403
    assert (
        "exceeded quota: gpus, requested: h100.deviceclass.resource.k8s.io/devices=3, "
        "used: h100.deviceclass.resource.k8s.io/devices=2, "
        "limited: h100.deviceclass.resource.k8s.io/devices=4"
    ) in str(beyond.value)
    with pytest.raises(KubeError) as generic:  # the driver's generic class bypasses nothing
        api.create("resourceclaims", claim("any", "gpu.nvidia.com", 1), "team")
    assert "limited: gpu.nvidia.com.deviceclass.resource.k8s.io/devices=0" in str(generic.value)


def test_a_mig_claim_by_profile_and_a_reconfigured_node_republished(cluster):
    api = cluster.api
    wait_for(lambda: len(slices(api)) == 3, what="three slices")
    expression = (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig' "
        f"&& device.attributes['{DRIVER}'].profile == '1g.10gb'"
    )
    api.create("deviceclasses", device_class("a100-1g10gb", expression))
    api.create("resourceclaims", claim("slice", "a100-1g10gb", 1), "team")
    api.create("pods", pod_with_claim("notebook", "slice"), "team")
    pod = running(api, "notebook")
    assert pod["spec"]["nodeName"] == "mig-0"
    [result] = api.get("resourceclaims", "slice", "team")["status"]["allocation"]["devices"][
        "results"
    ]
    assert result["device"].startswith("gpu-") and "-mig-1g10gb-" in result["device"]

    # mig-manager applies all-3g.40gb on the A100 node: its slice is republished, newer
    api.patch("nodes", "a100-0", {"metadata": {"labels": {"nvidia.com/mig.config": "all-3g.40gb"}}})

    def republished():
        spec = slices(api)["a100-0"]["spec"]
        return spec["pool"]["generation"] > 1 and spec

    spec = wait_for(republished, timeout=60, what="the A100 node's slice republished")
    assert len(spec["devices"]) == 16
    assert {attr(d, "profile") for d in spec["devices"]} == {"3g.40gb"}
    assert sorted(d["name"] for d in spec["devices"])[:2] == [
        "gpu-0-mig-3g40gb-2-0", "gpu-0-mig-3g40gb-2-4",
    ]  # fmt: skip
