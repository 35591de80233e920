"""What an admin sends to connect or edit a cluster, and what a refused preflight answers.

The schema states the connection's rules as the API applies them (#24 finding 9): the
fields each ``auth_method`` needs (``anyOf``), absolute credential paths, the API server
URL's pattern (https, or http for ``CLUSTER_HTTP_HOSTS``; ``credentials.url_problem``),
namespace names as DNS labels and ``ca_cert`` as PEM certificates. What depends on the
host or the cluster is not the body's fault: a credential file the portal may not or
cannot read is a 404, a file or cluster that does not serve a 409 (``connect.py``).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from rest_framework import serializers

from portal.fields import StrictInput
from portal.rest import drf_detail
from portal.validation import CONFLICT, VISIBLE_TEXT

from .connect import CONNECT_FIELDS, REQUIRED
from .kube.credentials import api_url_pattern
from .models import Cluster, check_api_url

ABSOLUTE = RegexValidator(
    r"^(?:/[^\x00]*)?$", "Give an absolute path (the portal's working directory is not yours)."
)
NAMESPACE = RegexValidator(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$", "Give a DNS label.")


class ApiUrlField(serializers.CharField):
    """The API server URL; its pattern is read from the settings when the schema is made."""


class ApiUrlFieldSchema(OpenApiSerializerFieldExtension):
    target_class = ApiUrlField

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "string", "maxLength": 500, "pattern": f"^$|{api_url_pattern()}"}


class PemField(serializers.CharField):
    """CA certificates in PEM (``ssl.create_default_context(cadata=...)`` reads them)."""


class PemFieldSchema(OpenApiSerializerFieldExtension):
    target_class = PemField

    def map_serializer_field(self, auto_schema, direction):
        about = "PEM CA certificates; empty uses the system trust store"
        return {"type": "string", "format": "pem-certificates", "description": about}


class PreflightFindingSerializer(serializers.Serializer):
    check = serializers.CharField(help_text="version, identity, permissions, gpu-operator, "
                                  "mig-strategy, mig-config, gfd, limits")  # fmt: skip
    level = serializers.ChoiceField(choices=["ok", "warning", "error"])
    summary = serializers.CharField()
    fix = serializers.CharField()
    items = serializers.ListField(
        child=serializers.DictField(),
        help_text="permissions: key, verb, resource, group, namespace, name, feature, "
        "granted, reason, rule (the RBAC rule to add, YAML); gfd: node; limits: namespace, "
        "kind, name, limits",
    )


class PreflightReportSerializer(serializers.Serializer):
    status = serializers.CharField(help_text="the worst level of the findings")
    ran_at = serializers.CharField()
    server_version = serializers.CharField()
    identity = serializers.CharField()
    namespaces = serializers.ListField(child=serializers.CharField())
    missing_permissions = serializers.ListField(child=serializers.CharField())
    findings = PreflightFindingSerializer(many=True)


class ClusterConnectSerializer(StrictInput, serializers.ModelSerializer):
    """What an admin sends to connect or edit a cluster. ``bearer_token`` is write-only
    (never returned); on an edit, leaving it out keeps the stored one."""

    bearer_token = serializers.CharField(
        write_only=True, required=False, allow_blank=True, max_length=4096,
        style={"input_type": "password"},
    )  # fmt: skip
    kubeconfig_path = serializers.CharField(
        max_length=500, required=False, allow_blank=True, validators=[ABSOLUTE]
    )
    bearer_token_file = serializers.CharField(
        max_length=500, required=False, allow_blank=True, validators=[ABSOLUTE]
    )
    api_url = ApiUrlField(max_length=500, required=False, allow_blank=True,
                          validators=[check_api_url])  # fmt: skip
    ca_cert = PemField(required=False, allow_blank=True, trim_whitespace=False)
    preflight_namespaces = serializers.ListField(
        child=serializers.CharField(max_length=63, validators=[NAMESPACE]), required=False,
        max_length=50,
        help_text="Namespaces to check for existing GPU limits, besides the team namespaces",
    )  # fmt: skip
    save_anyway = serializers.BooleanField(
        write_only=True, required=False, default=False,
        help_text="Save although the preflight found errors (recorded in the audit trail)",
    )  # fmt: skip

    class Meta:
        model = Cluster
        fields = [*CONNECT_FIELDS, "save_anyway"]
        extra_kwargs = {"slug": {"required": True}}

    def validate(self, attrs):
        attrs = dict(attrs)
        save_anyway = attrs.pop("save_anyway", False)
        cluster = self.instance or Cluster()
        typed = bool(attrs.get("bearer_token"))
        if self.instance is not None and attrs.get("slug", cluster.slug) != cluster.slug:
            raise serializers.ValidationError(
                {"slug": ["A cluster's slug cannot change."]}, code=CONFLICT
            )
        for name, value in attrs.items():
            setattr(cluster, name, value)
        if cluster.auth_method != Cluster.AuthMethod.TOKEN or (
            cluster.bearer_token_file and not typed
        ):
            cluster.bearer_token = ""
        try:
            cluster.clean()
        except DjangoValidationError as err:
            # A field the method needs, missing from a partial edit: the stored cluster
            # lacks it (409); in a whole body it is the body's fault (400).
            recode = {REQUIRED: CONFLICT} if self.partial else None
            raise serializers.ValidationError(drf_detail(err, recode)) from err
        return {"cluster": cluster, "save_anyway": save_anyway}


class PreflightRefusedSerializer(serializers.Serializer):
    """A 409: the preflight found errors in the cluster as it is (``save_anyway`` and
    ``preflight`` are set); nothing was saved."""

    detail = serializers.CharField()
    save_anyway = serializers.ListField(child=serializers.CharField(), required=False)
    preflight = PreflightReportSerializer(required=False)


def _given(*names: str) -> dict:
    return {name: {"minLength": 1} for name in names}


# The fields each auth_method needs (connect.credential_errors), for a whole body (POST,
# PUT). On PUT a token cluster may leave bearer_token out to keep the stored one. (A
# pattern, not an enum: drf-spectacular would make each one-value enum a component.)
METHOD_NEEDS = [
    {"properties": {"auth_method": {"pattern": "^kubeconfig$"}, **_given("kubeconfig_path")},
     "required": ["kubeconfig_path"]},
    {"properties": {"auth_method": {"pattern": "^token$"}, **_given("api_url"),
                    "bearer_token": {"pattern": VISIBLE_TEXT},
                    "bearer_token_file": {"maxLength": 0}},
     "required": ["api_url", "bearer_token"]},
    {"properties": {"auth_method": {"pattern": "^token$"}, **_given("api_url", "bearer_token_file"),
                    "bearer_token": {"maxLength": 0}},
     "required": ["api_url", "bearer_token_file"]},
    {"properties": {"auth_method": {"pattern": "^in_cluster$"}}},
]  # fmt: skip


class ClusterConnectSchema(OpenApiSerializerExtension):
    target_class = ClusterConnectSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request" and auto_schema.method != "PATCH":
            schema["anyOf"] = METHOD_NEEDS
        return schema
