"""GPU product catalogue, MIG profiles and the node resources/labels they imply.

Shared by the fleet loader and the mig-manager emulation so a reconfigured node looks
exactly like a freshly loaded one (GFD labels, ``nvidia.com/mig-<profile>`` capacity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simcluster.errors import ApiError


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile: max instances per GPU, memory (MiB), SMs, slices, engines."""

    name: str
    max_count: int
    memory: int
    multiprocessors: int
    gi: int
    ci: int
    copy: int
    decoder: int
    encoder: int = 0
    jpeg: int = 0
    ofa: int = 0

    @property
    def resource(self) -> str:
        """``1g.10gb+me`` is advertised as ``nvidia.com/mig-1g.10gb.me``."""
        return "nvidia.com/mig-" + self.name.replace("+me", ".me")


def _profiles(rows: list[tuple[Any, ...]]) -> dict[str, MigProfile]:
    return {r[0]: MigProfile(*r) for r in rows}


_A100_80 = _profiles(
    [
        ("1g.10gb", 7, 9728, 14, 1, 1, 1, 0),
        ("1g.10gb+me", 1, 9728, 14, 1, 1, 1, 1, 0, 1, 1),
        ("1g.20gb", 4, 19968, 14, 1, 1, 1, 1),
        ("2g.20gb", 3, 19968, 28, 2, 2, 2, 1),
        ("3g.40gb", 2, 40192, 42, 3, 3, 3, 2),
        ("4g.40gb", 1, 40192, 56, 4, 4, 4, 2),
        ("7g.80gb", 1, 80384, 98, 7, 7, 7, 5, 0, 1, 1),
    ]
)
_A100_40 = _profiles(
    [
        ("1g.5gb", 7, 4864, 14, 1, 1, 1, 0),
        ("1g.5gb+me", 1, 4864, 14, 1, 1, 1, 1, 0, 1, 1),
        ("1g.10gb", 4, 9856, 14, 1, 1, 1, 1),
        ("2g.10gb", 3, 9856, 28, 2, 2, 2, 1),
        ("3g.20gb", 2, 19968, 42, 3, 3, 3, 2),
        ("4g.20gb", 1, 19968, 56, 4, 4, 4, 2),
        ("7g.40gb", 1, 40192, 98, 7, 7, 7, 5, 0, 1, 1),
    ]
)
_H100_80 = _profiles(
    [
        ("1g.10gb", 7, 9984, 16, 1, 1, 1, 1, 0, 1, 0),
        ("1g.10gb+me", 1, 9984, 16, 1, 1, 1, 1, 0, 1, 1),
        ("1g.20gb", 4, 20096, 26, 1, 1, 1, 1, 0, 1, 0),
        ("2g.20gb", 3, 20096, 32, 2, 2, 2, 2, 0, 2, 0),
        ("3g.40gb", 2, 40320, 60, 3, 3, 3, 3, 0, 3, 0),
        ("4g.40gb", 1, 40320, 64, 4, 4, 4, 4, 0, 4, 0),
        ("7g.80gb", 1, 80896, 132, 7, 7, 7, 7, 0, 7, 1),
    ]
)
_H200 = _profiles(
    [
        ("1g.18gb", 7, 16384, 16, 1, 1, 1, 1, 0, 1, 0),
        ("1g.18gb+me", 1, 16384, 16, 1, 1, 1, 1, 0, 1, 1),
        ("1g.35gb", 4, 32768, 26, 1, 1, 1, 1, 0, 1, 0),
        ("2g.35gb", 3, 32768, 32, 2, 2, 2, 2, 0, 2, 0),
        ("3g.71gb", 2, 71680, 60, 3, 3, 3, 3, 0, 3, 0),
        ("4g.71gb", 1, 71680, 64, 4, 4, 4, 4, 0, 4, 0),
        ("7g.141gb", 1, 143360, 132, 7, 7, 7, 7, 0, 7, 1),
    ]
)
_A30 = _profiles(
    [
        ("1g.6gb", 4, 5836, 14, 1, 1, 1, 0),
        ("1g.6gb+me", 1, 5836, 14, 1, 1, 1, 1, 0, 1, 1),
        ("2g.12gb", 2, 11904, 28, 2, 2, 2, 1),
        ("2g.12gb+me", 1, 11904, 28, 2, 2, 2, 1, 0, 1, 1),
        ("4g.24gb", 1, 24064, 56, 4, 4, 4, 4, 0, 1, 1),
    ]
)


@dataclass(frozen=True)
class Product:
    """A GPU model as GFD reports it."""

    name: str
    memory: int
    major: int
    minor: int
    device_id: str = ""
    mig: dict[str, MigProfile] | None = None
    balanced: dict[str, int] | None = None

    @property
    def family(self) -> str:
        """GFD's architecture family from the compute capability."""
        m, n = self.major, self.minor
        if m == 7:
            return "volta" if n < 5 else "turing"
        if m == 8:
            return "ampere" if n < 9 else "ada-lovelace"
        return {3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell"}.get(
            m, "undefined"
        )


PRODUCTS: dict[str, Product] = {
    p.name: p
    for p in [
        Product(
            "NVIDIA-A100-SXM4-80GB",
            81920,
            8,
            0,
            "0x20B210DE",
            _A100_80,
            {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        ),
        Product(
            "NVIDIA-A100-SXM4-40GB",
            40960,
            8,
            0,
            "0x20B010DE",
            _A100_40,
            {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
        ),
        Product(
            "NVIDIA-A100-80GB-PCIe",
            81920,
            8,
            0,
            "0x20B510DE",
            _A100_80,
            {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        ),
        Product(
            "NVIDIA-H100-80GB-HBM3",
            81559,
            9,
            0,
            "0x233010DE",
            _H100_80,
            {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        ),
        Product(
            "NVIDIA-H200",
            143771,
            9,
            0,
            "0x233510DE",
            _H200,
            {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
        ),
        Product("NVIDIA-A30", 24576, 8, 0, "0x20B710DE", _A30, {"1g.6gb": 2, "2g.12gb": 1}),
        Product("Tesla-V100-SXM2-16GB", 16384, 7, 0, "0x1DB110DE"),
        Product("Tesla-V100-SXM2-32GB", 32768, 7, 0, "0x1DB510DE"),
        Product("NVIDIA-L40S", 46068, 8, 9, "0x26B910DE"),
        Product("NVIDIA-L4", 23034, 8, 9, "0x27B810DE"),
        Product("Tesla-T4", 15360, 7, 5, "0x1EB810DE"),
    ]
}

Layout = list[dict[str, int] | None]  # per GPU index: profile -> count, or None (MIG off)


def product(name: str) -> Product:
    """Look up a product, accepting names with spaces (``NVIDIA A100-SXM4-80GB``)."""
    key = name.replace(" ", "-")
    if key not in PRODUCTS:
        raise ValueError(f"unknown GPU product {name!r}; known: {', '.join(sorted(PRODUCTS))}")
    return PRODUCTS[key]


def builtin_layout(prod: Product, config: str, count: int) -> Layout | None:
    """Per-GPU layout for a stock mig-parted config name, or ``None`` if unknown."""
    if config == "all-disabled":
        return [None] * count
    if not prod.mig:
        return None
    if config == "all-enabled":
        return [{} for _ in range(count)]
    if config == "all-balanced" and prod.balanced:
        return [dict(prod.balanced) for _ in range(count)]
    if config.startswith("all-"):
        prof = config[4:]
        if prof in prod.mig:
            return [{prof: prod.mig[prof].max_count} for _ in range(count)]
    return None


def layout_from_entries(prod: Product, entries: list[dict[str, Any]], count: int) -> Layout:
    """Per-GPU layout from mig-parted entries (``devices``, ``mig-enabled``, ``mig-devices``)."""
    layout: Layout = [None] * count
    for entry in entries:
        filt = entry.get("device-filter")
        if filt:
            ids = [filt] if isinstance(filt, str) else list(filt)
            if prod.device_id and prod.device_id.lower() not in [str(i).lower() for i in ids]:
                continue
        devices = entry.get("devices", "all")
        idx = range(count) if devices == "all" else [int(d) for d in devices]
        for i in idx:
            if not 0 <= i < count:
                raise ValueError(f"device index {i} out of range for {count} GPUs")
            layout[i] = dict(entry.get("mig-devices") or {}) if entry.get("mig-enabled") else None
    for per_gpu in layout:
        for prof, n in (per_gpu or {}).items():
            if not prod.mig or prof not in prod.mig:
                raise ValueError(f"MIG profile {prof!r} not supported on {prod.name}")
            if n > prod.mig[prof].max_count:
                raise ValueError(f"{n} x {prof} exceeds {prod.mig[prof].max_count} per GPU")
    return layout


def gpu_resources_and_labels(
    prod: Product,
    count: int,
    *,
    driver: str,
    cuda_runtime: str = "12.4",
    strategy: str = "none",
    layout: Layout | None = None,
    replicas: int = 1,
    sharing: str = "none",
) -> tuple[dict[str, int], dict[str, str]]:
    """Node capacity for GPU resources plus the GFD labels a node with these GPUs gets."""
    labels: dict[str, str] = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.family": prod.family,
        "nvidia.com/gpu.compute.major": str(prod.major),
        "nvidia.com/gpu.compute.minor": str(prod.minor),
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.runtime-version.full": cuda_runtime,
        "nvidia.com/mig.capable": "true" if prod.mig else "false",
        "nvidia.com/mig.strategy": strategy,
        "nvidia.com/gpu.sharing-strategy": sharing,
        "nvidia.com/gpu.replicas": str(replicas),
    }
    parts = driver.split(".")
    for i, part in enumerate(("major", "minor", "revision")):
        if i < len(parts):
            labels[f"nvidia.com/cuda.driver-version.{part}"] = parts[i]
    rparts = cuda_runtime.split(".")
    labels["nvidia.com/cuda.runtime-version.major"] = rparts[0]
    if len(rparts) > 1:
        labels["nvidia.com/cuda.runtime-version.minor"] = rparts[1]
    caps: dict[str, int] = {}
    layout = layout or [None] * count
    mig_gpus = [g for g in layout if g is not None]
    full_gpus = sum(1 for g in layout if g is None)
    suffix = "-SHARED" if sharing != "none" and replicas > 1 else ""
    if strategy == "single" and mig_gpus:
        profs = {p for g in mig_gpus for p in g}
        if len(profs) != 1 or full_gpus:
            labels["nvidia.com/gpu.product"] = f"{prod.name}-MIG-INVALID"
            labels["nvidia.com/gpu.count"] = "0"
            caps["nvidia.com/gpu"] = 0
        else:
            prof = prod.mig[next(iter(profs))]  # type: ignore[index]
            n = sum(g[prof.name] for g in mig_gpus)
            labels.update(
                {
                    "nvidia.com/gpu.product": f"{prod.name}-MIG-{prof.name}{suffix}",
                    "nvidia.com/gpu.count": str(n),
                    "nvidia.com/gpu.memory": str(prof.memory),
                    "nvidia.com/gpu.multiprocessors": str(prof.multiprocessors),
                    "nvidia.com/gpu.slices.gi": str(prof.gi),
                    "nvidia.com/gpu.slices.ci": str(prof.ci),
                }
            )
            caps["nvidia.com/gpu"] = n * replicas
        return caps, labels
    labels["nvidia.com/gpu.product"] = prod.name + suffix
    labels["nvidia.com/gpu.count"] = str(count)
    labels["nvidia.com/gpu.memory"] = str(prod.memory)
    if strategy == "mixed" and mig_gpus:
        caps["nvidia.com/gpu"] = full_gpus * replicas
        totals: dict[str, int] = {}
        for g in mig_gpus:
            for p, n in g.items():
                totals[p] = totals.get(p, 0) + n
        for pname, n in sorted(totals.items()):
            prof = prod.mig[pname]  # type: ignore[index]
            caps[prof.resource] = n * replicas
            base = "nvidia.com/" + prof.resource.split("/", 1)[1]
            labels.update(
                {
                    f"{base}.count": str(n),
                    f"{base}.memory": str(prof.memory),
                    f"{base}.multiprocessors": str(prof.multiprocessors),
                    f"{base}.slices.gi": str(prof.gi),
                    f"{base}.slices.ci": str(prof.ci),
                    f"{base}.engines.copy": str(prof.copy),
                    f"{base}.engines.decoder": str(prof.decoder),
                    f"{base}.engines.encoder": str(prof.encoder),
                    f"{base}.engines.jpeg": str(prof.jpeg),
                    f"{base}.engines.ofa": str(prof.ofa),
                }
            )
    else:
        caps["nvidia.com/gpu"] = full_gpus * replicas
    return caps, labels


def is_mig_label(key: str) -> bool:
    """GFD labels that describe MIG devices (replaced wholesale on reconfiguration)."""
    return key.startswith("nvidia.com/mig-") or key in (
        "nvidia.com/gpu.multiprocessors",
        "nvidia.com/gpu.slices.gi",
        "nvidia.com/gpu.slices.ci",
    )


def resolve_layout(
    prod: Product, config: str, count: int, configs: dict[str, Any] | None = None
) -> Layout:
    """Layout for a config name: a custom mig-parted config first, then the stock names."""
    if configs and config in configs:
        try:
            return layout_from_entries(prod, configs[config], count)
        except ValueError as exc:
            raise ApiError(422, str(exc)) from exc
    layout = builtin_layout(prod, config, count)
    if layout is None:
        raise ApiError(422, f"unknown MIG config {config!r} for {prod.name}")
    return layout
