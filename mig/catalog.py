"""The MIG profile catalog: which profiles each GPU product offers and where they may sit.

The numbers follow GPU-FACTS.md section 4 (NVIDIA's MIG user guide): per product, each
profile's compute and memory slices, the most instances one GPU can hold, and the
memory-slice start positions the hardware allows. Placement is what decides whether a mix
of profiles fits (``mig.layout``), so the start positions are part of the catalog rather
than being derived from sums.

Products are named by a short name (``A100-80GB``) and matched from the GPU Feature
Discovery ``nvidia.com/gpu.product`` label (``NVIDIA-A100-SXM4-80GB``), which is what a
node tells us. Pure Python: no Django, no database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from inventory.models import base_product

RESOURCE_PREFIX = "nvidia.com/mig-"
ME_SUFFIX = "+me"

#: A MIG profile name as NVIDIA writes it: ``1g.10gb``, ``1g.10gb+me``.
PROFILE_NAME_RE = re.compile(r"^(?P<g>[1-9])g\.(?P<gb>[0-9]+)gb(?P<me>\+me)?$")


class UnknownProduct(ValueError):
    """A GPU product the catalog does not know; the message lists the known ones."""


@dataclass(frozen=True)
class Profile:
    """One MIG profile on one product: its size and where it may be placed."""

    name: str  # "3g.40gb", "1g.10gb+me"
    compute_slices: int  # the "g" count
    memory_slices: int  # of the product's memory slices (8; A30: 4)
    max_count: int  # max instances of this profile on one GPU
    starts: tuple[int, ...]  # allowed memory-slice start positions
    media_extensions: bool  # +me: holds the GPU's media engines, so once per GPU

    @property
    def resource(self) -> str:
        """The extended resource under the mixed strategy.

        ``+`` is not allowed in a resource name, so the device plugin advertises a ``+me``
        profile with ``.me``: ``nvidia.com/mig-1g.10gb.me`` (GPU-FACTS.md section 1).
        """
        base = self.name.removesuffix(ME_SUFFIX)
        return f"{RESOURCE_PREFIX}{base}{'.me' if self.media_extensions else ''}"


@dataclass(frozen=True)
class Product:
    """A MIG-capable GPU product: its slice counts, profiles, and how nodes name it."""

    name: str  # short name: "A100-80GB"
    compute_slices: int  # 7 (A30: 4)
    memory_slices: int  # 8 (A30: 4)
    profiles: dict[str, Profile] = field(hash=False)  # a dict: keeps Product hashable
    gfd_products: tuple[str, ...]  # GFD gpu.product labels that map here
    device_id: str  # the main PCI id for mig-parted's device-filter
    # Every PCI id of the product (SXM and PCIe boards); device_id is the first.
    device_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.device_ids:
            object.__setattr__(self, "device_ids", (self.device_id,))

    def profile_names(self) -> list[str]:
        """Profile names in catalog order (largest first), for messages and menus."""
        return list(self.profiles)


# -- building the tables -------------------------------------------------------------------

# Memory-slice start positions on the 8-slice products (A100, H100, H200), by profile shape.
_STARTS_8 = {
    "1g": (0, 1, 2, 3, 4, 5, 6),  # size 1; slice 7 only ever belongs to a bigger instance
    "1g-double": (0, 2, 4, 6),  # 1g with 2 memory slices (1g.10gb on A100-40GB, 1g.20gb...)
    "2g": (0, 2, 4),
    "3g": (0, 4),
    "4g": (0,),
    "7g": (0,),
}
_SIZE_8 = {"1g": 1, "1g-double": 2, "2g": 2, "3g": 4, "4g": 4, "7g": 8}
_COMPUTE = {"1g": 1, "1g-double": 1, "2g": 2, "3g": 3, "4g": 4, "7g": 7}


def _eight_slice_profiles(gb: dict[str, int]) -> dict[str, Profile]:
    """Profiles of an A100/H100/H200-class GPU from the memory (GB) of each shape.

    Every such product has the same seven shapes (GPU-FACTS.md section 4); only the memory
    per instance, and so the names, differ.
    """
    shapes = [
        ("7g", 1, False),
        ("4g", 1, False),
        ("3g", 2, False),
        ("2g", 3, False),
        ("1g-double", 4, False),
        ("1g", 7, False),
        ("1g", 1, True),
    ]
    profiles: dict[str, Profile] = {}
    for shape, max_count, me in shapes:
        g = _COMPUTE[shape]
        name = f"{g}g.{gb[shape]}gb{ME_SUFFIX if me else ''}"
        profiles[name] = Profile(
            name=name,
            compute_slices=g,
            memory_slices=_SIZE_8[shape],
            max_count=max_count,
            starts=_STARTS_8[shape],
            media_extensions=me,
        )
    return profiles


def _a30_profiles() -> dict[str, Profile]:
    """A30-24GB: 4 compute and 4 memory slices.

    Placements derived the same way as on the 8-slice GPUs (an instance starts at a
    multiple of its size): 1g.6gb at 0-3, 2g.12gb at 0 or 2, 4g.24gb at 0. A ``+me``
    variant sits where its plain profile does.
    """

    def p(name: str, g: int, size: int, max_count: int, starts: tuple[int, ...]) -> Profile:
        me = name.endswith(ME_SUFFIX)
        return Profile(name, g, size, max_count, starts, me)

    profiles = [
        p("4g.24gb", 4, 4, 1, (0,)),
        p("2g.12gb", 2, 2, 2, (0, 2)),
        p("2g.12gb+me", 2, 2, 1, (0, 2)),
        p("1g.6gb", 1, 1, 4, (0, 1, 2, 3)),
        p("1g.6gb+me", 1, 1, 1, (0, 1, 2, 3)),
    ]
    return {profile.name: profile for profile in profiles}


_GB_80 = {"7g": 80, "4g": 40, "3g": 40, "2g": 20, "1g-double": 20, "1g": 10}

PRODUCTS: dict[str, Product] = {
    product.name: product
    for product in [
        Product(
            name="A100-40GB",
            compute_slices=7,
            memory_slices=8,
            profiles=_eight_slice_profiles(
                {"7g": 40, "4g": 20, "3g": 20, "2g": 10, "1g-double": 10, "1g": 5}
            ),
            gfd_products=("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"),
            device_id="0x20B010DE",
            device_ids=("0x20B010DE", "0x20B110DE", "0x20F110DE"),
        ),
        Product(
            name="A100-80GB",
            compute_slices=7,
            memory_slices=8,
            profiles=_eight_slice_profiles(_GB_80),
            gfd_products=("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"),
            device_id="0x20B210DE",
            device_ids=("0x20B210DE", "0x20B510DE"),
        ),
        Product(
            name="H100-80GB",
            compute_slices=7,
            memory_slices=8,
            profiles=_eight_slice_profiles(_GB_80),
            gfd_products=("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"),
            device_id="0x233010DE",
            device_ids=("0x233010DE", "0x233110DE"),
        ),
        Product(
            name="H200-141GB",
            compute_slices=7,
            memory_slices=8,
            profiles=_eight_slice_profiles(
                {"7g": 141, "4g": 71, "3g": 71, "2g": 35, "1g-double": 35, "1g": 18}
            ),
            gfd_products=("NVIDIA-H200", "NVIDIA-H200-NVL"),
            device_id="0x233510DE",
            device_ids=("0x233510DE", "0x233B10DE"),
        ),
        Product(
            name="A30-24GB",
            compute_slices=4,
            memory_slices=4,
            profiles=_a30_profiles(),
            gfd_products=("NVIDIA-A30",),
            device_id="0x20B710DE",
        ),
    ]
}


# -- matching product names ----------------------------------------------------------------

# GFD appends these to gpu.product: "-SHARED" under time-slicing, "-MIG-<profile>" under the
# single strategy and "-MIG-INVALID" when that strategy is broken (GPU-FACTS.md section 2).


def _key(name: str) -> str:
    """Normalised lookup key: NVML names use spaces, older GFD drops the NVIDIA- prefix."""
    key = "-".join(name.strip().split()).upper()
    return key.removeprefix("NVIDIA-")


def _build_index() -> dict[str, Product]:
    index: dict[str, Product] = {}
    for product in PRODUCTS.values():
        for name in (product.name, *product.gfd_products):
            key = _key(name)
            if key in index and index[key] is not product:  # pragma: no cover - table bug
                raise RuntimeError(f"product name {name!r} is ambiguous in the MIG catalog")
            index[key] = product
    return index


_INDEX = _build_index()


def strip_gfd_suffixes(label: str) -> str:
    """``NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED`` -> ``NVIDIA-A100-SXM4-80GB``."""
    return base_product(label)


def resolve_product(name: str) -> Product:
    """The catalog product for a short name or a GFD ``gpu.product`` label.

    Case-insensitive; GFD's ``-SHARED``, ``-MIG-<profile>`` and ``-MIG-INVALID`` suffixes
    are ignored, since they describe how the GPU is shared, not what it is. An unknown
    name raises :class:`UnknownProduct` naming the known products, rather than guessing.
    """
    if not isinstance(name, str) or not name.strip():
        raise UnknownProduct(f"No GPU product given; known products: {_known()}.")
    product = _INDEX.get(_key(strip_gfd_suffixes(name)))
    if product is None:
        raise UnknownProduct(
            f"Unknown GPU product {name.strip()!r}: MIG profiles are known for {_known()} "
            "(short names or their GFD labels, e.g. NVIDIA-A100-SXM4-80GB)."
        )
    return product


def _known() -> str:
    return ", ".join(PRODUCTS)


def profile_from_resource(resource: str) -> str | None:
    """The MIG profile an extended resource stands for, or None if it is not a MIG one.

    ``nvidia.com/mig-3g.40gb`` -> ``3g.40gb``; ``nvidia.com/mig-1g.10gb.me`` ->
    ``1g.10gb+me``; ``nvidia.com/gpu`` -> None.
    """
    if not isinstance(resource, str) or not resource.startswith(RESOURCE_PREFIX):
        return None
    name = resource.removeprefix(RESOURCE_PREFIX)
    if name.endswith(".me"):
        name = name.removesuffix(".me") + ME_SUFFIX
    return name if PROFILE_NAME_RE.match(name) else None
