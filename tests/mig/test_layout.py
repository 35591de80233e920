"""The one-GPU layout validator, node strategy rules, resources, and mig-parted configs."""

from __future__ import annotations

import itertools

import pytest
import yaml

from mig.catalog import PRODUCTS
from mig.layout import (
    Placement,
    input_errors,
    place,
    resources_for,
    validate_layout,
    validate_node_layout,
)
from mig.migparted import config_entries, config_name

A100_40 = PRODUCTS["A100-40GB"]
A100_80 = PRODUCTS["A100-80GB"]
H100 = PRODUCTS["H100-80GB"]
H200 = PRODUCTS["H200-141GB"]
A30 = PRODUCTS["A30-24GB"]

# The shapes of GPU-FACTS.md section 4, named per 8-slice product.
SHAPES = {
    "A100-40GB": {"1g": "1g.5gb", "1gd": "1g.10gb", "2g": "2g.10gb", "3g": "3g.20gb",
                  "4g": "4g.20gb", "7g": "7g.40gb", "me": "1g.5gb+me"},
    "A100-80GB": {"1g": "1g.10gb", "1gd": "1g.20gb", "2g": "2g.20gb", "3g": "3g.40gb",
                  "4g": "4g.40gb", "7g": "7g.80gb", "me": "1g.10gb+me"},
    "H200-141GB": {"1g": "1g.18gb", "1gd": "1g.35gb", "2g": "2g.35gb", "3g": "3g.71gb",
                   "4g": "4g.71gb", "7g": "7g.141gb", "me": "1g.18gb+me"},
}  # fmt: skip
SHAPES["H100-80GB"] = SHAPES["A100-80GB"]
EIGHT_SLICE = sorted(SHAPES)

# Valid on one GPU (GPU-FACTS.md section 4 plus more), in shapes.
VALID = [
    {"4g": 1, "3g": 1},
    {"4g": 1, "2g": 1, "1g": 1},
    {"4g": 1, "1g": 3},
    {"3g": 2},
    {"3g": 1, "2g": 1, "1g": 2},
    {"2g": 3, "1g": 1},
    {"1g": 7},
    {"7g": 1},
    {"4g": 1},
    {"3g": 1},
    {"3g": 1, "2g": 2},  # 3g at 4, the two 2g at 0 and 2
    {"3g": 1, "1g": 4},  # 3g at 4; 1g at 0-3 (not 4-7: 1g cannot start at 7)
    {"3g": 1, "1gd": 2},
    {"4g": 1, "1gd": 2},
    {"4g": 1, "2g": 1, "1gd": 1},
    {"2g": 3, "1gd": 1},
    {"1gd": 4},
    {"1gd": 1, "1g": 6},
    {"2g": 2, "1g": 3},
    {"me": 1},
    {"me": 1, "1g": 6},
    {"4g": 1, "2g": 1, "me": 1},
    {"3g": 1, "2g": 1, "1g": 1, "me": 1},
]
# Invalid on one GPU, with a phrase each error list must contain.
INVALID = [
    ({"4g": 1, "2g": 2}, "need 8 compute slices"),
    ({"4g": 2}, "at most 1 x {4g} per GPU"),
    ({"3g": 2, "1g": 1}, "need 9 memory slices"),
    ({"2g": 4}, "at most 3 x {2g} per GPU"),
    ({"7g": 1, "1g": 1}, "need 8 compute slices"),
    ({"7g": 1, "me": 1}, "need 8 compute slices"),
    ({"7g": 2}, "at most 1 x {7g} per GPU"),
    ({"3g": 3}, "at most 2 x {3g} per GPU"),
    ({"1g": 8}, "at most 7 x {1g} per GPU"),
    ({"1gd": 5}, "at most 4 x {1gd} per GPU"),
    ({"1gd": 4, "1g": 1}, "need 9 memory slices"),
    ({"me": 2}, "at most 1 x {me} per GPU"),
    ({"1g": 7, "me": 1}, "need 8 compute slices"),
    ({"4g": 1, "3g": 1, "1g": 1}, "need 8 compute slices"),
    ({"2g": 3, "1gd": 1, "1g": 1}, "need 9 memory slices"),
]


def _named(product: str, shapes: dict[str, int]) -> dict[str, int]:
    return {SHAPES[product][shape]: count for shape, count in shapes.items()}


def _check_placement(product, layout, placements):
    """A placement is real: right counts, allowed starts, no overlap, within the GPU."""
    assert sorted(p.profile for p in placements) == sorted(
        name for name, count in layout.items() for _ in range(count)
    )
    used = [0] * product.memory_slices
    for p in placements:
        profile = product.profiles[p.profile]
        assert p.start in profile.starts and p.size == profile.memory_slices
        for s in range(p.start, p.start + p.size):
            used[s] += 1
    assert max(used) == 1
    assert sum(product.profiles[p.profile].compute_slices for p in placements) <= (
        product.compute_slices
    )


@pytest.mark.parametrize("product", EIGHT_SLICE)
@pytest.mark.parametrize("shapes", VALID, ids=lambda s: "+".join(f"{k}x{v}" for k, v in s.items()))
def test_valid_layouts(product, shapes):
    layout = _named(product, shapes)
    assert validate_layout(PRODUCTS[product], layout) == []
    placements = place(PRODUCTS[product], layout)
    assert placements is not None
    _check_placement(PRODUCTS[product], layout, placements)
    assert [p.start for p in placements] == sorted(p.start for p in placements)


@pytest.mark.parametrize("product", EIGHT_SLICE)
@pytest.mark.parametrize(
    ("shapes", "phrase"), INVALID, ids=lambda s: "+".join(f"{k}x{v}" for k, v in s.items())
    if isinstance(s, dict) else "",
)  # fmt: skip
def test_invalid_layouts(product, shapes, phrase):
    layout = _named(product, shapes)
    errors = validate_layout(PRODUCTS[product], layout)
    assert errors
    assert any(phrase.format(**SHAPES[product]) in e for e in errors), errors
    assert place(PRODUCTS[product], layout) is None


A30_VALID = [
    {"4g.24gb": 1},
    {"2g.12gb": 2},
    {"2g.12gb": 1, "1g.6gb": 2},
    {"1g.6gb": 4},
    {"2g.12gb+me": 1, "1g.6gb": 2},
    {"2g.12gb+me": 1, "2g.12gb": 1},
    {"1g.6gb+me": 1, "1g.6gb": 3},
    {"1g.6gb+me": 1, "2g.12gb": 1, "1g.6gb": 1},
    {"1g.6gb+me": 1},
]
A30_INVALID = [
    ({"4g.24gb": 1, "1g.6gb": 1}, "need 5 compute slices; one A30-24GB GPU has 4."),
    ({"2g.12gb": 3}, "at most 2 x 2g.12gb per GPU (asked for 3)."),
    ({"1g.6gb": 5}, "at most 4 x 1g.6gb per GPU (asked for 5)."),
    ({"2g.12gb": 2, "1g.6gb": 1}, "need 5 memory slices; one A30-24GB GPU has 4."),
    ({"2g.12gb+me": 1, "1g.6gb+me": 1}, "at most one +me (media extensions) instance per GPU"),
    ({"2g.12gb+me": 2}, "at most 1 x 2g.12gb+me per GPU"),
    ({"4g.24gb": 2}, "at most 1 x 4g.24gb per GPU"),
    ({"3g.12gb": 1}, "Unknown profile '3g.12gb' for A30-24GB"),
]


@pytest.mark.parametrize("layout", A30_VALID)
def test_a30_valid_layouts(layout):
    assert validate_layout(A30, layout) == []
    _check_placement(A30, layout, place(A30, layout))


@pytest.mark.parametrize(("layout", "phrase"), A30_INVALID)
def test_a30_invalid_layouts(layout, phrase):
    errors = validate_layout(A30, layout)
    assert any(phrase in e for e in errors), errors
    assert place(A30, layout) is None


def test_a100_40gb_double_memory_1g():
    """1g.10gb is a 2-slice profile on the 40GB card but a 1-slice one on the 80GB card."""
    assert validate_layout(A100_40, {"1g.10gb": 4}) == []
    assert "at most 4 x 1g.10gb per GPU" in validate_layout(A100_40, {"1g.10gb": 5})[0]
    assert validate_layout(A100_80, {"1g.10gb": 5}) == []


def test_h200_layouts():
    assert validate_layout(H200, {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}) == []
    assert validate_layout(H200, {"4g.71gb": 1, "1g.35gb": 2}) == []
    assert validate_layout(H200, {"1g.18gb+me": 1, "1g.35gb": 3}) == []
    errors = validate_layout(H200, {"3g.40gb": 1})
    assert errors == [
        "Unknown profile '3g.40gb' for H200-141GB; valid profiles: 7g.141gb, 4g.71gb, "
        "3g.71gb, 2g.35gb, 1g.35gb, 1g.18gb, 1g.18gb+me."
    ]


def test_search_agrees_with_an_enumeration_of_every_packing():
    """Every layout up to one over the max counts: valid exactly when it is one of the
    packings enumerated slice by slice (a different algorithm from the validator's),
    within the compute budget and with at most one +me."""
    for product in PRODUCTS.values():
        packable = _packings(product)
        names = list(product.profiles)
        ranges = [range(product.profiles[n].max_count + 2) for n in names]
        checked = 0
        for counts in itertools.product(*ranges):
            layout = {n: c for n, c in zip(names, counts, strict=True) if c}
            if not layout or sum(counts) > 9:
                continue
            instances = [product.profiles[n] for n, c in layout.items() for _ in range(c)]
            expected = (
                frozenset(layout.items()) in packable
                and sum(p.compute_slices for p in instances) <= product.compute_slices
                and sum(p.media_extensions for p in instances) <= 1
                and all(c <= product.profiles[n].max_count for n, c in layout.items())
            )
            assert (validate_layout(product, layout) == []) is expected, (product.name, layout)
            assert (place(product, layout) is not None) is expected
            checked += 1
        assert checked > 100


def _packings(product) -> set[frozenset]:
    """Layouts whose instances can sit on distinct memory slices at allowed starts."""
    found: set[frozenset] = set()

    def walk(slot: int, counts: dict[str, int]) -> None:
        if slot >= product.memory_slices:
            found.add(frozenset((n, c) for n, c in counts.items() if c))
            return
        walk(slot + 1, counts)  # leave this slice free
        for p in product.profiles.values():
            if slot in p.starts and slot + p.memory_slices <= product.memory_slices:
                counts[p.name] = counts.get(p.name, 0) + 1
                walk(slot + p.memory_slices, counts)
                counts[p.name] -= 1

    walk(0, {})
    return found


# -- exact messages ------------------------------------------------------------------------


def test_message_placement_conflict_says_who_blocks_whom():
    errors = validate_layout(A100_80, {"4g.40gb": 1, "2g.20gb": 2})
    assert errors == [
        "1 x 4g.40gb + 2 x 2g.20gb need 8 compute slices; one A100-80GB GPU has 7.",
        "4g.40gb occupies memory slices 0-3; 2 x 2g.20gb need 2 memory slices each, "
        "starting at 0, 2 or 4 (free: 4-7): only 1 fits.",
    ]


def test_message_slice_seven_is_not_for_1g():
    errors = validate_layout(A100_80, {"1g.10gb": 7, "1g.10gb+me": 1})
    assert errors[-1] == (
        "7 x 1g.10gb occupy memory slices 0-6; 1g.10gb+me needs 1 memory slice, "
        "starting at 0, 1, 2, 3, 4, 5 or 6 (free: 7): none fits."
    )


def test_message_too_many_of_one_profile():
    assert validate_layout(A100_80, {"3g.40gb": 3}) == [
        "at most 2 x 3g.40gb per GPU (asked for 3).",
        "3 x 3g.40gb need 9 compute slices; one A100-80GB GPU has 7.",
        "3 x 3g.40gb need 12 memory slices; one A100-80GB GPU has 8.",
    ]


def test_message_compute_over_seven():
    assert validate_layout(H100, {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}) == [
        "1 x 4g.40gb + 1 x 3g.40gb + 1 x 1g.10gb need 8 compute slices; one H100-80GB GPU has 7.",
        "1 x 4g.40gb + 1 x 3g.40gb + 1 x 1g.10gb need 9 memory slices; one H100-80GB GPU has 8.",
    ]


def test_message_memory_over_eight():
    assert validate_layout(A100_80, {"1g.20gb": 4, "1g.10gb": 1}) == [
        "4 x 1g.20gb + 1 x 1g.10gb need 9 memory slices; one A100-80GB GPU has 8."
    ]


def test_message_unknown_profile_lists_the_valid_ones():
    assert validate_layout(A100_80, {"3g.20gb": 1}) == [
        "Unknown profile '3g.20gb' for A100-80GB; valid profiles: 7g.80gb, 4g.40gb, "
        "3g.40gb, 2g.20gb, 1g.20gb, 1g.10gb, 1g.10gb+me."
    ]


def test_message_media_extensions_once_per_gpu():
    assert validate_layout(A30, {"1g.6gb+me": 1, "2g.12gb+me": 1}) == [
        "at most one +me (media extensions) instance per GPU: a GPU has one set of media "
        "engines (asked for 1 x 1g.6gb+me, 1 x 2g.12gb+me)."
    ]


@pytest.mark.parametrize("count", [0, -1, 1.5, "2", True, None])
def test_amounts_must_be_positive_integers(count):
    errors = validate_layout(A100_80, {"3g.40gb": count})
    assert errors == [
        f"3g.40gb: the number of instances must be a positive integer, got {count!r}."
    ]
    assert place(A100_80, {"3g.40gb": count}) is None


def test_empty_layout_is_an_error():
    assert validate_layout(A100_80, {}) == ["A layout needs at least one instance."]
    assert place(A100_80, {}) is None


def test_input_errors_are_separate_from_fit_errors():
    assert input_errors(A100_80, {"4g.40gb": 2}) == []
    assert input_errors(A100_80, {"9g.1gb": 1})
    assert input_errors(A100_80, [])  # type: ignore[arg-type]


# -- place ---------------------------------------------------------------------------------


def test_place_needs_the_second_half_for_the_3g():
    """3g+2g+1g+1g only fits with the 3g at slice 4: the search must backtrack."""
    assert place(A100_80, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}) == [
        Placement("2g.20gb", 0, 2),
        Placement("1g.10gb", 2, 1),
        Placement("1g.10gb", 3, 1),
        Placement("3g.40gb", 4, 4),
    ]


def test_place_is_deterministic():
    layout = {"1g.10gb": 2, "4g.40gb": 1, "2g.20gb": 1}
    assert place(A100_80, layout) == place(A100_80, dict(reversed(layout.items())))


# -- node strategy -------------------------------------------------------------------------


def test_mixed_strategy_allows_mixes():
    assert validate_node_layout(A100_80, {"3g.40gb": 1, "1g.10gb": 2}, 4, "mixed") == []


def test_single_strategy_requires_one_profile():
    errors = validate_node_layout(A100_80, {"3g.40gb": 1, "1g.10gb": 2}, 8, "single")
    assert errors == [
        "The single strategy needs one profile on every GPU, advertised as nvidia.com/gpu; "
        "this layout mixes 3g.40gb and 1g.10gb. Choose one profile or a node with the "
        "mixed strategy."
    ]
    assert validate_node_layout(A100_80, {"1g.10gb": 7}, 8, "single") == []


def test_single_strategy_with_node_gpus_requires_every_gpu():
    assert validate_node_layout(A100_80, {"3g.40gb": 2}, 8, "single", node_gpus=8) == []
    assert validate_node_layout(A100_80, {"3g.40gb": 2}, 2, "single", node_gpus=8) == [
        "The single strategy needs every GPU of the node in the same layout: 2 of 8 GPUs requested."
    ]
    assert validate_node_layout(A100_80, {"3g.40gb": 2}, 2, "mixed", node_gpus=8) == []
    assert validate_node_layout(A100_80, {"3g.40gb": 2}, 9, "mixed", node_gpus=8) == [
        "The node has 8 GPUs; 9 requested."
    ]


@pytest.mark.parametrize("strategy", ["none", "", None, "NONE"])
def test_mig_disabled(strategy):
    assert validate_node_layout(A100_80, {"3g.40gb": 2}, 1, strategy) == [
        "MIG is disabled on this node (mig.strategy is none)."
    ]


def test_unknown_strategy_and_bad_gpu_count():
    assert validate_node_layout(A100_80, {"3g.40gb": 2}, 1, "weird") == [
        "Unknown MIG strategy 'weird'; expected single or mixed."
    ]
    assert validate_node_layout(A100_80, {"3g.40gb": 2}, 0, "Mixed") == [
        "The number of GPUs must be a positive integer, got 0."
    ]


def test_node_layout_includes_the_gpu_errors():
    errors = validate_node_layout(A100_80, {"4g.40gb": 2}, 2, "single")
    assert errors[0] == "at most 1 x 4g.40gb per GPU (asked for 2)."


def test_resources_mixed():
    layout = {"3g.40gb": 1, "1g.10gb": 2, "1g.10gb+me": 1}
    assert resources_for(A100_80, layout, 2, "mixed") == {
        "nvidia.com/mig-1g.10gb": 4,
        "nvidia.com/mig-1g.10gb.me": 2,
        "nvidia.com/mig-3g.40gb": 2,
    }


def test_resources_single():
    assert resources_for(A100_80, {"1g.10gb": 7}, 8, "single") == {"nvidia.com/gpu": 56}
    assert resources_for(H200, {"3g.71gb": 2}, 4, "single") == {"nvidia.com/gpu": 8}


def test_resources_when_mig_is_off():
    with pytest.raises(ValueError, match="MIG is disabled"):
        resources_for(A100_80, {"1g.10gb": 7}, 8, "none")


# -- mig-parted ----------------------------------------------------------------------------

FACTS_EXAMPLE = """
portal-mixed-a:
  - device-filter: ["0x20B210DE"]
    devices: [0, 1]
    mig-enabled: true
    mig-devices: {"3g.40gb": 2}
  - devices: [2, 3, 4, 5, 6, 7]
    mig-enabled: false
"""


def test_config_entries_match_the_facts_example():
    expected = yaml.safe_load(FACTS_EXAMPLE)["portal-mixed-a"]
    entries = config_entries(A100_80, {"3g.40gb": 2}, [0, 1], 8)
    # the filter also names the PCIe board, so an A100 80GB PCIe node applies it too
    assert entries[0]["device-filter"] == ["0x20B210DE", "0x20B510DE"]
    entries[0]["device-filter"] = [A100_80.device_id]
    assert entries == expected
    # the YAML a ConfigMap gets parses back to the same entries
    assert yaml.safe_load(yaml.safe_dump({"x": entries}))["x"] == entries


def test_config_entries_all_devices():
    assert config_entries(H100, {"1g.10gb": 7}, "all", 8) == [
        {
            "device-filter": ["0x233010DE", "0x233110DE"],
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"1g.10gb": 7},
        }
    ]


def test_config_entries_order_and_every_device_covered():
    entries = config_entries(A100_80, {"1g.10gb": 2, "3g.40gb": 1}, [3, 1], 4)
    assert entries[0]["devices"] == [1, 3]
    assert list(entries[0]["mig-devices"]) == ["3g.40gb", "1g.10gb"]
    assert entries[1] == {"devices": [0, 2], "mig-enabled": False}
    assert len(config_entries(A100_80, {"3g.40gb": 2}, [0, 1], 2)) == 1


@pytest.mark.parametrize(
    "devices", [[], [8], [-1], [0, 0], "some", [True]], ids=["empty", "8", "neg", "dup", "str", "b"]
)
def test_config_entries_refuse_bad_devices(devices):
    with pytest.raises(ValueError):
        config_entries(A100_80, {"3g.40gb": 2}, devices, 8)


def test_config_entries_refuse_profiles_of_another_product():
    with pytest.raises(ValueError, match=r"3g\.40gb"):
        config_entries(A30, {"3g.40gb": 1}, "all", 1)


def test_config_name():
    assert config_name({"3g.40gb": 1, "1g.10gb": 2}, [0, 1]) == "portal-3g.40gbx1-1g.10gbx2-d0-1"
    # deterministic: neither dict nor device order matters
    assert config_name({"1g.10gb": 2, "3g.40gb": 1}, [1, 0]) == "portal-3g.40gbx1-1g.10gbx2-d0-1"
    assert config_name({"1g.10gb+me": 1, "1g.10gb": 6}, "all") == (
        "portal-1g.10gbx6-1g.10gb.mex1-all"
    )
    assert config_name({"3g.40gb": 2}, [0], A100_80) == "portal-a100-80gb-3g.40gbx2-d0"
    assert config_name({"3g.40gb": 2}, [0], H100) != config_name({"3g.40gb": 2}, [0], A100_80)


def test_config_name_is_a_label_value_even_when_long():
    import re

    name = config_name({"1g.5gb": 4, "1g.5gb+me": 1, "2g.10gb": 1}, list(range(8)), A100_40)
    assert len(name) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?", name)
    assert name.startswith("portal-a100-40gb-")
    assert name == config_name({"2g.10gb": 1, "1g.5gb+me": 1, "1g.5gb": 4}, list(range(8)), A100_40)
    other = config_name({"1g.5gb": 4, "1g.5gb+me": 1, "2g.10gb": 1}, list(range(7)), A100_40)
    assert other != name
