"""apps/v1, batch/v1 and networking/v1 part of :data:`simcluster.typedefs.FIELDS`.

Same notation as there. Generated from the struct tags and ``+`` markers of k8s.io/api
v0.32.4 ``apps/v1/types.go``, ``batch/v1/types.go`` and ``networking/v1/types.go``
(``req``: no ``omitempty`` and no ``+optional``; ``t=``, ``ps=``/``pk=``, ``lt=``/``lk=``,
``go=`` for the named string types) by parsing those files mechanically; NetworkPolicy and
ControllerRevision, which are not served, are left out.
``WORKLOAD_NON_CORE`` names every definition of those packages the simulator reaches;
``WORKLOAD_NEWER`` the fields the installed client knows and a 1.32 server does not.
"""

from __future__ import annotations

WORKLOAD_PACKAGES: dict[str, str] = {
    "apps": "io.k8s.api.apps.v1",
    "batch": "io.k8s.api.batch.v1",
    "networking.k8s.io": "io.k8s.api.networking.v1",
}

WORKLOAD_FIELDS: dict[str, dict[str, str]] = {
    "apps.v1.StatefulSetUpdateStrategy": {"type": "go=v1.StatefulSetUpdateStrategyType"},
    "apps.v1.RollingUpdateStatefulSetStrategy": {"maxUnavailable": "t=intstr"},
    "apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicy": {
        "whenDeleted": "go=v1.PersistentVolumeClaimRetentionPolicyType",
        "whenScaled": "go=v1.PersistentVolumeClaimRetentionPolicyType",
    },
    "apps.v1.StatefulSetSpec": {
        "selector": "req",
        "template": "req",
        "volumeClaimTemplates": "lt=atomic",
        "serviceName": "req",
        "podManagementPolicy": "go=v1.PodManagementPolicyType",
    },
    "apps.v1.StatefulSetStatus": {
        "observedGeneration": "t=int64",
        "replicas": "req",
        "conditions": "ps=merge pk=type lt=map lk=type",
    },
    "apps.v1.StatefulSetCondition": {
        "type": "req go=v1.StatefulSetConditionType",
        "status": "req go=v1.ConditionStatus",
    },
    "apps.v1.StatefulSetList": {"items": "req"},
    "apps.v1.DeploymentSpec": {"selector": "req", "template": "req", "strategy": "ps=retainKeys"},
    "apps.v1.DeploymentStrategy": {"type": "go=v1.DeploymentStrategyType"},
    "apps.v1.RollingUpdateDeployment": {"maxUnavailable": "t=intstr", "maxSurge": "t=intstr"},
    "apps.v1.DeploymentStatus": {
        "observedGeneration": "t=int64",
        "conditions": "ps=merge pk=type lt=map lk=type",
    },
    "apps.v1.DeploymentCondition": {
        "type": "req go=v1.DeploymentConditionType",
        "status": "req go=v1.ConditionStatus",
    },
    "apps.v1.DeploymentList": {"items": "req"},
    "apps.v1.DaemonSetUpdateStrategy": {"type": "go=v1.DaemonSetUpdateStrategyType"},
    "apps.v1.RollingUpdateDaemonSet": {"maxUnavailable": "t=intstr", "maxSurge": "t=intstr"},
    "apps.v1.DaemonSetSpec": {"selector": "req", "template": "req"},
    "apps.v1.DaemonSetStatus": {
        "currentNumberScheduled": "req",
        "numberMisscheduled": "req",
        "desiredNumberScheduled": "req",
        "numberReady": "req",
        "observedGeneration": "t=int64",
        "conditions": "ps=merge pk=type lt=map lk=type",
    },
    "apps.v1.DaemonSetCondition": {
        "type": "req go=v1.DaemonSetConditionType",
        "status": "req go=v1.ConditionStatus",
    },
    "apps.v1.DaemonSetList": {"items": "req"},
    "apps.v1.ReplicaSetList": {"items": "req"},
    "apps.v1.ReplicaSetSpec": {"selector": "req"},
    "apps.v1.ReplicaSetStatus": {
        "replicas": "req",
        "observedGeneration": "t=int64",
        "conditions": "ps=merge pk=type lt=map lk=type",
    },
    "apps.v1.ReplicaSetCondition": {
        "type": "req go=v1.ReplicaSetConditionType",
        "status": "req go=v1.ConditionStatus",
    },
    "batch.v1.JobList": {"items": "req"},
    "batch.v1.PodFailurePolicyOnExitCodesRequirement": {
        "operator": "req go=v1.PodFailurePolicyOnExitCodesOperator",
        "values": "req lt=set",
    },
    "batch.v1.PodFailurePolicyOnPodConditionsPattern": {
        "type": "req go=v1.PodConditionType",
        "status": "req go=v1.ConditionStatus",
    },
    "batch.v1.PodFailurePolicyRule": {
        "action": "req go=v1.PodFailurePolicyAction",
        "onPodConditions": "lt=atomic",
    },
    "batch.v1.PodFailurePolicy": {"rules": "req lt=atomic"},
    "batch.v1.SuccessPolicy": {"rules": "req lt=atomic"},
    "batch.v1.JobSpec": {
        "activeDeadlineSeconds": "t=int64",
        "template": "req",
        "completionMode": "go=v1.CompletionMode",
        "podReplacementPolicy": "go=v1.PodReplacementPolicy",
    },
    "batch.v1.JobStatus": {"conditions": "ps=merge pk=type lt=atomic"},
    "batch.v1.UncountedTerminatedPods": {"succeeded": "lt=set", "failed": "lt=set"},
    "batch.v1.JobCondition": {
        "type": "req go=v1.JobConditionType",
        "status": "req go=v1.ConditionStatus",
    },
    "batch.v1.CronJobList": {"items": "req"},
    "batch.v1.CronJobSpec": {
        "schedule": "req",
        "startingDeadlineSeconds": "t=int64",
        "concurrencyPolicy": "go=v1.ConcurrencyPolicy",
        "jobTemplate": "req",
    },
    "batch.v1.CronJobStatus": {"active": "lt=atomic"},
    "networking.v1.IngressList": {"items": "req"},
    "networking.v1.IngressSpec": {"tls": "lt=atomic", "rules": "lt=atomic"},
    "networking.v1.IngressTLS": {"hosts": "lt=atomic"},
    "networking.v1.IngressLoadBalancerStatus": {"ingress": "lt=atomic"},
    "networking.v1.IngressLoadBalancerIngress": {"ports": "lt=atomic"},
    "networking.v1.IngressPortStatus": {"port": "req", "protocol": "req go=v1.Protocol"},
    "networking.v1.HTTPIngressRuleValue": {"paths": "req lt=atomic"},
    "networking.v1.HTTPIngressPath": {"pathType": "req go=v1.PathType", "backend": "req"},
    "networking.v1.IngressServiceBackend": {"name": "req"},
    "networking.v1.IngressClassParametersReference": {"kind": "req", "name": "req"},
    "networking.v1.IngressClassList": {"items": "req"},
}

WORKLOAD_ATOMIC: frozenset[str] = frozenset({"networking.v1.ServiceBackendPort"})

WORKLOAD_NON_CORE: dict[str, str] = {
    "apps.v1": (
        "StatefulSet StatefulSetUpdateStrategy RollingUpdateStatefulSetStrategy "
        "StatefulSetPersistentVolumeClaimRetentionPolicy StatefulSetOrdinals "
        "StatefulSetSpec StatefulSetStatus StatefulSetCondition StatefulSetList "
        "Deployment DeploymentSpec DeploymentStrategy RollingUpdateDeployment "
        "DeploymentStatus DeploymentCondition DeploymentList DaemonSetUpdateStrategy "
        "RollingUpdateDaemonSet DaemonSetSpec DaemonSetStatus DaemonSetCondition "
        "DaemonSet DaemonSetList ReplicaSet ReplicaSetList ReplicaSetSpec "
        "ReplicaSetStatus ReplicaSetCondition"
    ),
    "batch.v1": (
        "Job JobList PodFailurePolicyOnExitCodesRequirement "
        "PodFailurePolicyOnPodConditionsPattern PodFailurePolicyRule PodFailurePolicy "
        "SuccessPolicy SuccessPolicyRule JobSpec JobStatus UncountedTerminatedPods "
        "JobCondition JobTemplateSpec CronJob CronJobList CronJobSpec CronJobStatus"
    ),
    "networking.v1": (
        "Ingress IngressList IngressSpec IngressTLS IngressStatus "
        "IngressLoadBalancerStatus IngressLoadBalancerIngress IngressPortStatus "
        "IngressRule HTTPIngressRuleValue HTTPIngressPath IngressBackend "
        "IngressServiceBackend ServiceBackendPort IngressClass IngressClassSpec "
        "IngressClassParametersReference IngressClassList"
    ),
}

WORKLOAD_NEWER: dict[str, tuple[str, ...]] = {
    "apps.v1.DeploymentStatus": ("terminatingReplicas",),
    "apps.v1.ReplicaSetStatus": ("terminatingReplicas",),
}
