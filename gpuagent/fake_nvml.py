"""A fake ``pynvml`` module driven by a scenario, for tests, the demo fleet and ``--fake-nvml``.

An instance of :class:`FakeNvml` has the same function names, constants and ``NVMLError_*``
classes as ``pynvml`` (nvidia-ml-py), so the agent takes it in place of the real module and
none of the agent's code is patched. Values are pure functions of (scenario, clock), so a
fleet of hundreds of fake GPUs costs no memory beyond its scenario, and tests are
deterministic.

Scenario (a dict, or YAML/JSON via :func:`load_scenario`)::

    product: NVIDIA-A100-SXM4-80GB   # a key of PRODUCTS (spaces allowed)
    gpus: 8
    driver_version: "550.107.02"
    cuda_driver_version: 12040
    seed: 1                           # varies UUIDs, phases and noise
    patterns: [busy, busy, idle, free, hot, busy, busy, idle]  # per GPU, or one name
    fixed: {0: {util: 50, mem_util: 20, memory_used_mib: 1000, temp: 40, power_w: 100}}
    mig: {0: ["3g.40gb", "3g.40gb"], 1: []}   # MIG on for these GPUs; [] = on, no instances
    mig_pending: {2: true}                    # pending mode differs from current
    processes: {0: [{pid: 4242, used_memory_mib: 20000, mig: 0}]}  # overrides generated ones
    failures:
      library_missing: true        # every nvmlInit fails; an int N fails only the first N
      not_supported: {nvmlDeviceGetEnforcedPowerLimit: all, nvmlDeviceGetTemperature: [2]}
      no_permission: {nvmlDeviceGetPowerUsage: [1]}
      lost: [3]                    # every call on these GPUs raises NVMLError_GpuIsLost

Patterns: ``busy`` (training, 80-100 % with periodic dips), ``idle`` (allocated but
0-3 %, some memory held), ``hot`` (busy at ~88 C), ``free`` (no process), ``fixed`` (values
from ``fixed``, for tests).
"""

from __future__ import annotations

import json
import math
import random
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# ------------------------------------------------------------------ constants (pynvml's values)

NVML_SUCCESS = 0
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_TEMPERATURE_GPU = 0
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SYSTEM = 50

_ERRORS = {
    "Uninitialized": 1,
    "InvalidArgument": 2,
    "NotSupported": 3,
    "NoPermission": 4,
    "AlreadyInitialized": 5,
    "NotFound": 6,
    "InsufficientSize": 7,
    "DriverNotLoaded": 9,
    "Timeout": 10,
    "LibraryNotFound": 12,
    "FunctionNotFound": 13,
    "GpuIsLost": 15,
    "LibRmVersionMismatch": 18,
    "Unknown": 999,
}


class NVMLError(Exception):
    """Mirrors ``pynvml.NVMLError``: ``NVMLError(code)`` builds the matching subclass."""

    _value_class: dict[int, type[NVMLError]] = {}
    value: int = 999

    def __new__(cls, value: int | None = None) -> NVMLError:
        if cls is NVMLError and value is not None:
            cls = NVMLError._value_class.get(value, NVMLError)
        obj = Exception.__new__(cls)
        obj.value = value if value is not None else cls.value
        return obj

    def __init__(self, value: int | None = None) -> None:
        super().__init__(self.value)

    def __str__(self) -> str:
        return f"NVML error {self.value} ({type(self).__name__})"


def _make_errors() -> dict[str, type[NVMLError]]:
    classes = {}
    for name, code in _ERRORS.items():
        cls = type(f"NVMLError_{name}", (NVMLError,), {"value": code})
        NVMLError._value_class[code] = cls
        classes[f"NVMLError_{name}"] = cls
    return classes


_ERROR_CLASSES = _make_errors()
NVMLError_Uninitialized = _ERROR_CLASSES["NVMLError_Uninitialized"]
NVMLError_InvalidArgument = _ERROR_CLASSES["NVMLError_InvalidArgument"]
NVMLError_NotSupported = _ERROR_CLASSES["NVMLError_NotSupported"]
NVMLError_NoPermission = _ERROR_CLASSES["NVMLError_NoPermission"]
NVMLError_NotFound = _ERROR_CLASSES["NVMLError_NotFound"]
NVMLError_DriverNotLoaded = _ERROR_CLASSES["NVMLError_DriverNotLoaded"]
NVMLError_LibraryNotFound = _ERROR_CLASSES["NVMLError_LibraryNotFound"]
NVMLError_FunctionNotFound = _ERROR_CLASSES["NVMLError_FunctionNotFound"]
NVMLError_GpuIsLost = _ERROR_CLASSES["NVMLError_GpuIsLost"]
NVMLError_Unknown = _ERROR_CLASSES["NVMLError_Unknown"]

# ------------------------------------------------------------------ product catalogue


@dataclass(frozen=True)
class FakeProduct:
    """What the fake needs about a GPU model (MIG memory in MiB as NVML reports it)."""

    name: str  # as nvmlDeviceGetName spells it
    memory_mib: int
    power_limit_w: float
    idle_power_w: float
    nvlinks: int  # active NVLinks per GPU through NVSwitch (0: PCIe only)
    mig: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # name -> (slices, MiB, id)
    balanced: dict[str, int] = field(default_factory=dict)


def _mig(rows: list[tuple[str, int, int]]) -> dict[str, tuple[int, int, int]]:
    return {name: (slices, mib, pid) for pid, (name, slices, mib) in enumerate(rows)}


_A100_80 = _mig(
    [
        ("1g.10gb", 1, 9728),
        ("1g.10gb+me", 1, 9728),
        ("1g.20gb", 1, 19968),
        ("2g.20gb", 2, 19968),
        ("3g.40gb", 3, 40192),
        ("4g.40gb", 4, 40192),
        ("7g.80gb", 7, 80384),
    ]
)
_H100_80 = _mig(
    [
        ("1g.10gb", 1, 9984),
        ("1g.10gb+me", 1, 9984),
        ("1g.20gb", 1, 20096),
        ("2g.20gb", 2, 20096),
        ("3g.40gb", 3, 40320),
        ("4g.40gb", 4, 40320),
        ("7g.80gb", 7, 80896),
    ]
)
_BALANCED_80 = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}

PRODUCTS: dict[str, FakeProduct] = {
    "NVIDIA-A100-SXM4-80GB": FakeProduct(
        "NVIDIA A100-SXM4-80GB", 81920, 400.0, 60.0, 12, _A100_80, _BALANCED_80
    ),
    "NVIDIA-A100-SXM4-40GB": FakeProduct(
        "NVIDIA A100-SXM4-40GB",
        40960,
        400.0,
        55.0,
        12,
        _mig(
            [
                ("1g.5gb", 1, 4864),
                ("1g.5gb+me", 1, 4864),
                ("1g.10gb", 1, 9856),
                ("2g.10gb", 2, 9856),
                ("3g.20gb", 3, 19968),
                ("4g.20gb", 4, 19968),
                ("7g.40gb", 7, 40192),
            ]
        ),
        {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
    ),
    "NVIDIA-A100-80GB-PCIe": FakeProduct(
        "NVIDIA A100 80GB PCIe", 81920, 300.0, 45.0, 0, _A100_80, _BALANCED_80
    ),
    "NVIDIA-H100-80GB-HBM3": FakeProduct(
        "NVIDIA H100 80GB HBM3", 81559, 700.0, 70.0, 18, _H100_80, _BALANCED_80
    ),
    "NVIDIA-H200": FakeProduct(
        "NVIDIA H200",
        143771,
        700.0,
        75.0,
        18,
        _mig(
            [
                ("1g.18gb", 1, 16384),
                ("1g.18gb+me", 1, 16384),
                ("1g.35gb", 1, 32768),
                ("2g.35gb", 2, 32768),
                ("3g.71gb", 3, 71680),
                ("4g.71gb", 4, 71680),
                ("7g.141gb", 7, 143360),
            ]
        ),
        {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
    ),
    "NVIDIA-A30": FakeProduct(
        "NVIDIA A30",
        24576,
        165.0,
        30.0,
        0,
        _mig(
            [
                ("1g.6gb", 1, 5836),
                ("1g.6gb+me", 1, 5836),
                ("2g.12gb", 2, 11904),
                ("2g.12gb+me", 2, 11904),
                ("4g.24gb", 4, 24064),
            ]
        ),
        {"1g.6gb": 2, "2g.12gb": 1},
    ),
    "Tesla-V100-SXM2-16GB": FakeProduct("Tesla V100-SXM2-16GB", 16384, 300.0, 40.0, 6),
    "Tesla-V100-SXM2-32GB": FakeProduct("Tesla V100-SXM2-32GB", 32768, 300.0, 40.0, 6),
    "NVIDIA-L40S": FakeProduct("NVIDIA L40S", 46068, 350.0, 35.0, 0),
    "NVIDIA-L4": FakeProduct("NVIDIA L4", 23034, 72.0, 16.0, 0),
    "Tesla-T4": FakeProduct("Tesla T4", 15360, 70.0, 10.0, 0),
}


def product(name: str) -> FakeProduct:
    """Look a product up by its GFD label value (``NVIDIA-A100-SXM4-80GB``); spaces allowed."""
    key = name.replace(" ", "-")
    if key not in PRODUCTS:
        raise ValueError(f"unknown GPU product {name!r}; known: {', '.join(sorted(PRODUCTS))}")
    return PRODUCTS[key]


def mig_layout(prod: FakeProduct, config: str, gpus: int) -> dict[int, list[str]]:
    """Per-GPU MIG instances for a stock mig-parted config name (all-disabled, all-balanced,
    all-<profile>, all-enabled)."""
    if config == "all-disabled" or not prod.mig:
        return {}
    if config == "all-enabled":
        return {i: [] for i in range(gpus)}
    if config == "all-balanced":
        names = [n for n, c in prod.balanced.items() for _ in range(c)]
        return {i: list(names) for i in range(gpus)}
    prof = config.removeprefix("all-")
    if prof not in prod.mig:
        raise ValueError(f"unknown MIG config {config!r} for {prod.name}")
    slices = prod.mig[prof][0]
    count = 1 if prof.endswith("+me") else 7 // slices
    if slices == 4 and prod.memory_mib < 30000:  # A30: 4 compute slices in all
        count = 1
    return {i: [prof] * count for i in range(gpus)}


# ------------------------------------------------------------------ handles


@dataclass
class _Gpu:
    index: int
    uuid: str
    bus_id: str
    pattern: str
    mig: list[_Mig] | None  # None: MIG off
    mig_pending: bool


@dataclass
class _Mig:
    parent: _Gpu
    index: int
    uuid: str
    profile: str
    slices: int
    memory_mib: int
    profile_id: int


@dataclass(frozen=True)
class _GpuInstance:
    mig: _Mig


def _uuid(seed: Any, *parts: Any) -> str:
    return str(
        uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"gpuagent-fake/{seed}/" + "/".join(map(str, parts)))
    )


def load_scenario(path: str | Path) -> dict[str, Any]:
    """Read a scenario from YAML (PyYAML, only needed for this) or JSON."""
    text = Path(path).read_text()
    if str(path).endswith(".json"):
        return json.loads(text)
    import yaml

    return yaml.safe_load(text) or {}


def _per_gpu(value: Any, gpus: int) -> dict[int, Any]:
    """``{0: x}`` / ``{"0": x}`` / a list / one scalar for all -> ``{index: value}``."""
    if isinstance(value, Mapping):
        return {int(k): v for k, v in value.items()}
    if isinstance(value, list):
        return dict(enumerate(value))
    return dict.fromkeys(range(gpus), value)


class FakeNvml:
    """A stand-in for the ``pynvml`` module. ``clock`` drives the time patterns."""

    def __init__(
        self, scenario: Mapping[str, Any] | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        sc = dict(scenario or {})
        self.scenario = sc
        self.clock = clock
        self.product = product(sc.get("product", "NVIDIA-A100-SXM4-80GB"))
        self.seed = sc.get("seed", 0)
        self.driver_version = str(sc.get("driver_version", "550.107.02"))
        self.cuda_driver_version = int(sc.get("cuda_driver_version", 12040))
        count = int(sc.get("gpus", 8))
        patterns = sc.get("patterns", "busy")
        pattern_of = _per_gpu(patterns, count)
        self.fixed = _per_gpu(sc.get("fixed", {}), count)
        migs = _per_gpu(sc.get("mig", {}), count)
        pending = _per_gpu(sc.get("mig_pending", {}), count)
        self.process_override = _per_gpu(sc.get("processes", {}), count)
        failures = sc.get("failures", {}) or {}
        self.library_missing = failures.get("library_missing", False)
        self.not_supported = self._failure_map(failures.get("not_supported", {}), count)
        self.no_permission = self._failure_map(failures.get("no_permission", {}), count)
        self.lost = {int(i) for i in failures.get("lost", [])}
        self.init_calls = 0
        self.initialized = False
        self.gpus: list[_Gpu] = []
        for i in range(count):
            gpu = _Gpu(
                index=i,
                uuid="GPU-" + _uuid(self.seed, i),
                bus_id=f"00000000:{0x07 + 0x10 * i:02X}:00.0",
                pattern=str(pattern_of.get(i, "busy")),
                mig=None,
                mig_pending=False,
            )
            if i in migs and migs[i] is not None:
                gpu.mig = []
                for m, prof in enumerate(migs[i]):
                    slices, mib, pid = self.product.mig[prof]
                    gpu.mig.append(
                        _Mig(gpu, m, "MIG-" + _uuid(self.seed, i, "mig", m), prof, slices, mib, pid)
                    )
            current = gpu.mig is not None
            gpu.mig_pending = bool(pending.get(i, current))
            self.gpus.append(gpu)
        for name, cls in _ERROR_CLASSES.items():
            setattr(self, name, cls)
        self.NVMLError = NVMLError

    @staticmethod
    def _failure_map(raw: Mapping[str, Any], count: int) -> dict[str, set[int]]:
        out = {}
        for fn, which in raw.items():
            out[fn] = set(range(count)) if which in ("all", "*", True) else {int(i) for i in which}
        return out

    def __getattr__(self, name: str) -> Any:
        """Constants not defined above resolve like pynvml's module attributes would."""
        value = globals().get(name)
        if name.startswith("NVML_") and value is not None:
            return value
        raise AttributeError(name)

    # -------------------------------------------------------------- plumbing

    def _check(self, fn: str, dev: _Gpu | _Mig | None = None) -> None:
        if not self.initialized:
            raise NVMLError_Uninitialized()
        gpu = dev.parent if isinstance(dev, _Mig) else dev
        if gpu is None:
            return
        if gpu.index in self.lost:
            raise NVMLError_GpuIsLost()
        if gpu.index in self.not_supported.get(fn, ()):
            raise NVMLError_NotSupported()
        if gpu.index in self.no_permission.get(fn, ()):
            raise NVMLError_NoPermission()

    def _noise(self, gpu: int, what: str, bucket: int) -> float:
        """Deterministic noise in [0, 1) for (gpu, metric, time bucket)."""
        return random.Random(f"{self.seed}/{gpu}/{what}/{bucket}").random()  # noqa: S311

    def _phase(self, gpu: int) -> float:
        return self._noise(gpu, "phase", 0) * 2 * math.pi

    def _values(self, gpu: _Gpu) -> dict[str, float]:
        """Utilisation, memory, temperature and power for the GPU at the current clock."""
        t = self.clock()
        i = gpu.index
        p = self.product
        pattern = gpu.pattern
        if pattern == "fixed":
            f = self.fixed.get(i, {})
            return {
                "util": f.get("util", 0),
                "mem_util": f.get("mem_util", 0),
                "memory_used_mib": f.get("memory_used_mib", 0),
                "temp": f.get("temp", 35),
                "power_w": f.get("power_w", p.idle_power_w),
            }
        bucket = int(t // 15)
        n = self._noise(i, "n", bucket)
        if pattern in ("busy", "hot"):
            # Steady training around 92 % with a slow wave, and a ~1-minute dip (checkpoint or
            # evaluation) roughly every 20 minutes.
            util = 92 + 6 * math.sin(t / 600 + self._phase(i)) + 4 * (n - 0.5)
            if int(t // 60 + i * 7) % 20 == 0:
                util = 15 + 25 * n
            util = max(0.0, min(100.0, util))
            mem_used = p.memory_mib * (0.78 + 0.12 * self._noise(i, "mem", int(t // 3600)))
            mem_util = util * 0.45 + 5 * n
        elif pattern == "idle":
            util = 3 * n
            mem_used = p.memory_mib * (0.05 + 0.25 * self._noise(i, "mem", 0))
            mem_util = util / 3
        else:  # free
            util = 0.0
            mem_used = 4.0
            mem_util = 0.0
        temp = 86 + 3 * n if pattern == "hot" else 32 + 0.3 * util + 3 * n
        power = p.idle_power_w + (p.power_limit_w - p.idle_power_w) * 0.9 * util / 100
        return {
            "util": round(util),
            "mem_util": round(mem_util),
            "memory_used_mib": round(mem_used),
            "temp": round(temp),
            "power_w": power,
        }

    def _mig_used_mib(self, mig: _Mig) -> int:
        busy = self._noise(mig.parent.index, f"mig{mig.index}", 0) < 0.6
        if not busy or mig.parent.pattern in ("free", "fixed"):
            return 0 if mig.parent.pattern == "fixed" else 13
        return round(mig.memory_mib * (0.6 + 0.3 * self._noise(mig.parent.index, "m", mig.index)))

    def _processes(self, gpu: _Gpu) -> list[tuple[int, int, _Mig | None]]:
        """(pid, used MiB, MIG instance) for the GPU's compute processes."""
        if gpu.index in self.process_override:
            out = []
            for p in self.process_override[gpu.index] or []:
                mig = gpu.mig[p["mig"]] if p.get("mig") is not None and gpu.mig else None
                out.append((int(p["pid"]), int(p.get("used_memory_mib", 0)), mig))
            return out
        base = 1000 + 97 * gpu.index + int(self._noise(gpu.index, "pid", 0) * 50000)
        if gpu.mig is not None:
            return [
                (base + m.index, used - 500, m)
                for m in gpu.mig
                if (used := self._mig_used_mib(m)) > 500
            ]
        if gpu.pattern in ("free", "fixed"):
            return []
        return [(base, max(0, int(self._values(gpu)["memory_used_mib"]) - 500), None)]

    # -------------------------------------------------------------- pynvml API

    def nvmlInit(self) -> None:
        self.init_calls += 1
        missing = self.library_missing
        if missing is True or (isinstance(missing, int) and self.init_calls <= missing):
            raise NVMLError_LibraryNotFound()
        self.initialized = True

    def nvmlShutdown(self) -> None:
        if not self.initialized:
            raise NVMLError_Uninitialized()
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Gpu:
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: _Gpu | _Mig) -> str:
        self._check("nvmlDeviceGetUUID", handle)
        return handle.uuid

    def nvmlDeviceGetName(self, handle: _Gpu | _Mig) -> str:
        self._check("nvmlDeviceGetName", handle)
        if isinstance(handle, _Mig):
            return f"{self.product.name} MIG {handle.profile}"
        return self.product.name

    def nvmlDeviceGetPciInfo(self, handle: _Gpu) -> SimpleNamespace:
        self._check("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=handle.bus_id.encode(), busIdLegacy=handle.bus_id[4:].encode())

    def nvmlDeviceGetMemoryInfo(self, handle: _Gpu | _Mig) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo", handle)
        if isinstance(handle, _Mig):
            total = handle.memory_mib
            used = self._mig_used_mib(handle)
        else:
            total = self.product.memory_mib
            if handle.mig is not None:
                used = sum(self._mig_used_mib(m) for m in handle.mig) + 5 * len(handle.mig)
            else:
                used = int(self._values(handle)["memory_used_mib"])
        mib = 1024 * 1024
        return SimpleNamespace(total=total * mib, used=used * mib, free=(total - used) * mib)

    def nvmlDeviceGetUtilizationRates(self, handle: _Gpu | _Mig) -> SimpleNamespace:
        self._check("nvmlDeviceGetUtilizationRates", handle)
        if isinstance(handle, _Mig) or handle.mig is not None:
            raise NVMLError_NotSupported()  # as on real MIG-enabled GPUs (DCGM has per-MIG)
        v = self._values(handle)
        return SimpleNamespace(gpu=int(v["util"]), memory=int(v["mem_util"]))

    def nvmlDeviceGetTemperature(self, handle: _Gpu, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return int(self._values(handle)["temp"])

    def nvmlDeviceGetPowerUsage(self, handle: _Gpu) -> int:
        self._check("nvmlDeviceGetPowerUsage", handle)
        if handle.mig is not None:
            used = sum(self._mig_used_mib(m) for m in handle.mig)
            frac = used / self.product.memory_mib
            p = self.product
            return int((p.idle_power_w + (p.power_limit_w - p.idle_power_w) * frac) * 1000)
        return int(self._values(handle)["power_w"] * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Gpu) -> int:
        self._check("nvmlDeviceGetEnforcedPowerLimit", handle)
        return int(self.product.power_limit_w * 1000)

    def nvmlDeviceGetMigMode(self, handle: _Gpu) -> list[int]:
        self._check("nvmlDeviceGetMigMode", handle)
        if not self.product.mig:
            raise NVMLError_NotSupported()
        return [int(handle.mig is not None), int(handle.mig_pending)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Gpu) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount", handle)
        if not self.product.mig:
            raise NVMLError_NotSupported()
        return 7 if self.product.memory_mib > 30000 else 4

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Gpu, index: int) -> _Mig:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if handle.mig is None:
            raise NVMLError_NotSupported()
        if index >= len(handle.mig):
            raise NVMLError_NotFound()
        return handle.mig[index]

    def nvmlDeviceIsMigDeviceHandle(self, handle: _Gpu | _Mig) -> int:
        self._check("nvmlDeviceIsMigDeviceHandle", handle)
        return int(isinstance(handle, _Mig))

    def nvmlDeviceGetAttributes(self, handle: _Mig) -> SimpleNamespace:
        self._check("nvmlDeviceGetAttributes", handle)
        slices = handle.slices if isinstance(handle, _Mig) else 7
        mib = handle.memory_mib if isinstance(handle, _Mig) else self.product.memory_mib
        return SimpleNamespace(
            multiprocessorCount=14 * slices,
            gpuInstanceSliceCount=slices,
            computeInstanceSliceCount=slices,
            memorySizeMB=mib,
            sharedDecoderCount=1 if "+me" in getattr(handle, "profile", "") else 0,
        )

    def nvmlDeviceGetGpuInstanceId(self, handle: _Mig) -> int:
        self._check("nvmlDeviceGetGpuInstanceId", handle)
        if not isinstance(handle, _Mig):
            raise NVMLError_InvalidArgument()
        return handle.index + 1

    def nvmlDeviceGetGpuInstanceById(self, handle: _Gpu, gi_id: int) -> _GpuInstance:
        self._check("nvmlDeviceGetGpuInstanceById", handle)
        for m in handle.mig or []:
            if m.index + 1 == gi_id:
                return _GpuInstance(m)
        raise NVMLError_NotFound()

    def nvmlGpuInstanceGetInfo(self, gi: _GpuInstance) -> SimpleNamespace:
        self._check("nvmlGpuInstanceGetInfo", gi.mig)
        return SimpleNamespace(
            device=gi.mig.parent, id=gi.mig.index + 1, profileId=gi.mig.profile_id
        )

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle: _Gpu, profile_id: int) -> Any:
        self._check("nvmlDeviceGetGpuInstanceProfileInfoById", handle)
        for name, (slices, mib, pid) in self.product.mig.items():
            if pid == profile_id:
                return SimpleNamespace(
                    id=pid, sliceCount=slices, memorySizeMB=mib, name=f"MIG {name}".encode()
                )
        raise NVMLError_InvalidArgument()

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Gpu | _Mig) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetComputeRunningProcesses", handle)
        gpu = handle.parent if isinstance(handle, _Mig) else handle
        out = []
        for pid, used, mig in self._processes(gpu):
            if isinstance(handle, _Mig) and mig is not handle:
                continue
            out.append(
                SimpleNamespace(
                    pid=pid,
                    # like NVML: a MIG-enabled parent cannot attribute memory per process
                    usedGpuMemory=None if mig and handle is gpu else used * 1024 * 1024,
                    gpuInstanceId=mig.index + 1 if mig else 0xFFFFFFFF,
                    computeInstanceId=0 if mig else 0xFFFFFFFF,
                )
            )
        return out

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: _Gpu, h2: _Gpu) -> int:
        self._check("nvmlDeviceGetTopologyCommonAncestor", h1)
        self._check("nvmlDeviceGetTopologyCommonAncestor", h2)
        a, b = h1.index, h2.index
        if a == b:
            return NVML_TOPOLOGY_INTERNAL
        half = max(1, len(self.gpus) // 2)
        if a // 2 == b // 2:
            return NVML_TOPOLOGY_SINGLE
        if a // half == b // half:
            return NVML_TOPOLOGY_NODE
        return NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetNvLinkState(self, handle: _Gpu, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkState", handle)
        if not self.product.nvlinks:
            raise NVMLError_NotSupported()
        if link >= self.product.nvlinks:
            raise NVMLError_InvalidArgument()
        return NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: _Gpu, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkRemoteDeviceType", handle)
        return NVML_NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: _Gpu, link: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetNvLinkRemotePciInfo", handle)
        return SimpleNamespace(busId=f"00000000:{0xC0 + link % 6:02X}:00.0".encode())
