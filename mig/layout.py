"""Can these MIG instances coexist on one GPU? Answered by placement, explained when not.

Sums are not enough: on an A100 ``4g + 2g + 2g`` fits neither the compute nor the memory
positions, and ``1g`` instances cannot use memory slice 7. So the validator searches the
memory-slice start positions of every instance (GPU-FACTS.md section 4). A layout is at
most a handful of instances on 8 slices, so an exact backtracking search is instant.

A *layout* is ``{profile name: instances}`` for one GPU, e.g. ``{"3g.40gb": 1,
"1g.10gb": 2}``. Messages are written for people choosing a layout: they say which
profile blocks which and what the limits are, not just "invalid".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .catalog import Product, Profile

STRATEGIES = ("single", "mixed")
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Placement:
    """One instance on one GPU: its profile and memory slices ``start .. start+size-1``."""

    profile: str
    start: int
    size: int

    @property
    def end(self) -> int:
        """The last memory slice (inclusive)."""
        return self.start + self.size - 1


# -- input checks --------------------------------------------------------------------------


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def input_errors(product: Product, layout: Mapping[str, object]) -> list[str]:
    """Errors that make a layout meaningless rather than merely not fitting.

    Empty layouts, amounts that are not positive integers and profiles this product does
    not have. The API answers these with 400; fit problems are a 200 with ``valid: false``.
    """
    if not isinstance(layout, Mapping):
        return ['A layout is an object of {profile: instances}, e.g. {"3g.40gb": 1}.']
    if not layout:
        return ["A layout needs at least one instance."]
    errors: list[str] = []
    for name, count in layout.items():
        if not _is_count(count):
            errors.append(f"{name}: the number of instances must be a positive integer, "
                          f"got {count!r}.")  # fmt: skip
    unknown = [name for name in layout if name not in product.profiles]
    for name in unknown:
        errors.append(
            f"Unknown profile {name!r} for {product.name}; "
            f"valid profiles: {', '.join(product.profile_names())}."
        )
    return errors


# -- placement search ----------------------------------------------------------------------


def _instances(product: Product, layout: Mapping[str, int]) -> list[Profile]:
    """One entry per instance, hardest to place first (biggest, then fewest starts)."""
    profiles = sorted(
        (product.profiles[name] for name in layout),
        key=lambda p: (-p.memory_slices, len(p.starts), -p.compute_slices, p.name),
    )
    return [p for p in profiles for _ in range(layout[p.name])]


def _fits(profile: Profile, start: int, used: list[bool]) -> bool:
    end = start + profile.memory_slices
    return end <= len(used) and not any(used[start:end])


def _search(
    instances: list[Profile], used: list[bool], placed: list[Placement]
) -> Iterator[list[Placement]]:
    """Every complete placement, depth first (identical instances in rising start order)."""
    if len(placed) == len(instances):
        yield list(placed)
        return
    profile = instances[len(placed)]
    after = -1
    if placed and placed[-1].profile == profile.name:
        after = placed[-1].start  # same profile as the previous instance: no permutations
    for start in profile.starts:
        if start <= after or not _fits(profile, start, used):
            continue
        span = range(start, start + profile.memory_slices)
        for i in span:
            used[i] = True
        placed.append(Placement(profile.name, start, profile.memory_slices))
        yield from _search(instances, used, placed)
        placed.pop()
        for i in span:
            used[i] = False


def _placements(product: Product, instances: list[Profile]) -> Iterator[list[Placement]]:
    return _search(instances, [False] * product.memory_slices, [])


def place(product: Product, layout: Mapping[str, int]) -> list[Placement] | None:
    """A valid placement of ``layout`` on one GPU (sorted by start), or None.

    Checks positions, the per-profile maximum, the one-``+me``-per-GPU rule and the
    compute budget; None also for input errors (see :func:`validate_layout` for why).
    """
    if input_errors(product, layout) or _limit_errors(product, layout):
        return None
    first = next(_placements(product, _instances(product, layout)), None)
    return None if first is None else sorted(first, key=lambda p: p.start)


# -- limits checked before placement -------------------------------------------------------


def _limit_errors(product: Product, layout: Mapping[str, int]) -> list[str]:
    """Per-profile maxima, one ``+me`` per GPU, and the compute and memory budgets."""
    errors: list[str] = []
    profiles = [product.profiles[name] for name in layout]
    for p in profiles:
        if layout[p.name] > p.max_count:
            errors.append(f"at most {p.max_count} x {p.name} per GPU (asked for {layout[p.name]}).")
    media = [p for p in profiles if p.media_extensions]
    media_count = sum(layout[p.name] for p in media)
    if media_count > 1 and all(layout[p.name] <= p.max_count for p in media):
        asked = ", ".join(f"{layout[p.name]} x {p.name}" for p in media)
        errors.append(
            "at most one +me (media extensions) instance per GPU: a GPU has one set of "
            f"media engines (asked for {asked})."
        )
    for what, total, size in (
        ("compute", product.compute_slices, lambda p: p.compute_slices),
        ("memory", product.memory_slices, lambda p: p.memory_slices),
    ):
        needed = sum(size(p) * layout[p.name] for p in profiles)
        if needed > total:
            parts = " + ".join(f"{layout[p.name]} x {p.name}" for p in profiles)
            verb = "needs" if len(profiles) == 1 and layout[profiles[0].name] == 1 else "need"
            errors.append(
                f"{parts} {verb} {needed} {what} slices; one {product.name} GPU has {total}."
            )
    return errors


# -- explaining a placement failure --------------------------------------------------------


def _slices(start: int, end: int) -> str:
    return str(start) if start == end else f"{start}-{end}"


def _spans(used: list[bool]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for i, taken in enumerate(used):
        if taken:
            continue
        if spans and spans[-1][1] == i - 1:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
    return spans


def _or_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _max_more(profile: Profile, used: list[bool]) -> int:
    """How many instances of ``profile`` still fit in the free slices (greedy is exact:
    equal-size intervals, taken by earliest end)."""
    used = list(used)
    count = 0
    for start in profile.starts:
        if _fits(profile, start, used):
            for i in range(start, start + profile.memory_slices):
                used[i] = True
            count += 1
    return count


def _explain(product: Product, layout: Mapping[str, int]) -> str:
    """Why no placement exists: the first profile (hardest first) that cannot be added to
    the ones before it, what those occupy, and how many of it fit at best."""
    order = sorted(
        (product.profiles[name] for name in layout),
        key=lambda p: (-p.memory_slices, len(p.starts), -p.compute_slices, p.name),
    )
    for i, blocked in enumerate(order):
        before = [p for p in order[:i] for _ in range(layout[p.name])]
        best: tuple[int, list[Placement]] | None = None
        for placed in _placements(product, before):
            used = [False] * product.memory_slices
            for pl in placed:
                for s in range(pl.start, pl.end + 1):
                    used[s] = True
            fits = _max_more(blocked, used)
            if best is None or fits > best[0]:
                best = (fits, placed)
        if best is None or best[0] >= layout[blocked.name]:
            continue
        fits, placed = best
        return _describe(product, blocked, layout[blocked.name], fits, placed)
    return f"These instances cannot all be placed on one {product.name}."  # pragma: no cover


def _occupied(placed: list[Placement]) -> list[str]:
    """``4g.40gb occupies memory slices 0-3``, ``3 x 1g.10gb occupy memory slices 4-6``."""
    by_profile: dict[str, list[Placement]] = {}
    for pl in sorted(placed, key=lambda p: p.start):
        by_profile.setdefault(pl.profile, []).append(pl)
    lines = []
    for profile, items in by_profile.items():
        runs: list[tuple[int, int]] = []
        for pl in items:
            if runs and runs[-1][1] == pl.start - 1:
                runs[-1] = (runs[-1][0], pl.end)
            else:
                runs.append((pl.start, pl.end))
        where = _and_list([_slices(a, b) for a, b in runs])
        single = len(runs) == 1 and runs[0][0] == runs[0][1]
        noun = "memory slice" if single else "memory slices"
        who = profile if len(items) == 1 else f"{len(items)} x {profile}"
        verb = "occupies" if len(items) == 1 else "occupy"
        lines.append(f"{who} {verb} {noun} {where}")
    return lines


def _describe(
    product: Product, blocked: Profile, wanted: int, fits: int, placed: list[Placement]
) -> str:
    used = [False] * product.memory_slices
    for pl in placed:
        for s in range(pl.start, pl.end + 1):
            used[s] = True
    starts = _or_list([str(s) for s in blocked.starts])
    each = "slice" if blocked.memory_slices == 1 else "slices"
    need = (
        f"{blocked.name} needs {blocked.memory_slices} memory {each}"
        if wanted == 1
        else f"{wanted} x {blocked.name} need {blocked.memory_slices} memory {each} each"
    )
    fit_text = "none fits" if fits == 0 else f"only {fits} fit{'s' if fits == 1 else ''}"
    if not placed:
        return f"{need}, starting at {starts}: {fit_text} on one {product.name}."
    occupied = "; ".join(_occupied(placed))
    free = ", ".join(_slices(a, b) for a, b in _spans(used)) or "none"
    return f"{occupied}; {need}, starting at {starts} (free: {free}): {fit_text}."


# -- public checks -------------------------------------------------------------------------


def validate_layout(product: Product, layout: Mapping[str, int]) -> list[str]:
    """``[]`` when ``layout`` fits on one GPU of ``product``; otherwise messages saying why.

    Input errors come alone (nothing else can be judged); otherwise every broken limit is
    reported, plus a placement explanation when the memory sum would allow one.
    """
    errors = input_errors(product, layout)
    if errors:
        return errors
    errors = _limit_errors(product, layout)
    over_count = any(layout[n] > product.profiles[n].max_count for n in layout)
    memory = sum(product.profiles[n].memory_slices * c for n, c in layout.items())
    if over_count or memory > product.memory_slices:
        return errors
    if next(_placements(product, _instances(product, layout)), None) is None:
        errors.append(_explain(product, layout))
    return errors


def _strategy(strategy: str | None) -> str:
    return (strategy or "").strip().lower()


def validate_node_layout(
    product: Product,
    layout: Mapping[str, int],
    gpus: int,
    strategy: str,
    *,
    node_gpus: int | None = None,
) -> list[str]:
    """Errors for putting ``layout`` on each of ``gpus`` GPUs of a node with ``strategy``.

    ``single`` advertises every slice as ``nvidia.com/gpu``, so the device plugin needs one
    profile on all of the node's GPUs: exactly one profile kind, and (given ``node_gpus``)
    every GPU of the node. ``mixed`` allows any layout that fits. ``none``/empty means MIG
    is off on the node.
    """
    mode = _strategy(strategy)
    if mode in ("", "none"):
        return ["MIG is disabled on this node (mig.strategy is none)."]
    if mode not in STRATEGIES:
        return [f"Unknown MIG strategy {strategy!r}; expected single or mixed."]
    errors: list[str] = []
    if not _is_count(gpus):
        errors.append(f"The number of GPUs must be a positive integer, got {gpus!r}.")
    elif node_gpus is not None and gpus > node_gpus:
        errors.append(f"The node has {node_gpus} GPUs; {gpus} requested.")
    errors += validate_layout(product, layout)
    if mode == "single" and isinstance(layout, Mapping):
        if len(layout) > 1:
            errors.append(
                "The single strategy needs one profile on every GPU, advertised as "
                f"nvidia.com/gpu; this layout mixes {' and '.join(layout)}. "
                "Choose one profile or a node with the mixed strategy."
            )
        if node_gpus is not None and _is_count(gpus) and gpus < node_gpus:
            errors.append(
                f"The single strategy needs every GPU of the node in the same layout: "
                f"{gpus} of {node_gpus} GPUs requested."
            )
    return errors


def resources_for(
    product: Product, layout: Mapping[str, int], gpus: int, strategy: str
) -> dict[str, int]:
    """The extended resources ``gpus`` GPUs in ``layout`` advertise after reconfiguration.

    mixed: one ``nvidia.com/mig-<profile>`` per profile; single: every instance counts as
    an ``nvidia.com/gpu``. Assumes a validated layout; raises ValueError when MIG is off.
    """
    mode = _strategy(strategy)
    if mode == "single":
        return {GPU_RESOURCE: sum(layout.values()) * gpus}
    if mode == "mixed":
        resources: dict[str, int] = {}
        for name, count in layout.items():
            resource = product.profiles[name].resource
            resources[resource] = resources.get(resource, 0) + count * gpus
        return dict(sorted(resources.items()))
    raise ValueError(f"MIG is disabled on this node (strategy {strategy!r}): no MIG resources.")
