"""Comment forms and live progress fragments of the request pages (mounted at /)."""

from django.urls import path

from . import views

app_name = "discussion"

urlpatterns = [
    path("requests/<uuid:pk>/comments/", views.quota_comment, name="request-comment"),
    path("requests/<uuid:pk>/progress/", views.quota_progress, name="request-progress"),
    path("mig/requests/<uuid:pk>/comments/", views.mig_comment, name="mig-request-comment"),
    path("mig/requests/<uuid:pk>/progress/", views.mig_progress, name="mig-request-progress"),
]
