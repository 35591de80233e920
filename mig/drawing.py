"""Drawing MIG layouts: GPUs as compute x memory slice grids, and what a node is in now.

Pure functions over the catalog and inventory rows, used by the MIG pages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from inventory.models import Node

from . import catalog, layout, services
from .catalog import PRODUCTS, Product
from .forms import (
    parse_layout,
)
from .models import MigRequest

_COUNT_LABEL_RE = re.compile(r"^nvidia\.com/(mig-.+)\.count$")

# -- drawing a GPU -------------------------------------------------------------------------


@dataclass
class Block:
    """One MIG instance as drawn: memory slices ``start..end`` and its compute slices."""

    profile: str
    start: int
    size: int
    compute: int
    compute_start: int
    colour: int  # 1..6 by the profile's place in the catalog; the name is always written

    @property
    def end(self) -> int:
        return self.start + self.size - 1

    @property
    def compute_end(self) -> int:
        return self.compute_start + self.compute - 1


@dataclass
class GpuDrawing:
    """One GPU: ``enabled`` False when MIG is off on it; ``blocks`` its instances."""

    title: str
    product: Product
    enabled: bool = True
    blocks: list[Block] = field(default_factory=list)

    @property
    def memory_slices(self) -> range:
        return range(self.product.memory_slices)

    @property
    def compute_slices(self) -> range:
        return range(self.product.compute_slices)

    @property
    def summary(self) -> str:
        if not self.enabled:
            return "MIG disabled: one whole GPU"
        if not self.blocks:
            return "MIG enabled, no instances"
        counts: dict[str, int] = {}
        for b in self.blocks:
            counts[b.profile] = counts.get(b.profile, 0) + 1
        return " + ".join(f"{n} x {p}" if n > 1 else p for p, n in counts.items())

    @property
    def description(self) -> str:
        """The drawing in words, for screen readers."""
        if not self.enabled or not self.blocks:
            return f"{self.title}: {self.summary}."
        parts = [
            f"{b.profile} on memory slices {_span(b.start, b.end)} and compute slices "
            f"{_span(b.compute_start, b.compute_end)}"
            for b in self.blocks
        ]
        return f"{self.title}: " + "; ".join(parts) + "."


def _span(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def draw(product: Product, placements: list[layout.Placement] | None, title: str) -> GpuDrawing:
    """A GPU with ``placements``; None means MIG is disabled on it.

    Compute slice ``i`` sits over memory slice ``i`` (slice 7 of an 8-slice GPU has no
    compute of its own), so an instance's compute slices start at its memory start,
    moved left only as far as the GPU's compute slices require (a 3g at slice 4: 4-6).
    """
    if placements is None:
        return GpuDrawing(title, product, enabled=False)
    order = list(product.profiles)
    blocks = []
    for p in placements:
        profile = product.profiles[p.profile]
        g = profile.compute_slices
        blocks.append(
            Block(
                profile=p.profile,
                start=p.start,
                size=p.size,
                compute=g,
                compute_start=min(p.start, product.compute_slices - g),
                colour=order.index(p.profile) % 6 + 1,
            )
        )
    return GpuDrawing(title, product, blocks=blocks)


def draw_layout(product: Product, lay: dict[str, int] | None, title: str) -> GpuDrawing | None:
    """Draw a per-GPU layout (None: MIG off, {}: no instances); None if it cannot be placed."""
    if lay is None:
        return draw(product, None, title)
    placements = layout.place(product, lay) if lay else []
    return None if placements is None else draw(product, placements, title)


def catalog_json() -> dict:
    """What the page's script needs to draw: slices per product, compute per profile."""
    return {
        p.name: {
            "compute_slices": p.compute_slices,
            "memory_slices": p.memory_slices,
            "profiles": {name: prof.compute_slices for name, prof in p.profiles.items()},
            "order": list(p.profiles),
        }
        for p in PRODUCTS.values()
    }


# -- what a node is in now -----------------------------------------------------------------


def balanced_layout(product: Product) -> dict[str, int]:
    """mig-parted's ``all-balanced``: 2 x 1g + 1 x 2g (+ 1 x 3g on 8-slice GPUs)."""
    wanted = [(1, 1, 2), (2, 2, 1)] + ([(3, 4, 1)] if product.memory_slices == 8 else [])
    out = {}
    for g, size, count in wanted:
        for p in product.profiles.values():
            if p.compute_slices == g and p.memory_slices == size and not p.media_extensions:
                out[p.name] = count
                break
    return out


def stock_layouts(product: Product, config: str, gpus: int) -> list[dict | None] | None:
    """Per-GPU layouts of a stock mig-parted config, or None for a name not known here."""
    if config in ("", "all-disabled"):
        return [None] * gpus
    if config == "all-enabled":
        return [{} for _ in range(gpus)]
    if config == "all-balanced":
        return [balanced_layout(product) for _ in range(gpus)]
    profile = (
        product.profiles.get(config.removeprefix("all-")) if config.startswith("all-") else None
    )
    if profile is not None:
        return [{profile.name: profile.max_count} for _ in range(gpus)]
    return None


def label_layouts(node: Node, product: Product) -> list[dict | None] | None:
    """Per-GPU layouts inferred from GFD's ``nvidia.com/mig-<profile>.count`` labels.

    GFD gives node totals only, so the instances are spread over the GPUs in catalog order
    (largest first, each GPU filled while the layout still places). None when there are no
    such labels or the totals do not fit on the node's GPUs.
    """
    totals: dict[str, int] = {}
    for key, value in (node.labels or {}).items():
        match = _COUNT_LABEL_RE.match(key)
        name = catalog.profile_from_resource(f"nvidia.com/{match[1]}") if match else None
        if name in product.profiles and str(value).isdigit() and int(value) > 0:
            totals[name] = int(value)
    if not totals or node.gpu_count < 1:
        return None
    gpus: list[dict[str, int]] = [{} for _ in range(node.gpu_count)]
    for name in product.profiles:
        left = totals.get(name, 0)
        for gpu in gpus:
            while left and layout.place(product, {**gpu, name: gpu.get(name, 0) + 1}):
                gpu[name] = gpu.get(name, 0) + 1
                left -= 1
        if left:
            return None
    return [gpu or None for gpu in gpus]


def current_layouts(node: Node, product: Product) -> tuple[list[dict | None] | None, str]:
    """The node's per-GPU layouts as far as the portal knows them, and where that came from."""
    config = node.mig_config or ""
    if config.startswith("portal-"):
        run = (
            MigRequest.objects.filter(node=node, config_name=config, kind=MigRequest.Kind.APPLY)
            .exclude(layout={})
            .order_by("-created_at")
            .first()
        )
        if run is not None:
            devices = services.devices_for(node, run.gpus)
            indexes = range(node.gpu_count) if devices == "all" else devices
            layouts: list[dict | None] = [None] * node.gpu_count
            for i in indexes:
                layouts[i] = dict(run.layout)
            return layouts, f"the layout of MIG request {str(run.pk)[:8]} that wrote {config}"
    else:
        stock = stock_layouts(product, config, node.gpu_count)
        if stock is not None:
            return stock, f"the stock mig-parted config {config or 'all-disabled'}"
    inferred = label_layouts(node, product)
    if inferred is not None:
        return inferred, (
            "GPU Feature Discovery's per-node instance counts; which GPU holds which "
            "instance is not reported, so the split over GPUs is the portal's guess"
        )
    return None, f"config {config} is not one the portal can read"


def _node_drawings(node: Node, product: Product) -> tuple[list[GpuDrawing] | None, str]:
    layouts, source = current_layouts(node, product)
    if layouts is None:
        return None, source
    drawings = []
    for i, lay in enumerate(layouts):
        drawing = draw_layout(product, lay, f"GPU {i}")
        if drawing is None:
            return None, f"{source}, which does not place on one {product.name}"
        drawings.append(drawing)
    return drawings, source


def _proposed(product: Product, text: str, strategy: str) -> dict:
    """The ``?layout=`` of the node page: its drawing, or why it does not fit."""
    lay, errors = parse_layout(text)
    if not errors:
        errors = layout.validate_node_layout(product, lay, 1, strategy)
    drawing = None if errors else draw_layout(product, lay, "Proposed GPU")
    return {
        "text": text,
        "layout": lay,
        "errors": errors,
        "drawing": drawing,
        "gpus": [drawing] if drawing else [],
    }
