"""REST API for team namespaces: effective limits, foreign quotas and their adoption,
onboarding (admins) and confirming a lowering below usage (admins).

Rules live in quotas/adoption.py, quotas/lowering.py and quotas/limits.py; this module
parses input and maps their errors to HTTP (``quotas.api.domain_errors``).
"""

from __future__ import annotations

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from inventory.kube import KubeError
from inventory.models import Cluster
from portal.fields import StrictInput
from portal.validation import CONFLICT, NOT_FOUND

from . import adoption, lowering, preview
from .api import TeamScopedViewSet, _errors, domain_errors
from .models import DNS_LABEL, ForeignQuota, Team, TeamNamespace
from .serializers_limits import NamespaceLimitsSerializer

# -- input ----------------------------------------------------------------------------


class OnboardSerializer(StrictInput, serializers.Serializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all())
    name = serializers.CharField(max_length=63, validators=[DNS_LABEL])


class QuotaDecisionSerializer(StrictInput, serializers.Serializer):
    quota = serializers.CharField(max_length=253, help_text="the foreign quota's name")
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class ConfirmSerializer(StrictInput, serializers.Serializer):
    expected = serializers.DictField(
        child=serializers.IntegerField(min_value=0), required=False,
        help_text="the values you confirm (as in needs_confirmation); refused if changed",
    )  # fmt: skip
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class NamespaceViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TeamScopedViewSet
):
    """Team namespaces with their effective limits and foreign quotas; admins onboard
    namespaces, adopt or keep foreign quotas and confirm a lowering below usage."""

    queryset = TeamNamespace.objects.select_related("cluster", "team")
    serializer_class = NamespaceLimitsSerializer
    ordering_fields = ["name"]
    ordering = ["cluster__slug", "name"]
    admin_actions = frozenset({"create", "adopt", "keep", "remove_quota", "confirm_lowering"})

    def get_serializer(self, *args, **kwargs):
        if args and self.action in ("list", "retrieve"):
            items = list(args[0]) if kwargs.get("many") else [args[0]]
            context = kwargs.setdefault("context", self.get_serializer_context())
            context["states"] = preview.states(items)
            args = (items if kwargs.get("many") else items[0], *args[1:])
        return super().get_serializer(*args, **kwargs)

    def _admin(self) -> None:
        if not self.request.user.is_staff:
            raise exceptions.PermissionDenied("Only portal admins can do this.")

    @extend_schema(request=OnboardSerializer,
                   responses={201: NamespaceLimitsSerializer, **_errors},
                   summary="Onboard a team namespace, reading its quotas (admins)")  # fmt: skip
    def create(self, request, *args, **kwargs):
        self._admin()
        form = OnboardSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        d = form.validated_data
        with domain_errors():
            try:
                ns, _ = adoption.onboard(d["team"], d["cluster"], d["name"], request.user)
            except KubeError as err:
                raise exceptions.ValidationError(
                    {"name": [f"Could not read the namespace's quotas: {err}"]}
                ) from err
        return Response(self._out(ns), status=status.HTTP_201_CREATED)

    def _out(self, ns) -> dict:
        return NamespaceLimitsSerializer(ns, context={"states": preview.states([ns])}).data

    def _quota(self, ns, name: str) -> ForeignQuota:
        fq = ForeignQuota.objects.filter(Q(namespace=ns) & Q(name=name)).first()
        if fq is None:
            raise exceptions.ValidationError(
                {"quota": [f"No quota {name!r} recorded in {ns}."]}, code=NOT_FOUND
            )
        return fq

    def _decide(self, request, act):
        self._admin()
        ns = self.get_object()
        form = QuotaDecisionSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fq = self._quota(ns, form.validated_data["quota"])
        with domain_errors():
            try:
                act(fq, request.user, form.validated_data["note"])
            except KubeError as err:
                raise exceptions.ValidationError({"quota": [str(err)]}) from err
        return Response(self._out(ns))

    @extend_schema(request=QuotaDecisionSerializer,
                   responses={200: NamespaceLimitsSerializer, **_errors},
                   summary="Adopt a foreign quota: its limits become baselines")  # fmt: skip
    @action(detail=True, methods=["post"])
    def adopt(self, request, pk=None):
        return self._decide(request, adoption.adopt)

    @extend_schema(request=QuotaDecisionSerializer,
                   responses={200: NamespaceLimitsSerializer, **_errors},
                   summary="Keep a foreign quota as an outside limit (admins)")  # fmt: skip
    @action(detail=True, methods=["post"])
    def keep(self, request, pk=None):
        return self._decide(request, adoption.keep)

    @extend_schema(request=QuotaDecisionSerializer,
                   responses={200: NamespaceLimitsSerializer, **_errors},
                   summary="Delete an adopted foreign quota from the cluster (admins)")  # fmt: skip
    @action(detail=True, methods=["post"], url_path="remove-quota")
    def remove_quota(self, request, pk=None):
        return self._decide(request, adoption.remove)

    @extend_schema(request=ConfirmSerializer,
                   responses={200: NamespaceLimitsSerializer, **_errors},
                   summary="Confirm held applies that set limits below usage (admins)")  # fmt: skip
    @action(detail=True, methods=["post"], url_path="confirm-lowering")
    def confirm_lowering(self, request, pk=None):
        self._admin()
        ns = self.get_object()
        form = ConfirmSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with domain_errors():
            try:
                lowering.confirm_lowering(ns, request.user, expected=form.validated_data.get(
                    "expected"), note=form.validated_data["note"])  # fmt: skip
            except lowering.NothingToConfirm as err:
                raise exceptions.ValidationError({"expected": [str(err)]}, code=CONFLICT) from err
        return Response(self._out(ns))
