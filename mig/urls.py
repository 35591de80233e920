"""MIG pages, mounted at /mig/."""

from django.urls import path

from . import views

app_name = "mig"

urlpatterns = [
    path("", views.index, name="index"),
    path("nodes/<uuid:pk>/", views.node_view, name="node"),
    path("requests/", views.request_list, name="requests"),
    path("requests/new/", views.request_new, name="request-new"),
    path("requests/<uuid:pk>/", views.request_detail, name="request"),
    path("requests/<uuid:pk>/approve/", views.request_approve, name="request-approve"),
    path("requests/<uuid:pk>/reject/", views.request_reject, name="request-reject"),
    path("requests/<uuid:pk>/cancel/", views.request_cancel, name="request-cancel"),
    path("requests/<uuid:pk>/revert/", views.request_revert, name="request-revert"),
]
