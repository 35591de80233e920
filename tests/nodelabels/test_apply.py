"""Label sets applied to the simulated cluster through operations (official client over
HTTP), removal of only portal-owned values, the product selector, drift and retries.

Operations run in this process (``run_operation``), exactly what the Celery task calls.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from inventory.sync import sync_cluster
from nodelabels import services
from nodelabels.models import LabelOperation, NodeLabelState
from nodelabels.tasks import reconcile_node_labels, redispatch_label_operations
from quotas.models import AuditEvent
from tests.inventory.test_sync import node_body

from .conftest import A100, labels, make_set, run_pending

pytestmark = pytest.mark.django_db
TYPE = "example.org/gpu-type"


def test_label_set_applies_to_matching_nodes(fleet, sim_api, admin_user):
    make_set(admin_user, fleet, labels={TYPE: "a100-80gb", "example.org/pool": "train"})
    ops = LabelOperation.objects.order_by("node_name")
    assert [(op.node_name, op.reason) for op in ops] == [("gpu-a0", "apply"), ("gpu-a1", "apply")]
    assert run_pending() == ["succeeded", "succeeded"]
    for name in ("gpu-a0", "gpu-a1"):  # gpu-a1 is time-sliced: its base product matches
        got = labels(sim_api, name)
        assert got[TYPE] == "a100-80gb" and got["example.org/pool"] == "train"
        assert got["nvidia.com/gpu.product"].startswith(A100)  # GFD's labels untouched
    assert TYPE not in labels(sim_api, "gpu-h0")
    op = LabelOperation.objects.get(node_name="gpu-a0")
    assert op.status == "succeeded" and op.attempts == 1
    assert op.desired == {TYPE: "a100-80gb", "example.org/pool": "train"}
    state = NodeLabelState.objects.get(node_name="gpu-a0")
    assert state.applied == op.desired
    assert AuditEvent.objects.filter(action="nodelabel.applied").count() == 2
    assert AuditEvent.objects.filter(action="labelset.created", actor=admin_user).count() == 1
    # Idempotent: a second run of a finished op is not claimed, a new one patches nothing.
    assert services.run_operation(op.pk) == "skipped"
    again = LabelOperation.objects.create(cluster=fleet, node_name="gpu-a0", reason="apply")
    assert services.run_operation(again.pk) == "succeeded"
    assert AuditEvent.objects.filter(action="nodelabel.applied").count() == 2


def test_explicit_node_names(fleet, sim_api, admin_user):
    make_set(admin_user, fleet, name="team-x", labels={"example.org/dedicated": "team-x"},
             node_names=["gpu-h0", "not-synced-yet"])  # fmt: skip
    assert list(LabelOperation.objects.values_list("node_name", flat=True)) == ["gpu-h0"]
    run_pending()
    assert labels(sim_api, "gpu-h0")["example.org/dedicated"] == "team-x"
    assert "example.org/dedicated" not in labels(sim_api, "gpu-a0")


def test_new_node_of_the_product_is_labelled_on_the_next_reconcile(fleet, sim_api, admin_user):
    make_set(admin_user, fleet)
    run_pending()
    sim_api.create_node(node_body("gpu-a2", product=A100))
    assert reconcile_node_labels()["queued"] == 0  # not in the inventory yet
    assert sync_cluster(fleet).status == "succeeded"
    counts = reconcile_node_labels()
    assert counts["queued"] == 1 and counts["drifted"] == 0
    op = LabelOperation.objects.get(node_name="gpu-a2")
    assert op.reason == "apply"
    run_pending()
    assert labels(sim_api, "gpu-a2")[TYPE] == "a100-80gb"
    assert reconcile_node_labels() == {"checked": 3, "drifted": 0, "queued": 0, "errors": 0}


def test_removal_removes_only_portal_owned_values(fleet, sim_api, admin_user):
    label_set = make_set(admin_user, fleet, labels={TYPE: "a100-80gb", "example.org/pool": "p"})
    run_pending()
    # Someone else takes over the pool label on gpu-a1 and owns an unrelated label.
    sim_api.patch_node("gpu-a1", {"metadata": {"labels": {"example.org/pool": "theirs",
                                                          "example.org/rack": "r7"}}})  # fmt: skip
    services.delete_label_set(admin_user, label_set)
    assert set(
        LabelOperation.objects.filter(status="pending").values_list("reason", flat=True)
    ) == {"remove"}
    assert run_pending() == ["succeeded", "succeeded"]
    a0, a1 = labels(sim_api, "gpu-a0"), labels(sim_api, "gpu-a1")
    assert TYPE not in a0 and "example.org/pool" not in a0
    assert TYPE not in a1
    assert a1["example.org/pool"] == "theirs" and a1["example.org/rack"] == "r7"
    assert a0["nvidia.com/gpu.product"] == A100
    assert NodeLabelState.objects.get(node_name="gpu-a1").applied == {}
    op = LabelOperation.objects.filter(node_name="gpu-a1").latest("created_at")
    assert op.removed == [TYPE]
    assert AuditEvent.objects.filter(action="labelset.deleted").count() == 1
    # Nothing left to do: the drift check leaves their label alone.
    assert reconcile_node_labels()["queued"] == 0
    assert labels(sim_api, "gpu-a1")["example.org/pool"] == "theirs"


def test_node_leaving_the_selector_loses_the_label(fleet, sim_api, admin_user):
    label_set = make_set(admin_user, fleet, name="team", labels={"example.org/dedicated": "x"},
                         node_names=["gpu-a0", "gpu-h0"])  # fmt: skip
    run_pending()
    services.update_label_set(admin_user, label_set, node_names=["gpu-a0"])
    run_pending()
    assert labels(sim_api, "gpu-a0")["example.org/dedicated"] == "x"
    assert "example.org/dedicated" not in labels(sim_api, "gpu-h0")
    services.update_label_set(admin_user, label_set, enabled=False)
    run_pending()
    assert "example.org/dedicated" not in labels(sim_api, "gpu-a0")
    assert AuditEvent.objects.filter(action="labelset.updated").count() == 2


def test_drift_is_reverted_and_audited(fleet, sim_api, admin_user):
    make_set(admin_user, fleet, labels={TYPE: "a100-80gb", "example.org/pool": "train"})
    run_pending()
    sim_api.patch_node("gpu-a0", {"metadata": {"labels": {TYPE: "h100"}}})  # hand edit
    sim_api.patch_node("gpu-a1", {"metadata": {"labels": {"example.org/pool": None}}})  # delete
    counts = reconcile_node_labels()
    assert counts == {"checked": 2, "drifted": 2, "queued": 2, "errors": 0}
    events = {e.note.split()[3]: e for e in AuditEvent.objects.filter(
        action="nodelabel.drift_reverted")}  # fmt: skip
    assert events["gpu-a0"].before == {TYPE: "h100"}
    assert events["gpu-a0"].after == {TYPE: "a100-80gb"}
    assert events["gpu-a1"].before == {"example.org/pool": None}
    assert events["gpu-a1"].after == {"example.org/pool": "train"}
    assert events["gpu-a0"].actor_name == "system" and events["gpu-a0"].object_type == "node"
    assert set(
        LabelOperation.objects.filter(status="pending").values_list("reason", flat=True)
    ) == {"drift"}
    # While the revert is queued, the check leaves the nodes alone (no duplicate events).
    assert reconcile_node_labels()["checked"] == 0
    run_pending()
    assert labels(sim_api, "gpu-a0")[TYPE] == "a100-80gb"
    assert labels(sim_api, "gpu-a1")["example.org/pool"] == "train"
    assert reconcile_node_labels()["drifted"] == 0
    assert AuditEvent.objects.filter(action="nodelabel.drift_reverted").count() == 2
    assert NodeLabelState.objects.get(node_name="gpu-a0").checked_at is not None


def test_drift_check_by_paged_list(fleet, sim_api, admin_user, settings):
    settings.NODELABEL_GET_NODE_LIMIT = 0
    make_set(admin_user, fleet)
    run_pending()
    sim_api.patch_node("gpu-a0", {"metadata": {"labels": {TYPE: None}}})
    assert reconcile_node_labels()["drifted"] == 1
    run_pending()
    assert labels(sim_api, "gpu-a0")[TYPE] == "a100-80gb"


def test_transient_failure_retries_with_backoff_then_succeeds(fleet, sim, sim_api, admin_user):
    make_set(admin_user, fleet, name="team", labels={"example.org/dedicated": "x"},
             node_names=["gpu-h0"])  # fmt: skip
    op = LabelOperation.objects.get()
    sim.faults.update(error_rate=1.0, error_code=503, path_regex="nodes/gpu-h0")
    assert services.run_operation(op.pk) == "pending"
    op.refresh_from_db()
    assert op.attempts == 1 and "503" in op.last_error
    assert op.next_attempt_at > timezone.now()
    assert services.run_operation(op.pk) == "skipped"  # not due yet
    assert redispatch_label_operations() == 0
    sim.faults.reset()
    with time_machine.travel(op.next_attempt_at + timedelta(seconds=1)):
        assert services.run_operation(op.pk) == "succeeded"
    op.refresh_from_db()
    assert op.status == "succeeded" and op.attempts == 2 and op.last_error == ""
    assert labels(sim_api, "gpu-h0")["example.org/dedicated"] == "x"


def test_permanent_failure_gives_up_and_is_audited(fleet, sim, admin_user):
    make_set(admin_user, fleet, name="team", labels={"example.org/dedicated": "x"},
             node_names=["gpu-h0"])  # fmt: skip
    op = LabelOperation.objects.get()
    sim.faults.update(error_rate=1.0, error_code=422, path_regex="nodes/gpu-h0")
    assert services.run_operation(op.pk) == "failed"
    assert AuditEvent.objects.filter(action="nodelabel.apply_failed").count() == 1


def test_stalled_operation_is_reclaimed_and_one_node_is_patched_by_one_worker(fleet, admin_user):
    make_set(admin_user, fleet, name="team", labels={"example.org/dedicated": "x"},
             node_names=["gpu-h0"])  # fmt: skip
    first = LabelOperation.objects.get()
    now = timezone.now()
    LabelOperation.objects.filter(pk=first.pk).update(status="running", lease_until=now)
    second = LabelOperation.objects.create(cluster=fleet, node_name="gpu-h0", reason="drift")
    assert services.run_operation(second.pk) == "busy"  # the node is being patched
    second.refresh_from_db()
    assert second.status == "pending" and second.attempts == 0
    with time_machine.travel(now + timedelta(minutes=1)):
        assert redispatch_label_operations() == 1
        first.refresh_from_db()
        assert first.status == "pending"
        assert services.run_operation(first.pk) == "succeeded"
        assert services.run_operation(second.pk) == "succeeded"
