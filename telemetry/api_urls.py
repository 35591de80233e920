"""REST routes under /api/v1/: agent reports, node agent tokens, latest GPU state."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import api, api_insight

router = SimpleRouter()
router.register("agent/tokens", api.NodeTokenViewSet, basename="nodetoken")
router.register("gpus", api.GpuStateViewSet, basename="gpustate")

urlpatterns = [
    path("agent/reports/", api.receive_report, name="agent-report"),
    path("showback/", api_insight.showback_api, name="showback"),
    path("idle-allocations/", api_insight.idle_api, name="idle-allocations"),
    *router.urls,
]
