"""REST routes under /api/v1/: label sets."""

from rest_framework.routers import SimpleRouter

from .api import LabelSetViewSet

router = SimpleRouter()
router.register("label-sets", LabelSetViewSet, basename="labelset")

urlpatterns = router.urls
