"""The MIG profile catalog: tables per product (GPU-FACTS.md section 4) and name matching."""

from __future__ import annotations

import pytest

from mig.catalog import PRODUCTS, UnknownProduct, profile_from_resource, resolve_product

# GPU-FACTS.md section 4, verbatim: max instances of each profile on one GPU.
MAX_COUNTS = {
    "A100-40GB": {
        "1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2,
        "4g.20gb": 1, "7g.40gb": 1,
    },
    "A100-80GB": {
        "1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2,
        "4g.40gb": 1, "7g.80gb": 1,
    },
    "H200-141GB": {
        "1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2,
        "4g.71gb": 1, "7g.141gb": 1,
    },
    "A30-24GB": {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
}  # fmt: skip
MAX_COUNTS["H100-80GB"] = MAX_COUNTS["A100-80GB"]


def test_products_are_the_five_of_the_facts():
    assert set(PRODUCTS) == {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "A30-24GB"}


@pytest.mark.parametrize("product", sorted(MAX_COUNTS))
def test_profiles_and_max_counts_match_the_facts(product):
    profiles = PRODUCTS[product].profiles
    assert {name: p.max_count for name, p in profiles.items()} == MAX_COUNTS[product]
    assert all(name == p.name for name, p in profiles.items())


@pytest.mark.parametrize(
    ("product", "compute", "memory"),
    [("A100-40GB", 7, 8), ("A100-80GB", 7, 8), ("H100-80GB", 7, 8), ("H200-141GB", 7, 8),
     ("A30-24GB", 4, 4)],
)  # fmt: skip
def test_slice_counts(product, compute, memory):
    assert (PRODUCTS[product].compute_slices, PRODUCTS[product].memory_slices) == (
        compute,
        memory,
    )


@pytest.mark.parametrize(
    ("product", "profile", "compute", "memory", "starts"),
    [
        ("A100-80GB", "1g.10gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        ("A100-80GB", "1g.10gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        ("A100-80GB", "1g.20gb", 1, 2, (0, 2, 4, 6)),
        ("A100-80GB", "2g.20gb", 2, 2, (0, 2, 4)),
        ("A100-80GB", "3g.40gb", 3, 4, (0, 4)),
        ("A100-80GB", "4g.40gb", 4, 4, (0,)),
        ("A100-80GB", "7g.80gb", 7, 8, (0,)),
        ("A100-40GB", "1g.10gb", 1, 2, (0, 2, 4, 6)),  # the double-memory 1g on 40GB
        ("A100-40GB", "1g.5gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        ("H200-141GB", "1g.35gb", 1, 2, (0, 2, 4, 6)),
        ("H200-141GB", "3g.71gb", 3, 4, (0, 4)),
        ("H100-80GB", "2g.20gb", 2, 2, (0, 2, 4)),
        ("A30-24GB", "1g.6gb", 1, 1, (0, 1, 2, 3)),
        ("A30-24GB", "2g.12gb", 2, 2, (0, 2)),
        ("A30-24GB", "2g.12gb+me", 2, 2, (0, 2)),
        ("A30-24GB", "4g.24gb", 4, 4, (0,)),
    ],
)
def test_placement_rules(product, profile, compute, memory, starts):
    p = PRODUCTS[product].profiles[profile]
    assert (p.compute_slices, p.memory_slices, p.starts) == (compute, memory, starts)


def test_media_extension_profiles_are_flagged():
    for product in PRODUCTS.values():
        flagged = {name for name, p in product.profiles.items() if p.media_extensions}
        assert flagged == {name for name in product.profiles if name.endswith("+me")}
        assert flagged
        assert all(product.profiles[name].max_count == 1 for name in flagged)


def test_resource_names():
    a100 = PRODUCTS["A100-80GB"]
    assert a100.profiles["3g.40gb"].resource == "nvidia.com/mig-3g.40gb"
    assert a100.profiles["1g.10gb+me"].resource == "nvidia.com/mig-1g.10gb.me"
    assert PRODUCTS["A30-24GB"].profiles["2g.12gb+me"].resource == "nvidia.com/mig-2g.12gb.me"


@pytest.mark.parametrize(
    ("resource", "profile"),
    [
        ("nvidia.com/mig-3g.40gb", "3g.40gb"),
        ("nvidia.com/mig-1g.10gb.me", "1g.10gb+me"),
        ("nvidia.com/mig-7g.141gb", "7g.141gb"),
        ("nvidia.com/gpu", None),
        ("cpu", None),
        ("nvidia.com/mig-", None),
        ("nvidia.com/mig-bogus", None),
    ],
)
def test_profile_from_resource(resource, profile):
    assert profile_from_resource(resource) == profile


def test_resource_round_trip_for_every_profile():
    for product in PRODUCTS.values():
        for name, p in product.profiles.items():
            assert profile_from_resource(p.resource) == name


@pytest.mark.parametrize(
    ("name", "product"),
    [
        ("A100-80GB", "A100-80GB"),
        ("a100-80gb", "A100-80GB"),
        (" H200-141GB ", "H200-141GB"),
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-A100-80GB-PCIe", "A100-80GB"),
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA-A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA-H100-PCIe", "H100-80GB"),
        ("NVIDIA-H200", "H200-141GB"),
        ("NVIDIA-A30", "A30-24GB"),
        # how GFD decorates the label when the GPU is shared or split
        ("NVIDIA-A100-SXM4-80GB-SHARED", "A100-80GB"),
        ("NVIDIA-H100-80GB-HBM3-MIG-INVALID", "H100-80GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-40GB"),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED", "A100-80GB"),
        # the NVML name as it is, and GFD labels from before the NVIDIA- prefix
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("A100-SXM4-40GB", "A100-40GB"),
        ("nvidia-h200", "H200-141GB"),
    ],
)
def test_resolve_product(name, product):
    assert resolve_product(name).name == product


@pytest.mark.parametrize("name", ["NVIDIA-L40S", "NVIDIA-L40S-SHARED", "H100", "A100", "", "  "])
def test_unknown_products_are_refused_with_the_known_ones(name):
    with pytest.raises(UnknownProduct) as excinfo:
        resolve_product(name)
    message = str(excinfo.value)
    assert "A100-80GB" in message and "A30-24GB" in message and "H200-141GB" in message
    if name.strip():
        assert name.strip() in message


def test_unknown_product_is_a_value_error():
    with pytest.raises(ValueError, match="Unknown GPU product 'NVIDIA-L4'"):
        resolve_product("NVIDIA-L4")


def test_gfd_labels_and_device_ids_are_unique_across_products():
    labels = [label.upper() for p in PRODUCTS.values() for label in p.gfd_products]
    ids = [device for p in PRODUCTS.values() for device in p.device_ids]
    assert len(labels) == len(set(labels))
    assert len(ids) == len(set(ids))
    for product in PRODUCTS.values():
        assert product.device_ids[0] == product.device_id
        for label in product.gfd_products:
            assert resolve_product(label) is product


def test_device_ids_follow_mig_parted():
    """The PCI ids mig-parted's example config filters on (A100-80GB SXM in GPU-FACTS)."""
    assert PRODUCTS["A100-80GB"].device_id == "0x20B210DE"
    assert PRODUCTS["A100-40GB"].device_id == "0x20B010DE"
    assert PRODUCTS["H100-80GB"].device_id == "0x233010DE"
    assert PRODUCTS["H200-141GB"].device_id == "0x233510DE"
    assert PRODUCTS["A30-24GB"].device_id == "0x20B710DE"


def test_products_are_hashable_and_frozen():
    product = PRODUCTS["A100-80GB"]
    assert {product: 1}[product] == 1
    with pytest.raises(AttributeError):
        product.name = "x"  # type: ignore[misc]
