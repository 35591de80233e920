"""Read every GPU on the node through an NVML module (``pynvml`` or a fake with its API).

The reader never lets one metric or one device take the agent down: the report is what the
portal learns about the node, and a half-filled report is worth far more than none.

- ``NVMLError_NotSupported`` / ``NoPermission`` / ``FunctionNotFound`` on a metric: the
  value is ``None`` and the report key goes in the GPU's ``unsupported`` list.
- ``NVMLError_GpuIsLost`` anywhere on a GPU: that GPU is reported ``lost: true`` with the
  identity last seen for its index; the other GPUs are read as usual.
- Any other NVML error on a metric: ``None`` (not listed as unsupported: it may be transient).
- Anything unexpected while reading one GPU: logged with a traceback, the GPU is reported
  with what was read so far.

Errors are looked up on the injected module (``nvml.NVMLError_NotSupported``), so the real
``pynvml`` and :mod:`gpuagent.fake_nvml` are interchangeable.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# nvidia-smi topo -m spellings for nvmlDeviceGetTopologyCommonAncestor's levels.
TOPOLOGY_NAMES = {
    0: "PIX",  # NVML_TOPOLOGY_INTERNAL: two GPUs on one board (e.g. K80); nvidia-smi says PIX
    10: "PIX",  # NVML_TOPOLOGY_SINGLE: one PCIe switch
    20: "PXB",  # NVML_TOPOLOGY_MULTIPLE: several PCIe switches, no host bridge
    30: "PHB",  # NVML_TOPOLOGY_HOSTBRIDGE: a PCIe host bridge
    40: "NODE",  # NVML_TOPOLOGY_NODE: same NUMA node, across host bridges
    50: "SYS",  # NVML_TOPOLOGY_SYSTEM: across NUMA nodes (SMP interconnect)
}

GPU_KEYS = (
    "index",
    "uuid",
    "name",
    "lost",
    "memory_total_mib",
    "memory_used_mib",
    "utilization_gpu_pct",
    "utilization_memory_pct",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "mig_mode",
    "mig_devices",
    "processes",
    "unsupported",
)


class NvmlUnavailable(Exception):
    """NVML could not be initialised (no driver, driver not loaded, version mismatch)."""

    def __init__(self, message: str, no_driver: bool) -> None:
        super().__init__(message)
        self.no_driver = no_driver


class _GpuLost(Exception):
    """Internal: an NVML call raised NVMLError_GpuIsLost for the GPU being read."""


def _text(value: Any) -> str:
    """pynvml returns ``str`` in recent versions and ``bytes`` in older ones."""
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return str(value)


def _bus_id(value: Any) -> str:
    """Normalise a PCI bus id: ``00000000:07:00.0`` and ``0000:07:00.0`` compare equal."""
    return _text(value).strip().lower()[-12:]


def mig_profile_name(slices: int, mig_mib: int, gpu_total_mib: int) -> str:
    """Derive ``"<slices>g.<GB>gb"`` when NVML cannot name the profile.

    NVIDIA names a profile after its share of the GPU's nominal memory: nominal GB is the
    total in GiB rounded up (80 for 81920 MiB, 141 for an H200's 143771 MiB, 94 for an
    H100 NVL), the share is the instance's memory rounded to eighths (memory slices), and the
    product is rounded half up (141 * 2/8 = 35.25 -> 35, 141 * 4/8 = 70.5 -> 71). The ``+me``
    suffix cannot be derived this way; that is why the profile-info name is preferred.
    """
    if gpu_total_mib <= 0:
        return f"{slices}g.{math.ceil(mig_mib / 1024)}gb"
    nominal = math.ceil(gpu_total_mib / 1024)
    eighths = max(1, round(mig_mib / gpu_total_mib * 8))
    gb = math.floor(nominal * eighths / 8 + 0.5)
    return f"{slices}g.{gb}gb"


class NvmlReader:
    """Owns the NVML session and turns it into the report's ``gpus`` and ``topology``."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.initialized = False
        # Identity seen per index, so a GPU that is lost later is still named in the report.
        self._known: dict[int, dict[str, Any]] = {}
        m = nvml
        self._unsupported_errors = tuple(
            getattr(m, n)
            for n in (
                "NVMLError_NotSupported",
                "NVMLError_NoPermission",
                "NVMLError_FunctionNotFound",
            )
            if hasattr(m, n)
        )

    # -------------------------------------------------------------- session

    def open(self) -> None:
        """``nvmlInit``; raise :class:`NvmlUnavailable` with a sentence an operator can act on."""
        m = self.nvml
        try:
            m.nvmlInit()
        except m.NVMLError as exc:
            no_driver = isinstance(exc, _classes(m, "LibraryNotFound", "DriverNotLoaded"))
            if no_driver:
                msg = "no NVIDIA driver on this host"
            elif isinstance(exc, _classes(m, "LibRmVersionMismatch")):
                msg = "NVML library and kernel driver versions differ (driver upgraded?)"
            else:
                msg = f"NVML initialisation failed: {exc}"
            raise NvmlUnavailable(msg, no_driver) from exc
        except OSError as exc:  # a broken libnvidia-ml.so can surface as a loader error
            raise NvmlUnavailable(f"no NVIDIA driver on this host ({exc})", True) from exc
        self.initialized = True

    def close(self) -> None:
        if self.initialized:
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)
            self.initialized = False

    # -------------------------------------------------------------- reading

    def read(self) -> dict[str, Any]:
        """Driver versions, per-GPU entries and the topology matrix.

        Raises ``nvml.NVMLError`` only when the node as a whole cannot be read (device count);
        the caller then re-initialises NVML on the next cycle.
        """
        m = self.nvml
        driver = self._system(m.nvmlSystemGetDriverVersion)
        cuda = self._system(m.nvmlSystemGetCudaDriverVersion)
        count = m.nvmlDeviceGetCount()
        gpus: list[dict[str, Any]] = []
        handles: list[Any | None] = []
        for i in range(count):
            entry, handle = self._read_gpu(i)
            gpus.append(entry)
            handles.append(None if entry["lost"] else handle)
        return {
            "driver_version": _text(driver) if driver is not None else None,
            "cuda_driver_version": int(cuda) if cuda is not None else None,
            "gpus": gpus,
            "topology": self._topology(handles) if count else None,
        }

    def _system(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self.nvml.NVMLError as exc:
            log.warning("%s: %s", fn.__name__, exc)
            return None

    def _call(
        self, gpu: dict[str, Any], keys: tuple[str, ...], fn: Callable[..., Any], *args: Any
    ) -> Any:
        """Call an NVML getter for ``keys``; ``None`` (and ``unsupported``) when it fails."""
        m = self.nvml
        try:
            return fn(*args)
        except m.NVMLError_GpuIsLost as exc:
            raise _GpuLost from exc
        except self._unsupported_errors:
            for key in keys:
                if key not in gpu["unsupported"]:
                    gpu["unsupported"].append(key)
            return None
        except m.NVMLError as exc:
            log.warning("GPU %s: %s for %s", gpu["index"], exc, ", ".join(keys))
            return None

    def _empty(self, index: int) -> dict[str, Any]:
        known = self._known.get(index, {})
        return {
            "index": index,
            "uuid": known.get("uuid"),
            "name": known.get("name"),
            "lost": False,
            "memory_total_mib": None,
            "memory_used_mib": None,
            "utilization_gpu_pct": None,
            "utilization_memory_pct": None,
            "temperature_c": None,
            "power_w": None,
            "power_limit_w": None,
            "mig_mode": None,
            "mig_devices": [],
            "processes": [],
            "unsupported": [],
        }

    def _read_gpu(self, index: int) -> tuple[dict[str, Any], Any]:
        gpu = self._empty(index)
        handle = None
        try:
            handle = self._call(gpu, ("handle",), self.nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                # NVML refused the handle (e.g. the device cgroup hides it): nulls, not lost.
                log.warning("GPU %d: no NVML handle; reporting it without metrics", index)
                gpu["unsupported"] = []
                return gpu, None
            self._fill(gpu, handle)
        except _GpuLost:
            log.error(
                "GPU %d (%s) is lost (NVMLError_GpuIsLost)", index, gpu["uuid"] or "uuid unknown"
            )
            lost = self._empty(index)
            lost["lost"] = True
            return lost, None
        except Exception:
            log.exception(
                "GPU %d: unexpected error while reading it; reporting what was read", index
            )
        gpu.pop("_mig_handles", None)
        if gpu["uuid"]:
            self._known[index] = {"uuid": gpu["uuid"], "name": gpu["name"]}
        return gpu, handle

    def _fill(self, gpu: dict[str, Any], h: Any) -> None:
        m = self.nvml
        uuid = self._call(gpu, ("uuid",), m.nvmlDeviceGetUUID, h)
        gpu["uuid"] = _text(uuid) if uuid is not None else gpu["uuid"]
        name = self._call(gpu, ("name",), m.nvmlDeviceGetName, h)
        gpu["name"] = _text(name) if name is not None else gpu["name"]

        mem = self._call(gpu, ("memory_total_mib", "memory_used_mib"), m.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            gpu["memory_total_mib"] = int(mem.total) // MIB
            gpu["memory_used_mib"] = int(mem.used) // MIB
        util = self._call(
            gpu,
            ("utilization_gpu_pct", "utilization_memory_pct"),
            m.nvmlDeviceGetUtilizationRates,
            h,
        )
        if util is not None:
            gpu["utilization_gpu_pct"] = int(util.gpu)
            gpu["utilization_memory_pct"] = int(util.memory)
        temp = self._call(
            gpu, ("temperature_c",), m.nvmlDeviceGetTemperature, h, m.NVML_TEMPERATURE_GPU
        )
        gpu["temperature_c"] = int(temp) if temp is not None else None
        power = self._call(gpu, ("power_w",), m.nvmlDeviceGetPowerUsage, h)
        gpu["power_w"] = round(power / 1000, 1) if power is not None else None
        limit = self._call(gpu, ("power_limit_w",), m.nvmlDeviceGetEnforcedPowerLimit, h)
        gpu["power_limit_w"] = round(limit / 1000, 1) if limit is not None else None

        self._fill_mig(gpu, h)
        self._fill_processes(gpu, h)

    def _fill_mig(self, gpu: dict[str, Any], h: Any) -> None:
        """MIG mode and instances. A GPU that cannot do MIG has ``mig_mode: null`` and is not
        listed as unsupported (that is a capability, not a missing metric)."""
        m = self.nvml
        try:
            current, pending = m.nvmlDeviceGetMigMode(h)
        except m.NVMLError_GpuIsLost as exc:
            raise _GpuLost from exc
        except _classes(m, "NotSupported", "FunctionNotFound"):
            return
        except m.NVMLError as exc:
            if isinstance(exc, _classes(m, "NoPermission")):
                gpu["unsupported"].append("mig_mode")
            else:
                log.warning("GPU %s: %s for mig_mode", gpu["index"], exc)
            return
        enabled = current == m.NVML_DEVICE_MIG_ENABLE
        gpu["mig_mode"] = {"current": enabled, "pending": pending == m.NVML_DEVICE_MIG_ENABLE}
        if not enabled:
            return
        maximum = self._call(gpu, ("mig_devices",), m.nvmlDeviceGetMaxMigDeviceCount, h) or 0
        for i in range(int(maximum)):
            try:
                mh = m.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except m.NVMLError_NotFound:
                continue  # an empty slot in the MIG device table
            except m.NVMLError_GpuIsLost as exc:
                raise _GpuLost from exc
            except m.NVMLError as exc:
                log.warning("GPU %s MIG device %d: %s", gpu["index"], i, exc)
                continue
            gpu["mig_devices"].append(self._read_mig(gpu, h, mh, i))
            gpu.setdefault("_mig_handles", []).append(mh)

    def _read_mig(self, gpu: dict[str, Any], h: Any, mh: Any, index: int) -> dict[str, Any]:
        m = self.nvml
        scratch: dict[str, Any] = {"index": gpu["index"], "unsupported": []}
        uuid = self._call(scratch, ("uuid",), m.nvmlDeviceGetUUID, mh)
        mem = self._call(scratch, ("memory",), m.nvmlDeviceGetMemoryInfo, mh)
        return {
            "index": index,
            "uuid": _text(uuid) if uuid is not None else None,
            "profile": self._mig_profile(gpu, h, mh),
            "memory_total_mib": int(mem.total) // MIB if mem is not None else None,
            "memory_used_mib": int(mem.used) // MIB if mem is not None else None,
        }

    def _mig_profile(self, gpu: dict[str, Any], h: Any, mh: Any) -> str | None:
        """The profile's own name from its GPU instance profile info, else derived."""
        m = self.nvml
        try:
            gi = m.nvmlDeviceGetGpuInstanceById(h, m.nvmlDeviceGetGpuInstanceId(mh))
            info = m.nvmlGpuInstanceGetInfo(gi)
            prof = m.nvmlDeviceGetGpuInstanceProfileInfoById(h, info.profileId)
            name = _text(getattr(prof, "name", b"")).strip()
            if name:
                return name.removeprefix("MIG ").strip()
        except m.NVMLError_GpuIsLost as exc:
            raise _GpuLost from exc
        except (m.NVMLError, AttributeError) as exc:
            log.debug("GPU %s: profile info unavailable (%s); deriving the name", gpu["index"], exc)
        try:
            attrs = m.nvmlDeviceGetAttributes(mh)
        except m.NVMLError_GpuIsLost as exc:
            raise _GpuLost from exc
        except m.NVMLError:
            return None
        return mig_profile_name(
            int(attrs.gpuInstanceSliceCount), int(attrs.memorySizeMB), gpu["memory_total_mib"] or 0
        )

    def _fill_processes(self, gpu: dict[str, Any], h: Any) -> None:
        """Compute processes; per MIG instance when MIG is on, because only the instance's
        handle reports a process's memory (the parent says "not available")."""
        m = self.nvml
        mig_handles = gpu.pop("_mig_handles", [])
        seen: set[int] = set()
        sources = [
            (mh, dev["uuid"]) for mh, dev in zip(mig_handles, gpu["mig_devices"], strict=True)
        ]
        sources.append((h, None))
        for handle, mig_uuid in sources:
            procs = self._call(gpu, ("processes",), m.nvmlDeviceGetComputeRunningProcesses, handle)
            for p in procs or []:
                if p.pid in seen:
                    continue
                seen.add(p.pid)
                used = getattr(p, "usedGpuMemory", None)
                entry: dict[str, Any] = {
                    "pid": int(p.pid),
                    "used_memory_mib": int(used) // MIB if used is not None else None,
                }
                if mig_uuid:
                    entry["mig_uuid"] = mig_uuid
                gpu["processes"].append(entry)
        if gpu["processes"] and "processes" in gpu["unsupported"]:
            gpu["unsupported"].remove("processes")

    # -------------------------------------------------------------- topology

    def _topology(self, handles: list[Any | None]) -> list[list[str | None]]:
        """``nvidia-smi topo -m`` between GPU pairs: NVLink count wins over the PCIe level."""
        m = self.nvml
        n = len(handles)
        bus = [self._pci_bus(h) for h in handles]
        links = [self._nvlinks(h) for h in handles]
        matrix: list[list[str | None]] = [[None] * n for _ in range(n)]
        for i in range(n):
            if handles[i] is None:
                continue
            matrix[i][i] = "X"
            for j in range(n):
                if i == j or handles[j] is None:
                    continue
                direct = sum(1 for remote, _ in links[i] if remote is not None and remote == bus[j])
                if direct:
                    matrix[i][j] = f"NV{direct}"
                    continue
                fab_i = _fabric_links(links[i], bus)
                fab_j = _fabric_links(links[j], bus)
                if fab_i and fab_j:
                    matrix[i][j] = f"NV{min(fab_i, fab_j)}"
                    continue
                try:
                    level = m.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                except m.NVMLError:
                    continue
                matrix[i][j] = TOPOLOGY_NAMES.get(int(level))
        return matrix

    def _pci_bus(self, h: Any) -> str | None:
        if h is None or not hasattr(self.nvml, "nvmlDeviceGetPciInfo"):
            return None
        try:
            return _bus_id(self.nvml.nvmlDeviceGetPciInfo(h).busId)
        except self.nvml.NVMLError:
            return None

    def _nvlinks(self, h: Any) -> list[tuple[str | None, int | None]]:
        """Active NVLinks as (remote PCI bus id, remote device type), either may be None."""
        m = self.nvml
        if h is None:
            return []
        out = []
        for link in range(int(getattr(m, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                active = m.nvmlDeviceGetNvLinkState(h, link)
            except m.NVMLError:
                break  # NotSupported (no NVLink) or InvalidArgument (past the last link)
            if not active:
                continue
            remote = kind = None
            with contextlib.suppress(m.NVMLError, AttributeError):
                remote = _bus_id(m.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
            with contextlib.suppress(m.NVMLError, AttributeError):
                kind = int(m.nvmlDeviceGetNvLinkRemoteDeviceType(h, link))
            out.append((remote, kind))
        return out


_SWITCH = 0x02  # NVML_NVLINK_DEVICE_TYPE_SWITCH


def _fabric_links(links: list[tuple[str | None, int | None]], gpu_buses: list[str | None]) -> int:
    """Links into an NVSwitch fabric (HGX boards), which reach every other GPU on it.

    A link whose far end NVML cannot name is counted as a fabric link too: on the boards
    where that happens, NVLinks go to NVSwitches.
    """
    count = 0
    for remote, kind in links:
        if (
            kind == _SWITCH
            or (remote is None and kind is None)
            or (kind is None and remote not in gpu_buses)
        ):
            count += 1
    return count


def _classes(m: Any, *names: str) -> tuple[type[BaseException], ...]:
    return tuple(getattr(m, f"NVMLError_{n}") for n in names if hasattr(m, f"NVMLError_{n}"))
