"""The DRA inventory's pure reading of slices and claims (inventory/dra.py)."""

from __future__ import annotations

from inventory import dra
from inventory.parsing import parse_node

GPU = "nvidia.com/gpu"


def device(name: str, kind: str, uuid: str, **attrs) -> dict:
    values = {"type": kind, "productName": "NVIDIA H100 80GB HBM3", **attrs}
    out = {"name": name, "attributes": {k: {"string": v} for k, v in values.items()}}
    out["attributes"]["uuid" if kind == "gpu" else "parentUUID"] = {"string": uuid}
    if kind == "gpu":
        out["capacity"] = {"memory": {"value": "80Gi"}}
    return out


def slice_(node: str, generation: int, devices: list[dict]) -> dict:
    pool = {"name": node, "generation": generation, "resourceSliceCount": 1}
    return {"spec": {"driver": dra.DRIVER, "nodeName": node, "devices": devices, "pool": pool}}


def test_a_node_without_gfd_labels_takes_its_product_and_gpus_from_the_devices():
    slices = [
        slice_("n1", 1, [device("gpu-0", "gpu", "GPU-a")]),  # an older generation: ignored
        slice_("n1", 2, [device("gpu-0", "gpu", "GPU-a"), device("gpu-1", "gpu", "GPU-b"),
                         device("gpu-2-mig-1g10gb-0-0", "mig", "GPU-c", profile="1g.10gb"),
                         device("gpu-2-mig-1g10gb-0-1", "mig", "GPU-c", profile="1g.10gb")]),
    ]  # fmt: skip
    inv = dra.read(slices, [], [])
    node = inv.nodes["n1"]
    assert node.resources == {GPU: 2, "nvidia.com/mig-1g.10gb": 2}
    assert (len(node.gpus), node.memory_mib) == (3, 80 * 1024)
    bare = {"metadata": {"name": "n1", "uid": "u"}, "spec": {}, "status": {}}
    facts = dra.node_facts(parse_node(bare), node)
    assert (facts.gpu_product, facts.gpu_count, facts.gpu_product_name) == (
        "NVIDIA-H100-80GB-HBM3", 3, "NVIDIA H100 80GB HBM3",
    )  # fmt: skip
    assert facts.resources == {GPU: (2, 2), "nvidia.com/mig-1g.10gb": (2, 2)}


def test_a_pods_claims_hold_what_is_allocated_or_ask_what_they_request():
    classes = [{"metadata": {"name": "gpu-portal-h100", "annotations": {
        dra.CLASS_ANNOTATION: "h100", dra.RESOURCE_ANNOTATION: GPU}}}]  # fmt: skip
    slices = [slice_("n1", 1, [device("gpu-0", "gpu", "GPU-a"), device("gpu-1", "gpu", "GPU-b")])]
    request = {"devices": {"requests": [
        {"name": "g", "exactly": {"deviceClassName": "gpu-portal-h100", "count": 2}}]}}  # fmt: skip
    results = [{"driver": dra.DRIVER, "pool": "n1", "device": d, "request": "g"}
               for d in ("gpu-0", "gpu-1")]  # fmt: skip
    allocated = {"metadata": {"namespace": "lab", "name": "held"}, "spec": request,
                 "status": {"allocation": {"devices": {"results": results}}}}  # fmt: skip
    pending = {"metadata": {"namespace": "lab", "name": "wants"}, "spec": request}
    generic = {"metadata": {"namespace": "lab", "name": "any"}, "spec": {"devices": {"requests": [
        {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}  # fmt: skip
    inv = dra.read(slices, [allocated, pending, generic], classes)
    assert inv.claims[("lab", "held")].allocated == {GPU: 2}
    assert inv.claims[("lab", "held")].node == "n1"
    assert (inv.claims[("lab", "wants")].requested, inv.claims[("lab", "wants")].gpu_class) == (
        {GPU: 2}, "h100",
    )  # fmt: skip
    assert inv.claims[("lab", "any")].requested == {GPU: 1}  # count defaults to 1
    pod = {"metadata": {"namespace": "lab", "name": "p"},
           "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "held"},
                                       {"name": "b", "resourceClaimTemplateName": "t"}]},
           "status": {"resourceClaimStatuses": [
               {"name": "b", "resourceClaimName": "wants"}]}}  # fmt: skip
    assert inv.pod_usage(pod) == ({GPU: 4}, "h100")
    generic_class = {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [
        {"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}  # fmt: skip
    assert dra.other_gpu_classes([*classes, generic_class]) == ["gpu.nvidia.com"]
