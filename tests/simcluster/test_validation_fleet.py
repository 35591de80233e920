"""Fleet objects are stored without the API's validation: they must pass it anyway.

The fleet loader (``simcluster/fleet.py``) puts objects straight into the store, so a fleet
that a real API server would refuse (or store in another form) would hide bugs. Every object
of the demo fleet and of a generated fleet must pass the create validation the API server
runs (``pkg/apis/core/validation/validation.go`` and friends, see
:mod:`simcluster.validation`) and already be in the canonical form a write would produce
(quantities as ``apimachinery/pkg/api/resource/quantity.go`` prints them).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from simcluster import validation
from simcluster.fielderrors import aggregate_message
from simcluster.fleet import Fleet, expand, generate, load_fleet
from simcluster.resources import RT

DEMO = Path(__file__).resolve().parents[2] / "simcluster" / "fleets" / "demo.yaml"
_KINDS = (
    ("namespaces", "namespaces"),
    ("nodes", "nodes"),
    ("pods", "pods"),
    ("resourcequotas", "resourcequotas"),
    ("configmaps", "configmaps"),
    ("priorityclasses", "priorityclasses"),
)


def problems(fleet: Fleet) -> list[str]:
    out = []
    for attr, resource in _KINDS:
        for obj in getattr(fleet, attr):
            name = f"{resource}/{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
            decoded = copy.deepcopy(obj)
            validation.normalize(RT[resource], decoded)
            if decoded != obj:
                out.append(f"{name}: not in canonical form")
            errs = validation.validate_object(RT[resource], decoded)
            if errs:
                out.append(f"{name}: {aggregate_message(errs)}")
    return out


@pytest.mark.parametrize(
    "fleet",
    [
        pytest.param(lambda: load_fleet(DEMO), id="demo"),
        pytest.param(
            lambda: expand(generate(nodes=80, pods=600, gpu_pods=200, namespaces=9, seed=5)),
            id="generated",
        ),
    ],
)
def test_every_fleet_object_is_valid_and_canonical(fleet: Callable[[], Fleet]) -> None:
    loaded = fleet()
    assert loaded.pods and loaded.nodes
    assert problems(loaded) == []


def test_the_check_catches_invalid_objects() -> None:
    fleet = load_fleet(DEMO)
    resources = fleet.pods[0]["spec"]["containers"][0]["resources"]
    resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"] = "4000m"
    fleet.nodes[0]["metadata"]["labels"]["bad key!"] = "x"
    found = problems(fleet)
    assert len(found) == 2
    assert found[0].startswith("nodes//") and "bad key!" in found[0]
    assert found[1].endswith(": not in canonical form")


def test_a_pods_age_moves_its_creation_and_start_back() -> None:
    from datetime import UTC, datetime, timedelta

    fleet = load_fleet({
        "nodes": [{"name": "n0", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}}],
        "pods": [{"name": "old", "namespace": "a", "node": "n0", "phase": "Running",
                  "requests": {"nvidia.com/gpu": 1}, "age": "2d"},
                 {"name": "new", "namespace": "a", "node": "n0", "phase": "Running",
                  "requests": {"nvidia.com/gpu": 1}}],
    })  # fmt: skip
    stamps = {
        p["metadata"]["name"]: datetime.fromisoformat(p["metadata"]["creationTimestamp"])
        for p in fleet.pods
    }
    assert timedelta(days=2) - (stamps["new"] - stamps["old"]) < timedelta(seconds=2)
    old = next(p for p in fleet.pods if p["metadata"]["name"] == "old")
    assert old["status"]["startTime"] == old["metadata"]["creationTimestamp"]
    assert stamps["new"] <= datetime.now(UTC)
    with pytest.raises(ValueError, match="use a number and s, m, h or d"):
        load_fleet({"pods": [{"name": "x", "namespace": "a", "age": "two days"}]})
