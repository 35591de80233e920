from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from rest_framework.routers import DefaultRouter

from inventory import api as inventory_api
from inventory import api_classes as inventory_api_classes
from quotas import api as quotas_api
from quotas import api_calendar as quotas_calendar_api
from quotas import api_namespaces as quotas_namespaces_api
from quotas import api_queues as quotas_queues_api
from telemetry import api_reclaim

from . import api, apidocs, health, views

router = DefaultRouter()
router.register("clusters", inventory_api.ClusterViewSet, basename="cluster")
router.register("nodes", inventory_api.NodeViewSet, basename="node")
router.register("gpu-classes", inventory_api_classes.GpuClassViewSet, basename="gpuclass")
router.register("auth/tokens", api.ApiTokenViewSet, basename="apitoken")
router.register("teams", quotas_api.TeamViewSet, basename="team")
router.register("namespaces", quotas_namespaces_api.NamespaceViewSet, basename="namespace")
router.register("team-queues", quotas_queues_api.TeamQueueViewSet, basename="teamqueue")
router.register("quota-requests", quotas_api.QuotaRequestViewSet, basename="quotarequest")
router.register("grants", quotas_api.GrantViewSet, basename="grant")
router.register("operations", quotas_api.OperationViewSet, basename="operation")
router.register("reclaims", api_reclaim.ReclaimViewSet, basename="reclaim")
router.register("reclaim-policies", api_reclaim.ReclaimPolicyViewSet, basename="reclaimpolicy")
router.register("audit-events", quotas_api.AuditEventViewSet, basename="auditevent")

api_v1 = [
    path("auth/token/", api.issue_token, name="issue-token"),
    path("inventory/summary/", inventory_api.inventory_summary, name="inventory-summary"),
    path("calendar/", quotas_calendar_api.CalendarView.as_view(), name="calendar"),
    path("bookings/", quotas_calendar_api.BookingList.as_view(), name="bookings"),
    *router.urls,
]

urlpatterns = [
    # First: agents post reports many times a second, so their route is matched first.
    path("api/v1/", include("telemetry.api_urls")),
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("api/v1/", include("mig.api_urls")),
    path("api/v1/", include("nodelabels.api_urls")),
    path("api/v1/", include("discussion.api")),  # request comment threads
    path("api/v1/", include("notices.api_urls")),
    # Both need a signed-in user or a token unless API_DOCS_PUBLIC (portal/apidocs.py).
    path("api/schema/", apidocs.SchemaView.as_view(), name="schema"),
    # The split view serves Swagger UI's init script from a URL: no inline script (CSP).
    path("api/docs/", apidocs.DocsView.as_view(url_name="schema"), name="api-docs"),
    # Browsers ask for /favicon.ico on pages without a <link rel="icon"> (JSON, the API).
    path("favicon.ico", views.favicon),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("sso/", include("portal.sso.urls")),  # single sign-on (404 while it is off)
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", views.account, name="account"),
    path("account/tokens/<uuid:pk>/revoke/", views.revoke_token, name="token-revoke"),
    path("", include("quotas.urls")),
    path("", include("discussion.urls")),  # request comments, live progress fragments
    path("mig/", include("mig.urls")),
    path("node-labels/", include("nodelabels.urls")),
    path("telemetry/", include("telemetry.urls")),
    path("", include("notices.urls")),
    path("", include("inventory.urls")),
]

# PostgreSQL or Redis down outside a view (a middleware saving the session): 503, not 500.
handler500 = "portal.outages.server_error"
