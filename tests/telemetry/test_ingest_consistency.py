# ruff: noqa: F811 - the fixtures imported from test_ingest are redefined as arguments
"""What a node's report may claim (#24 finding 7, telemetry/consistency.py): a stolen node
token could attribute GPU processes to any team's namespace, report another node's GPU
UUID, an empty GPU list, or memory used above total. Each is now a 400 naming the field,
and nothing is stored."""

from __future__ import annotations

from datetime import timedelta

import pytest

from telemetry.models import AgentReport, GpuState
from tests.factories import make_node
from tests.telemetry.test_ingest import (  # noqa: F401 - fixtures
    _frozen,
    agent,
    agent_client,
    cluster,
    gpu,
    node,
    other_node,
    post,
    report,
)

pytestmark = pytest.mark.django_db


def errors_of(response) -> dict:
    assert response.status_code == 400, response.content
    return response.json()


def nothing_stored_for(node) -> bool:
    return (
        not GpuState.objects.filter(node=node).exists()
        and not AgentReport.objects.filter(node=node).exists()
    )


def test_a_gpu_another_node_reports_is_refused_until_that_state_is_stale(
    agent, node, other_node, _frozen
):
    theirs = report("a100-01", gpus=2)
    assert post(agent_client(other_node), theirs).status_code == 202
    body = report(gpus=2)
    for mine, their in zip(body["gpus"], theirs["gpus"], strict=True):
        mine["uuid"] = their["uuid"]  # a100-01's GPUs
    errors = errors_of(post(agent, body))
    assert "is reported by node a100-01" in errors["gpus[0].uuid"][0]
    assert "gpus[1].uuid" in errors
    assert nothing_stored_for(node)
    # The GPU moved: once a100-01 has not reported it for three intervals, it is a100-00's.
    _frozen.shift(timedelta(minutes=2))
    body["timestamp"] = report()["timestamp"]
    assert post(agent, body).status_code == 202
    assert GpuState.objects.filter(node=node).count() == 2


def test_processes_only_of_gpu_pods_the_inventory_places_on_the_node(agent, node, other_node):
    for pod in ("ml/train-1", "finance/anything", "ml/train-9"):  # ml/train-1: on a100-01
        body = report(gpus=2)
        body["gpus"][1]["processes"] = [{"pid": 7, "used_memory_mib": 10, "pod": pod}]
        errors = errors_of(post(agent, body))
        assert errors["gpus[1].processes[0].pod"] == [
            f"No GPU pod {pod} runs on node a100-00 in the inventory."
        ]
    assert nothing_stored_for(node)
    body = report(gpus=2)  # ml/train-0 runs on a100-00 (the fixture's pod)
    assert post(agent, body).status_code == 202


def test_an_empty_gpu_list_is_refused_for_a_node_with_gpus(agent, node, cluster):
    errors = errors_of(post(agent, report(gpus=0, topology=None)))
    assert "has 8 GPUs in the inventory" in errors["gpus"][0]
    cpu_only = make_node(cluster, "cpu-0", product="", gpus=0)
    assert post(agent_client(cpu_only), report("cpu-0", gpus=0, topology=None)).status_code == 202


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda g: g.update(memory_used_mib=81921), "gpus[1].memory_used_mib"),
        (lambda g: g.update(mig_devices=[{"index": 0, "uuid": "MIG-1", "profile": "1g.10gb",
                                          "memory_total_mib": 9856, "memory_used_mib": 9857}]),
         "gpus[1].mig_devices[0].memory_used_mib"),
        (lambda g: g["processes"][0].update(used_memory_mib=90000),
         "gpus[1].processes[0].used_memory_mib"),
        (lambda g: g.update(uuid=gpu(0)["uuid"]), "gpus[1].uuid"),
    ],
)  # fmt: skip
def test_memory_within_total_and_each_uuid_once(agent, node, mutate, field):
    body = report(gpus=2)
    mutate(body["gpus"][1])
    assert field in errors_of(post(agent, body))
    assert nothing_stored_for(node)
