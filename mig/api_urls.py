"""All MIG routes under /api/v1/: the catalog and layout validation, and MIG requests."""

from .api_catalog import urlpatterns as catalog
from .api_requests import urlpatterns as requests

urlpatterns = [*catalog, *requests]
