"""NVIDIA's DRA driver as it shows in the API: one ResourceSlice per GPU node (issue #22).

The real driver (kubernetes-sigs/dra-driver-nvidia-gpu, ``cmd/gpu-kubelet-plugin``) runs on
each node, reads the GPUs through NVML and publishes them, through the kubelet plugin
library's ResourceSlice controller, in a pool named after the node, owned by the Node. Here
the devices come from what the fleet put on the Node (GFD labels, and for MIG nodes the
layout mig-manager applied, :attr:`gpuemu.migmanager.MigManager.applied`), written in the
driver's own names and value formats:

- a whole GPU is ``gpu-<minor>`` (``deviceinfo.go`` ``GpuInfo.CanonicalName``) with the
  attributes of ``GpuInfo.Attributes``: ``type`` = ``gpu``, ``uuid``, ``productName`` (NVML's
  ``nvmlDeviceGetName``: "NVIDIA H100 80GB HBM3", spaces, not GFD's dashes), ``brand`` and
  ``architecture`` (go-nvlib ``GetBrandAsString``/``GetArchitectureAsString``: "Nvidia" or
  "Tesla", "Hopper", "Ada Lovelace"), ``cudaComputeCapability``, ``driverVersion`` and
  ``cudaDriverVersion`` as semantic versions ("9.0.0", "550.107.2", "12.4.0"), the standard
  ``resource.kubernetes.io/pciBusID``; capacity ``memory`` in bytes (``fullGpuCapacity``);
- a MIG device is ``gpu-<minor>-mig-<profile without dots>-<profile id>-<placement start>``
  (``mig.go`` ``MigSpecTuple.ToCanonicalName``) with ``type`` = ``mig``, ``parentUUID``,
  ``profile`` ("3g.40gb"), the parent's product, brand, architecture and versions
  (``CommonAttributesMig``), its own ``uuid``; capacity ``multiprocessors``, ``copyEngines``,
  ``decoders``, ``encoders``, ``jpegEngines``, ``ofaEngines``, ``memory`` (MiB x 2^20) and one
  ``memorySlice<i>`` per memory slice it covers (``CommonCapacitiesMig``, ``GetDevice``).

The driver's DeviceClasses (its Helm chart, ``templates/deviceclass-gpu.yaml`` and
``deviceclass-mig.yaml``) are :data:`DEVICE_CLASSES`. A GPU node of a DRA fleet advertises
no ``nvidia.com/gpu`` extended resource (the device plugin is off there: the GPUs are the
driver's), so the devices cannot be handed out twice.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from gpuagent.fake_nvml import PRODUCTS as NVML_PRODUCTS
from gpuemu.watch import Event
from simcluster.gpu import PRODUCTS, Layout

if TYPE_CHECKING:
    from gpuemu.emulator import Emulator

log = logging.getLogger("gpuemu.dra")
DRIVER = "gpu.nvidia.com"
RESOURCE_API = "resource.k8s.io/v1"
DEVICE_CLASSES = [
    {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": "device.driver == 'gpu.nvidia.com' && "
                        "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                    }
                }
            ],
            "extendedResourceName": "nvidia.com/gpu",
        },
    },
    {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": "mig.nvidia.com"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": "device.driver == 'gpu.nvidia.com' && "
                        "device.attributes['gpu.nvidia.com'].type == 'mig'"
                    }
                }
            ]
        },
    },
]
# NVML's GPU instance profile ids by slice count (nvml.h NVML_GPU_INSTANCE_PROFILE_*:
# 1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4, 1_SLICE_REV1 (+me) 7,
# 1_SLICE_REV2 (1g with twice the memory) 9)
_PROFILE_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
_ARCHITECTURES = {
    "volta": "Volta",
    "turing": "Turing",
    "ampere": "Ampere",
    "ada-lovelace": "Ada Lovelace",
    "hopper": "Hopper",
    "blackwell": "Blackwell",
}


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def _uuid(*parts: Any) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_OID, "/".join(str(p) for p in parts)))


def _version(text: str) -> str:
    """Masterminds semver's canonical form, as the driver writes it ("12.4" -> "12.4.0")."""
    nums = [int(n) for n in re.findall(r"\d+", text)[:3]] or [0]
    return ".".join(str(n) for n in [*nums, 0, 0][:3])


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _profile_id(profile, mig: dict) -> int:
    if profile.name.endswith("+me"):
        return 7
    smallest = min(p.memory for p in mig.values() if p.gi == 1)
    if profile.gi == 1 and profile.memory > smallest:
        return 9
    return _PROFILE_IDS.get(profile.gi, profile.gi)


def _placements(per_gpu: dict[str, int], mig: dict) -> list[tuple[str, int]]:
    """(profile, placement start) for one GPU's MIG devices: the largest first, each at the
    lowest free start that is a multiple of its size (NVML's placements; 7 memory slices)."""
    used: set[int] = set()
    out = []
    for name in sorted(per_gpu, key=lambda n: (-mig[n].gi, n)):
        size = mig[name].gi
        step = size if size in (1, 2, 4) else 4
        for _ in range(per_gpu[name]):
            start = next(
                (s for s in range(0, 7 - size + 1, step) if not used & set(range(s, s + size))),
                None,
            )
            if start is None:
                break
            used |= set(range(start, start + size))
            out.append((name, start))
    return out


def node_devices(node: dict[str, Any], layout: Layout | None) -> list[dict[str, Any]]:
    """The devices the driver would publish for ``node`` (module docstring); ``layout`` is the
    per-GPU MIG layout mig-manager applied (None: MIG off on every GPU)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    gfd = labels.get("nvidia.com/gpu.product", "").removesuffix("-SHARED")
    prod = PRODUCTS.get(gfd)
    if prod is None:
        return []
    count = int(labels.get("nvidia.com/gpu.count") or 0)
    name = node["metadata"]["name"]
    nvml = NVML_PRODUCTS.get(gfd)
    product_name = nvml.name if nvml else gfd.replace("-", " ")
    common = {
        "productName": _string(product_name),
        "brand": _string("Tesla" if product_name.startswith("Tesla") else "Nvidia"),
        "architecture": _string(_ARCHITECTURES.get(prod.family, "Unknown")),
        "cudaComputeCapability": {"version": f"{prod.major}.{prod.minor}.0"},
        "driverVersion": {
            "version": _version(labels.get("nvidia.com/cuda.driver-version.full", "0"))
        },
        "cudaDriverVersion": {
            "version": _version(labels.get("nvidia.com/cuda.runtime-version.full", "0"))
        },
    }
    devices = []
    for minor in range(count):
        gpu_uuid = "GPU-" + _uuid(name, minor)
        bus = {"resource.kubernetes.io/pciBusID": _string(f"0000:{0x10 + minor * 0x10:02x}:00.0")}
        per_gpu = layout[minor] if layout is not None and minor < len(layout) else None
        if per_gpu is None:
            devices.append(
                {
                    "name": f"gpu-{minor}",
                    "attributes": {
                        "type": _string("gpu"),
                        "uuid": _string(gpu_uuid),
                        **common,
                        **bus,
                    },
                    "capacity": {"memory": {"value": str(prod.memory * 2**20)}},
                }
            )
            continue
        for profile_name, start in _placements(per_gpu, prod.mig or {}):
            profile = (prod.mig or {})[profile_name]
            pid = _profile_id(profile, prod.mig or {})
            short = re.sub(r"[^a-z0-9-]", "-", profile_name.replace(".", ""))
            capacity = {
                "multiprocessors": {"value": str(profile.multiprocessors)},
                "copyEngines": {"value": str(profile.copy)},
                "decoders": {"value": str(profile.decoder)},
                "encoders": {"value": str(profile.encoder)},
                "jpegEngines": {"value": str(profile.jpeg)},
                "ofaEngines": {"value": str(profile.ofa)},
                "memory": {"value": str(profile.memory * 2**20)},
            }
            for i in range(start, start + profile.gi):
                capacity[f"memorySlice{i}"] = {"value": "1"}
            devices.append(
                {
                    "name": f"gpu-{minor}-mig-{short}-{pid}-{start}",
                    "attributes": {
                        "type": _string("mig"),
                        "uuid": _string("MIG-" + _uuid(name, minor, profile_name, start)),
                        "parentUUID": _string(gpu_uuid),
                        "profile": _string(profile_name),
                        **common,
                        **bus,
                    },
                    "capacity": capacity,
                }
            )
    return devices


def resource_slice(node: dict[str, Any], devices: list[dict], generation: int) -> dict[str, Any]:
    meta = node["metadata"]
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(meta["name"]),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": meta["name"],
            "pool": {"name": meta["name"], "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


class DraDriver:
    """Keeps one ResourceSlice per GPU node equal to :func:`node_devices` (module doc)."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.api = emu.api
        self.published: dict[str, list[dict]] = {}

    def on_node(self, ev: Event) -> None:
        if ev.new is None:  # the garbage collector deletes the slice with its owner
            if ev.old is not None:
                self.published.pop(ev.old["metadata"]["name"], None)
            return
        name = ev.new["metadata"]["name"]
        self.emu.queue.add(("dra", name), lambda: self.publish(name), 0.0)

    def publish(self, name: str) -> None:
        node = self.api.get_or_none("nodes", name)
        if node is None:
            return
        devices = node_devices(node, self.emu.mig.applied.get(name))
        if not devices or self.published.get(name) == devices:
            return
        # a new generation for each change: the scheduler uses the newest one
        current = self.api.get_or_none("resourceslices", slice_name(name))
        generation = int(current["spec"]["pool"].get("generation", 0)) + 1 if current else 1
        self.api.apply(resource_slice(node, devices, generation))
        self.published[name] = devices
        log.info(
            "%s: ResourceSlice with %d devices (generation %d)", name, len(devices), generation
        )
