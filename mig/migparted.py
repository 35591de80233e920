"""mig-parted configs for portal layouts: the entries and a stable name for each.

mig-manager applies the config a node's ``nvidia.com/mig.config`` label names, from the
``mig-configs`` map of its ConfigMap (GPU-FACTS.md section 3). A portal config MIG-enables
the requested devices with one layout and disables every other device of the node, so a
config describes the whole node and reapplying it is idempotent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from .catalog import Product

CONFIG_PREFIX = "portal-"
#: Kubernetes label values: at most 63 characters, alphanumerics, '-', '_' and '.'.
MAX_NAME = 63
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")


def _mig_devices(product: Product, layout: Mapping[str, int]) -> dict[str, int]:
    """``mig-devices`` in catalog order (largest profile first), so output is stable."""
    unknown = [name for name in layout if name not in product.profiles]
    if unknown:
        raise ValueError(f"Profiles not on {product.name}: {', '.join(map(str, unknown))}.")
    return {name: int(layout[name]) for name in product.profiles if name in layout}


def _device_list(devices: list[int] | str, total_gpus: int) -> list[int] | str:
    if devices == "all":
        return "all"
    if isinstance(devices, str) or not devices:
        raise ValueError('devices must be "all" or a non-empty list of GPU indexes.')
    indexes = sorted(set(devices))
    if len(indexes) != len(devices):
        raise ValueError(f"devices lists a GPU twice: {list(devices)}.")
    bad = [d for d in indexes if isinstance(d, bool) or not isinstance(d, int)]
    bad += [d for d in indexes if isinstance(d, int) and not 0 <= d < total_gpus]
    if bad:
        raise ValueError(f"GPU indexes {bad} are not on a node with {total_gpus} GPUs.")
    return indexes


def config_entries(
    product: Product, layout: Mapping[str, int], devices: list[int] | str, total_gpus: int
) -> list[dict]:
    """The list under ``mig-configs.<name>`` for ``layout`` on ``devices`` of a node.

    The MIG-enabled entry carries a ``device-filter`` with the product's PCI ids, so
    mig-parted refuses a node whose GPUs are not the product the layout was validated
    for instead of applying profiles meant for another GPU. The other devices of the node
    (``total_gpus`` in all) get ``mig-enabled: false``. ``devices="all"`` gives one entry.
    Raises ValueError for device indexes outside the node or profiles of another product.
    """
    listed = _device_list(devices, total_gpus)
    enabled: dict = {
        "device-filter": list(product.device_ids),
        "devices": listed,
        "mig-enabled": True,
        "mig-devices": _mig_devices(product, layout),
    }
    entries = [enabled]
    if listed != "all":
        rest = [d for d in range(total_gpus) if d not in listed]
        if rest:
            entries.append({"devices": rest, "mig-enabled": False})
    return entries


def config_name(
    layout: Mapping[str, int], devices: list[int] | str, product: Product | None = None
) -> str:
    """A deterministic config name, usable as a label value and a YAML key.

    ``portal-3g.40gbx1-1g.10gbx2-d0-1``: profiles by size (largest first), ``+me`` written
    ``.me`` (``+`` is not allowed in a label value), then the device indexes or ``all``.
    Pass ``product`` where one ConfigMap serves several products: the same layout has the
    same name on A100-40GB and A100-80GB (``1g.10gb``) but a different device-filter, so
    the product goes into the name (``portal-a100-80gb-...``). Names over 63 characters
    are shortened with a hash of the full name.
    """

    def order(item: tuple[str, int]) -> tuple[int, int, str]:
        match = re.match(r"^(\d+)g\.(\d+)gb", item[0])
        g, gb = (int(match[1]), int(match[2])) if match else (0, 0)
        return (-g, -gb, item[0])

    parts = [
        f"{name.replace('+', '.')}x{count}" for name, count in sorted(layout.items(), key=order)
    ]
    where = "all" if devices == "all" else "d" + "-".join(map(str, sorted(set(devices))))
    prefix = CONFIG_PREFIX + (f"{product.name.lower()}-" if product is not None else "")
    name = (prefix + "-".join([*parts, where])).lower()
    name = re.sub(r"[^a-z0-9._-]", "-", name)
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        name = f"{name[: MAX_NAME - len(digest) - 1].rstrip('-._')}-{digest}"
    if not _LABEL_VALUE_RE.match(name):  # pragma: no cover - guards the rules above
        raise ValueError(f"config name {name!r} is not a valid label value")
    return name
