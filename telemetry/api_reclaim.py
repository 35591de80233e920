"""REST API of idle-grant reclaims (issue #25 section 2): the policies (everyone reads them
with what each can do now; admins set them) and the reclaims of the caller's teams, where a
manager answers "still needed". Rules: quotas/reclaim.py; judgement: telemetry/reclaim.py."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from inventory.models import Cluster, GpuClass
from portal.fields import StrictInput
from portal.validation import NOT_FOUND, visible
from quotas import reclaim as rules
from quotas.api import AdminOnly, TeamScopedViewSet, _errors, domain_errors
from quotas.models import GrantReclaim, ReclaimPolicy
from quotas.models_reclaim import MAX_HOURS

from . import reclaim

SAY_WHY = "Say why the GPUs are still needed."


class ReclaimSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="namespace.team.slug")
    cluster = serializers.CharField(source="namespace.cluster.slug")
    namespace = serializers.CharField(source="namespace.name")
    gpu_class = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    answered_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    explanation = serializers.SerializerMethodField()

    class Meta:
        model = GrantReclaim
        fields = [
            "id", "team", "cluster", "namespace", "gpu_class", "resource", "status", "granted",
            "unused", "basis", "explanation", "warned_at", "grace_ends_at", "reason",
            "answered_by", "answered_at", "held_until", "closed_at", "lowered_by", "note",
        ]  # fmt: skip
        read_only_fields = fields

    def get_explanation(self, r: GrantReclaim) -> str:
        """Why, in one sentence (as the warning and the pages say it)."""
        return rules.explain(r)


class StillNeededSerializer(StrictInput, serializers.Serializer):
    reason = serializers.CharField(
        max_length=rules.REASON_MAX, trim_whitespace=False, validators=[visible(SAY_WHY)],
        error_messages={"required": SAY_WHY, "blank": SAY_WHY},
        help_text="why the team still needs the GPUs; admins read it",
    )  # fmt: skip


@extend_schema_view(
    list=extend_schema(summary="Idle-grant reclaims of your teams (admins: every team's)"),
    retrieve=extend_schema(summary="One reclaim", responses={200: ReclaimSerializer,
                                                             404: _errors[404]}),
)  # fmt: skip
class ReclaimViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """Warnings that idle GPUs of a namespace's grants go back, their answers and ends."""

    queryset = GrantReclaim.objects.select_related(
        "namespace__team", "namespace__cluster", "gpu_class", "policy", "answered_by"
    ).order_by("-warned_at")
    serializer_class = ReclaimSerializer
    team_path = "namespace__team"

    @extend_schema(
        request=StillNeededSerializer,
        responses={200: ReclaimSerializer, **{k: _errors[k] for k in (400, 403, 404, 409)}},
        summary="Still needed: hold the grants for the policy's hold hours (the team's "
        "managers and admins; 409 once the grace ended or the reclaim closed)",
    )
    @action(detail=True, methods=["post"], url_path="still-needed")
    def still_needed(self, request, pk=None):
        r = self.get_object()
        if not rules.may_answer(request.user, r):
            return Response(
                {"detail": "Only the team's managers and portal admins answer a reclaim."},
                status=status.HTTP_403_FORBIDDEN,
            )
        form = StillNeededSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with domain_errors():
            r = rules.answer(r, request.user, form.validated_data["reason"])
        return Response(ReclaimSerializer(r).data)


def _hours(**kw) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=1, max_value=MAX_HOURS, **kw)


class ReclaimPolicySerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    gpu_class = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    state = serializers.SerializerMethodField()
    updated_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = ReclaimPolicy
        fields = ["id", "cluster", "gpu_class", "enabled", "idle_hours", "grace_hours",
                  "hold_hours", "state", "updated_at", "updated_by"]  # fmt: skip
        read_only_fields = fields

    def get_state(self, p: ReclaimPolicy) -> str:
        """ "judging", "off", or why it does nothing now (e.g. "not measured: ...")."""
        return self.context.get("states", {}).get(p.pk, "")


class PolicyInputSerializer(StrictInput, serializers.Serializer):
    cluster = serializers.CharField(max_length=63, help_text="the cluster's slug")
    gpu_class = serializers.CharField(
        max_length=63, required=False, allow_null=True, default=None,
        help_text="a class of the cluster (its slug); null: the cluster's policy",
    )  # fmt: skip
    enabled = serializers.BooleanField(default=False)
    idle_hours = _hours(default=24)
    grace_hours = _hours(default=48)
    hold_hours = _hours(default=168)

    def validate_cluster(self, value: str) -> Cluster:
        cluster = Cluster.objects.filter(slug=value).first()
        if cluster is None:
            raise serializers.ValidationError(f"No cluster {value!r}.", code=NOT_FOUND)
        return cluster

    def validate(self, data):
        slug = data.get("gpu_class")
        if slug is not None:
            k = GpuClass.objects.filter(cluster=data["cluster"], slug=slug).first()
            if k is None:
                raise serializers.ValidationError({"gpu_class": serializers.ErrorDetail(
                    f"No class {slug!r} on {data['cluster'].slug}.", code=NOT_FOUND)})  # fmt: skip
            data["gpu_class"] = k
        return data


@extend_schema_view(
    list=extend_schema(summary="Reclaim policies, with what each can do now"),
    retrieve=extend_schema(summary="One reclaim policy", responses={200: ReclaimPolicySerializer,
                                                                    404: _errors[404]}),
)  # fmt: skip
class ReclaimPolicyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                           viewsets.GenericViewSet):  # fmt: skip
    """Per cluster (or one of its classes): when idle grants' unused part goes back. Off by
    default; a class's policy wins over its cluster's. Everyone reads them; admins set them
    (POST creates or replaces the policy of the cluster and class named)."""

    queryset = ReclaimPolicy.objects.select_related("cluster", "gpu_class", "updated_by")
    serializer_class = ReclaimPolicySerializer

    def get_permissions(self):
        perms = super().get_permissions()
        if self.action == "create":
            perms.append(AdminOnly())
        return perms

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if getattr(self, "swagger_fake_view", False):
            return context
        context["states"] = {s["policy"].pk: s["state"] for s in reclaim.policy_states()}
        return context

    @extend_schema(
        request=PolicyInputSerializer,
        responses={200: ReclaimPolicySerializer, **{k: _errors[k] for k in (400, 403, 404)}},
        summary="Set the policy of a cluster or class (admins); turning it off withdraws "
        "its open warnings",
    )
    def create(self, request):
        form = PolicyInputSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        d = dict(form.validated_data)
        cluster, gpu_class = d.pop("cluster"), d.pop("gpu_class")
        with domain_errors():
            policy = rules.set_policy(cluster, gpu_class, request.user, **d)
        return Response(ReclaimPolicySerializer(policy, context=self.get_serializer_context()).data)
