"""Label syntax, reserved prefixes, the selector and conflicts between sets."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from nodelabels import services
from nodelabels.models import LabelSet, label_key_errors, label_value_errors

from .conftest import A100, H100, make_set

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "key",
    [
        "gpu-type",
        "example.org/gpu-type",
        "team.example.org/dedicated",
        "a",
        "A_b.c-9",
        "x" * 63,
        "sub.domain-1.example/" + "n" * 63,
        "node-role.example.io/gpu",
    ],
)
def test_good_keys(key):
    assert label_key_errors(key) == []


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "cannot be empty"),
        ("/gpu", "prefix before '/' cannot be empty"),
        ("example.org/", "name after the prefix cannot be empty"),
        ("x" * 64, "at most 63 characters"),
        ("-gpu", "start and end with a letter or digit"),
        ("gpu_", "start and end with a letter or digit"),
        ("gpu type", "only letters, digits"),
        ("Example.org/gpu", "prefix must be a DNS subdomain"),
        ("a/b/c", "one '/'"),
        ("exa_mple.org/gpu", "prefix must be a DNS subdomain"),
        ("nvidia.com/gpu.product", "reserved"),
        ("kubernetes.io/hostname", "reserved"),
        ("node-role.kubernetes.io/gpu", "reserved"),
        ("k8s.io/x", "reserved"),
        ("feature.node.k8s.io/x", "reserved"),
    ],
)
def test_bad_keys(key, why):
    errors = label_key_errors(key)
    assert errors and why in " ".join(errors)


@pytest.mark.parametrize("value", ["", "a100-80gb", "A100_80GB.v2", "x" * 63, "1"])
def test_good_values(value):
    assert label_value_errors("k", value) == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("x" * 64, "at most 63"),
        ("-a100", "start and end"),
        ("a100 80gb", "only letters"),
        ("a/b", "only letters"),
        (8, "must be a string"),
    ],
)
def test_bad_values(value, why):
    errors = label_value_errors("k", value)
    assert errors and why in " ".join(errors)


def test_model_errors_are_per_field(sim_cluster, admin_user):
    with pytest.raises(ValidationError) as err:
        services.create_label_set(
            admin_user,
            cluster=sim_cluster,
            name="bad",
            labels={"nvidia.com/gpu.product": "x", "ok": "bad value!"},
            gpu_product=A100,
        )
    labels = err.value.message_dict["labels"]
    assert any("reserved" in m for m in labels)
    assert any("'ok'" in m for m in labels)
    assert LabelSet.objects.count() == 0


def test_selector_needs_exactly_one_of_names_and_product(sim_cluster, admin_user):
    for selector in ({}, {"node_names": ["gpu-a0"], "gpu_product": A100}):
        with pytest.raises(ValidationError) as err:
            services.create_label_set(
                admin_user, cluster=sim_cluster, name="s", labels={"a": "b"}, **selector
            )
        assert "exactly one" in err.value.message_dict["node_names"][0]
    with pytest.raises(ValidationError) as err:
        services.create_label_set(
            admin_user, cluster=sim_cluster, name="s", labels={"a": "b"}, node_names=["Bad_Name"]
        )
    assert "not a valid node name" in err.value.message_dict["node_names"][0]
    with pytest.raises(ValidationError) as err:
        services.create_label_set(admin_user, cluster=sim_cluster, name="s", labels={},
                                  gpu_product=A100)  # fmt: skip
    assert "at least one label" in err.value.message_dict["labels"][0]


def test_names_are_unique_per_cluster(sim_cluster, admin_user):
    make_set(admin_user, sim_cluster, name="gpu-type")
    with pytest.raises(ValidationError) as err:
        make_set(admin_user, sim_cluster, name="gpu-type", labels={"other": "x"})
    assert "already has a label set" in err.value.message_dict["name"][0]


def test_conflicting_values_on_shared_nodes_are_refused(fleet, admin_user):
    make_set(admin_user, fleet, name="by-product", labels={"example.org/pool": "a100"})
    # Same product: conflict.
    with pytest.raises(ValidationError) as err:
        make_set(admin_user, fleet, name="other", labels={"example.org/pool": "b"})
    assert err.value.message_dict["labels"] == [
        "'example.org/pool' conflicts with label set by-product, which sets it to 'a100' "
        "on some of the same nodes."
    ]
    # A named node of that product (the time-sliced one counts): conflict.
    with pytest.raises(ValidationError) as err:
        make_set(admin_user, fleet, name="named", labels={"example.org/pool": "team-x"},
                 node_names=["gpu-a1"])  # fmt: skip
    assert "conflicts with label set by-product" in err.value.message_dict["labels"][0]
    # Same value, another product, or a disabled set: fine.
    make_set(admin_user, fleet, name="same", labels={"example.org/pool": "a100"},
             node_names=["gpu-a0"])  # fmt: skip
    make_set(admin_user, fleet, name="h100", labels={"example.org/pool": "h100"},
             gpu_product=H100)  # fmt: skip
    make_set(admin_user, fleet, name="off", labels={"example.org/pool": "zzz"},
             node_names=["gpu-a0"], enabled=False)  # fmt: skip
    # Enabling the disabled one now conflicts.
    off = LabelSet.objects.get(name="off")
    with pytest.raises(ValidationError) as err:
        services.update_label_set(admin_user, off, enabled=True)
    assert "conflicts with label set by-product" in err.value.message_dict["labels"][0]


def test_only_admins_change_label_sets(sim_cluster, researcher):
    with pytest.raises(PermissionError):
        make_set(researcher, sim_cluster)
