"""The portal's MIG runs against the GPU Operator and mig-manager as they really behave.

Sources the simulator follows (simcluster/gpuoperator.py, simcluster/migmanager.py) and the
portal with it (mig/operator.py, mig/config_steps.py, mig/state_steps.py):
- NVIDIA/gpu-operator v26.7.0 controllers/object_controls.go: custom configs only from the
  ConfigMap named in ClusterPolicy spec.migManager.config.name (TransformMIGManager);
  api/nvidia/v1/clusterpolicy_types.go for the field names;
- NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go (SyncableMigConfig: a label is read only
  when it changes) and pkg/mig/reconfigure/reconfigure.go Run() (validation before
  ``pending``; ``rebooting`` only for a failed mode change with WITH_REBOOT);
- the kubelet's ConfigMap volume sync (the mounted file lags a write by about a minute),
  run here at a full minute on the simulator's clock (``sim.clock.advance``) and the
  portal's (time-machine).

The tests run against the real control plane with the GPU emulation (gpuemu/), except the
three that wait out a minute of the kubelet's sync or half a minute of the device plugin's
restart: a real clock cannot be advanced, so they keep the Python simulator and its clock
(``simulator=True``).
"""

from __future__ import annotations

import pytest
import time_machine
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from mig import services
from mig.models import MigRequest
from quotas.models import AuditEvent, Grant
from tests.mig import migsim
from tests.mig.migsim import CONFIG, PORTAL_CM, approve, request, run, step, steps

pytestmark = pytest.mark.django_db


@pytest.fixture
def make(tmp_path, settings):
    """``make(operator_overrides, portal_cm=...)`` -> (world, admin CoreV1Api)."""
    sims, apis = [], []

    def build(operator=None, step_s=0.05, simulator=False, **kw):
        spec = migsim.fleet(operator, **kw)
        sim = migsim.start(tmp_path, spec, step_s=step_s, simulator=simulator)
        sims.append(sim)
        core = migsim.admin_core(sim)
        apis.append(core)
        return migsim.make_world(sim, settings), core

    yield build
    for api in apis:
        api.api_client.close()
    for sim in sims:
        sim.stop()


def _relabels(req) -> list:
    return step(req, "wait_state").data.get("relabels", [])


def test_the_label_waits_out_a_minute_of_mount_delay(make, settings, client):
    w, core = make({"configMountDelay": 60}, simulator=True)  # the sim clock's minute
    settings.MIG_CONFIG_MOUNT_SECONDS = 60
    with time_machine.travel(timezone.now(), tick=True) as clock:
        req = run(approve(w, request(w)), until=lambda r: step(r, "wait_mount").status == "running")
        wait = step(req, "wait_mount")
        assert "s left" in wait.detail and wait.ready_at is not None
        assert core.read_node("a100-00").metadata.labels["nvidia.com/mig.config"] == "all-disabled"
        assert CONFIG in migsim.configs(core)  # written, but not yet in mig-manager's file
        client.force_login(w.admin)
        page = client.get(reverse("mig:request", args=[req.pk])).content.decode()
        assert "Labels the node at" in page
        clock.shift(61)
        w.sim.clock.advance(61)
        req = run(req)
    assert req.status == MigRequest.Status.SUCCEEDED, req.error
    assert _relabels(req) == []
    assert core.read_node("a100-00").status.capacity["nvidia.com/mig-3g.40gb"] == "4"


def test_a_label_judged_against_the_old_file_is_relabelled_until_it_succeeds(make, settings):
    """mig-manager answers ``failed`` without ``pending`` for a config its file lacks and
    never looks again until the label changes: the portal sets a name validation refuses,
    waits for that ``failed``, then the real name again."""
    w, core = make({"configMountDelay": 60}, simulator=True)  # the sim clock's minute
    settings.MIG_CONFIG_MOUNT_SECONDS = 0  # the portal labels before the kubelet synced
    settings.MIG_RELABEL_ATTEMPTS = 3

    def relabelled_once(r) -> bool:
        data = step(r, "wait_state").data
        return len(data.get("relabels", [])) == 1 and data.get("phase") == "real"

    req = run(approve(w, request(w)), until=relabelled_once)
    assert req.status == MigRequest.Status.RUNNING
    assert "nvidia.com/mig-3g.40gb" not in (core.read_node("a100-00").status.capacity or {})
    w.sim.clock.advance(61)  # the kubelet's sync: the file has the config now
    req = run(req)
    assert req.status == MigRequest.Status.SUCCEEDED, req.error
    relabels = _relabels(req)
    assert 1 <= len(relabels) <= 3
    assert "failed without pending" in relabels[0]["why"]
    assert AuditEvent.objects.filter(action="mig.relabelled").count() == len(relabels)
    labels = core.read_node("a100-00").metadata.labels
    assert labels["nvidia.com/mig.config"] == CONFIG
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert core.read_node("a100-00").status.capacity["nvidia.com/mig-3g.40gb"] == "4"


def test_relabels_are_bounded(make, settings):
    w, core = make({"configMountDelay": 60})
    settings.MIG_CONFIG_MOUNT_SECONDS = 0
    settings.MIG_RELABEL_ATTEMPTS = 2
    req = run(approve(w, request(w)))
    assert req.status == MigRequest.Status.FAILED
    assert "after 2 relabel(s)" in req.error
    assert len(_relabels(req)) == 2
    node = core.read_node("a100-00")
    assert node.metadata.labels["nvidia.com/mig.config"] == CONFIG  # never left on the decoy
    assert not node.spec.unschedulable  # mig-manager never paused anything: uncordoned
    assert req.can_revert


def test_no_custom_configmap_in_the_cluster_policy_says_what_to_patch(make, client):
    from kubernetes import client as k8s

    w, core = make({"migConfigName": ""}, portal_cm=None)
    req = run(approve(w, request(w)))
    assert req.status == MigRequest.Status.FAILED
    assert steps(req)["write_config"] == "failed" and steps(req)["cordon"] == "skipped"
    assert "spec.migManager.config.name" in req.error
    patch = (
        "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge -p "
        """'{"spec":{"migManager":{"config":{"name":"gpu-quota-portal-mig-config","""
        """"default":"all-disabled"}}}}'"""
    )
    assert patch in req.error
    node = core.read_node("a100-00")
    assert not node.spec.unschedulable and node.metadata.labels["nvidia.com/mig.config"] == (
        "all-disabled"
    )
    # The portal created its ConfigMap with the operator's stock configs, so mig-manager
    # can mount it as soon as the ClusterPolicy names it.
    configs = migsim.configs(core)
    assert {"all-disabled", "all-enabled", "all-3g.40gb", "all-1g.10gb", CONFIG} <= set(configs)
    client.force_login(w.admin)
    page = client.get(reverse("mig:request", args=[req.pk])).content.decode()
    assert "Run once on the cluster" in page and "gpu-quota-portal-mig-config" in page

    # The admin runs the patch; the next request goes through.
    custom = k8s.CustomObjectsApi(core.api_client)
    body = {"spec": {"migManager": {"config": {"name": PORTAL_CM, "default": "all-disabled"}}}}
    custom.patch_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy",
                                       body)  # fmt: skip
    again = run(approve(w, request(w)))
    assert again.status == MigRequest.Status.SUCCEEDED, again.error


def test_without_a_cluster_policy_the_run_fails_before_touching_the_node(make):
    w, core = make(False, portal_cm=None)  # the CRD is served, no ClusterPolicy exists
    req = run(approve(w, request(w)))
    assert req.status == MigRequest.Status.FAILED
    assert "no ClusterPolicy" in req.error and "GPU Operator is not configured" in req.error
    # the root CA publisher's kube-root-ca.crt is in every namespace of a real cluster
    names = [c.metadata.name for c in core.list_namespaced_config_map("gpu-operator").items]
    assert names == ["kube-root-ca.crt"]
    assert not core.read_node("a100-00").spec.unschedulable


def test_a_cluster_policy_naming_another_configmap_is_refused(make):
    w, core = make({"migConfigName": "site-mig-config"})
    req = run(approve(w, request(w)))
    assert req.status == MigRequest.Status.FAILED
    assert "'site-mig-config'" in req.error and "MIG_CONFIGMAP_NAME=site-mig-config" in req.error
    assert CONFIG not in migsim.configs(core)


def test_grant_waits_for_the_device_plugin_and_gfd(make):
    w, core = make({"devicePluginRestart": 30}, simulator=True)  # the sim clock's 30 s
    req = run(approve(w, request(w)), until=lambda r: step(r, "wait_devices").status == "running")
    assert core.read_node("a100-00").metadata.labels["nvidia.com/mig.config.state"] == "success"
    wait = step(req, "wait_devices")
    assert "capacity nvidia.com/mig-3g.40gb=0 (want 4)" in wait.detail
    assert not Grant.objects.filter(namespace=w.ns).exists()
    w.sim.clock.advance(31)
    req = run(req)
    assert req.status == MigRequest.Status.SUCCEEDED, req.error
    assert "4 nvidia.com/mig-3g.40gb" in step(req, "wait_devices").detail
    assert Grant.objects.get(namespace=w.ns).amount == 4


def test_rebooting_only_when_the_mode_change_fails_with_reboot_enabled(make):
    w, core = make({"withReboot": True}, step_s=0.3)  # slow enough to see "rebooting"
    w.sim.faults.update(mig_reboot=True)
    req = run(approve(w, request(w)), timeout=30)
    assert req.status == MigRequest.Status.SUCCEEDED, req.error
    assert step(req, "wait_state").data.get("rebooting") is True
    assert core.read_node("a100-00").status.capacity["nvidia.com/mig-3g.40gb"] == "4"


def test_a_failed_mode_change_without_reboot_fails(make):
    w, _ = make({"withReboot": False}, step_s=0.3)
    w.sim.faults.update(mig_reboot=True)
    req = run(approve(w, request(w)), timeout=30)
    assert req.status == MigRequest.Status.FAILED
    assert not step(req, "wait_state").data.get("rebooting")
    assert step(req, "wait_state").data.get("seen_pending") is True  # failed after pending
    assert _relabels(req) == []


def test_stuck_pending_with_paused_operands_keeps_the_node_cordoned(
    make, settings, client, on_commit
):
    """mig-manager gave up waiting for GPU clients: ``pending`` with the operands paused
    (reconfigure.go waitForPodsToBeDeleted returns without a state); the node has no device
    plugin, so the portal leaves it cordoned and tells the admins how to restore it."""
    w, core = make()
    settings.MIG_STATE_TIMEOUT_SECONDS = 0.5
    w.sim.faults.update(mig_stuck=True)
    with on_commit(execute=True):
        req = run(approve(w, request(w)))
    assert req.status == MigRequest.Status.FAILED
    assert "stuck" in req.error and "stays cordoned" in req.error
    assert "kubectl label node a100-00 nvidia.com/gpu.deploy.device-plugin=true" in req.error
    node = core.read_node("a100-00")
    assert node.spec.unschedulable
    assert node.metadata.labels["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "pending"
    assert len(mail.outbox) == 1 and "stuck" in mail.outbox[0].subject
    client.force_login(w.admin)
    page = client.get(reverse("mig:request", args=[req.pk])).content.decode()
    assert "the node stays cordoned" in page and "Revert a100-00 to all-disabled" in page

    # The way back the page offers: a revert changes the label, which mig-manager reads;
    # the old config is still on the GPUs, so it answers success and restores the operands
    # (reconfigure.go isConfigAlreadyApplied -> setState), and the node is uncordoned.
    w.sim.faults.update(mig_stuck=False)
    back = run(services.revert(req, w.admin))
    assert back.status == MigRequest.Status.SUCCEEDED, back.error
    node = core.read_node("a100-00")
    assert node.metadata.labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
    assert not node.spec.unschedulable


def test_cluster_policy_checks_name_the_fix():
    """Without the CRD (404 from the API: no GPU Operator) and with mig-manager disabled."""
    from mig import operator

    with pytest.raises(operator.OperatorProblem, match="GPU Operator is not installed"):
        operator.check_policy(None)
    disabled = {
        "metadata": {"name": "cluster-policy"},
        "spec": {"migManager": {"enabled": False, "config": {"name": PORTAL_CM}}},
    }
    with pytest.raises(operator.OperatorProblem, match=r"spec\.migManager\.enabled: false"):
        operator.check_policy([disabled])
    ignored = {
        "metadata": {"name": "old", "creationTimestamp": "2020-01-01T00:00:00Z"},
        "status": {"state": "ignored"},
        "spec": {},
    }
    live = {
        "metadata": {"name": "cluster-policy", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"migManager": {"config": {"name": PORTAL_CM}}},
    }
    assert operator.check_policy([ignored, live]) == PORTAL_CM


def test_a_recreated_configmap_keeps_every_labelled_config(make):
    """mig-manager validates a node's label against the whole file (reconfigure.go
    validateMigConfig) and a restarted one reads its label again (main.go: lastRead starts
    empty), so a ConfigMap the portal creates must hold every config a node is labelled
    with: the stock ones and the portal's own, rebuilt from the run that set them."""
    w, core = make()
    first = run(approve(w, request(w)))
    assert first.status == MigRequest.Status.SUCCEEDED, first.error
    before = migsim.configs(core)[CONFIG]
    core.delete_namespaced_config_map(PORTAL_CM, "gpu-operator")  # an admin cleans up
    second = run(approve(w, request(w, layout={"1g.10gb": 7}, gpus=1), node_name="a100-01"))
    assert second.status == MigRequest.Status.SUCCEEDED, second.error
    configs = migsim.configs(core)
    assert configs[CONFIG] == before
    assert {"all-disabled", "all-1g.10gb", second.config_name} <= set(configs)
    assert "gpu-operator/gpu-quota-portal-mig-config from the GPU Operator's stock configs" in (
        step(second, "write_config").detail
    )
    assert core.read_node("a100-00").metadata.labels["nvidia.com/mig.config.state"] == "success"
