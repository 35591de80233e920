"""The demo's fake agent fleet: node specs, patterns, and one real round of posts."""

from __future__ import annotations

import json
import threading
import time

from gpuagent.fleet import Fleet, mig_for, node_patterns
from tests.gpuagent.contract import check_report


def test_node_patterns_are_stable_and_varied():
    assert node_patterns("a100-00", 8) == node_patterns("a100-00", 8)
    kinds = {p for i in range(40) for p in node_patterns(f"n-{i}", 8)}
    assert kinds == {"busy", "idle", "free"}


def test_mig_spec_forms():
    assert mig_for({"config": "all-1g.10gb"}, "NVIDIA-A100-SXM4-80GB", 2) == {
        0: ["1g.10gb"] * 7,
        1: ["1g.10gb"] * 7,
    }
    balanced = mig_for({"config": "all-balanced"}, "NVIDIA-A100-SXM4-80GB", 1)
    assert sorted(balanced[0]) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert mig_for({"layout": [{"3g.40gb": 2}, None]}, "NVIDIA-H100-80GB-HBM3", 2) == {
        0: ["3g.40gb", "3g.40gb"]
    }
    assert mig_for({"config": "all-disabled"}, "NVIDIA-A100-SXM4-80GB", 8) == {}


def test_fleet_posts_a_valid_report_per_node(portal, tmp_path):
    tokens = {
        "a100-00": {"token": "t-a", "product": "NVIDIA-A100-SXM4-80GB", "gpus": 8},
        "a100mig-00": {
            "token": "t-m",
            "product": "NVIDIA-A100-SXM4-80GB",
            "gpus": 8,
            "mig": {"strategy": "mixed", "config": "all-1g.10gb"},
        },
        "l40s-00": {"token": "t-l", "product": "NVIDIA L40S", "gpus": 4},
    }
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(tokens))
    fleet = Fleet.from_file(path, portal.url, interval_s=0.3, workers=2)
    thread = threading.Thread(target=fleet.run, kwargs={"tick_s": 0.05}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len({r["node"] for r in portal.received}) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    fleet.stop()
    thread.join(5)
    assert not thread.is_alive()
    latest = {r["node"]: r for r in portal.received}
    assert set(latest) == set(tokens)
    for r in latest.values():
        check_report(r)
    tokens_seen = {h["Authorization"] for h in portal.headers}
    assert tokens_seen == {"Bearer t-a", "Bearer t-m", "Bearer t-l"}
    mig = latest["a100mig-00"]["gpus"][0]
    assert mig["mig_mode"]["current"] and len(mig["mig_devices"]) == 7
    hot = [g for r in latest.values() for g in r["gpus"] if (g["temperature_c"] or 0) >= 85]
    assert len(hot) == 1  # exactly one hot GPU in the fleet
    assert latest["l40s-00"]["topology"][0][1] == "PIX"


def test_an_unknown_mig_config_simulates_mig_off_instead_of_failing():
    from gpuagent.fleet import mig_for

    assert mig_for({"config": "portal-custom-x"}, "NVIDIA-A100-SXM4-80GB", 8) == {}
    assert mig_for({"config": "all-1g.10gb"}, "NVIDIA-A100-SXM4-80GB", 2)[0] == ["1g.10gb"] * 7


def test_a_node_of_an_unknown_product_is_skipped_not_fatal():
    from gpuagent.fleet import Fleet

    spec = {
        "good": {"token": "t1", "product": "NVIDIA-H100-80GB-HBM3", "gpus": 2},
        "odd": {"token": "t2", "product": "NVIDIA-Unknown-9000", "gpus": 2},
    }
    fleet = Fleet.from_spec(spec, "http://127.0.0.1:9")
    assert [n.name for n in fleet.nodes] == ["good"]


def test_placement_patterns_follow_the_pods_and_keep_the_one_hot_gpu():
    from gpuagent.fleet import placement_patterns, scenarios

    assert placement_patterns(8, 6) == ["busy"] * 6 + ["free"] * 2
    assert placement_patterns(4, 9) == ["busy"] * 4  # more asked than the node has
    assert placement_patterns(2, 1, idle=True) == ["idle", "free"]
    spec = {
        "a": {"gpus": 8, "patterns": placement_patterns(8, 2), "placed": True},  # GPU 3 free
        "b": {"gpus": 8, "patterns": placement_patterns(8, 8), "placed": True},
        "c": {"gpus": 8, "patterns": ["busy"] * 8},  # chosen by hand: never made hot
    }
    got = {name: sc["patterns"] for name, _, sc in scenarios(spec)}
    assert got["a"] == placement_patterns(8, 2)
    assert got["b"].count("hot") == 1 and got["b"][3] == "hot"
    assert "hot" not in got["c"]
