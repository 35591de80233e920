from django.urls import path

from . import views, views_classes

app_name = "inventory"

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("nodes/", views.node_list, name="nodes"),
    path("nodes/<uuid:pk>/", views.node_detail, name="node"),
    path("clusters/", views.cluster_list, name="clusters"),
    path("connect-cluster/", views.cluster_connect, name="cluster-connect"),
    path("clusters/<slug:slug>/", views.cluster_detail, name="cluster"),
    path("clusters/<slug:slug>/edit/", views.cluster_edit, name="cluster-edit"),
    path("clusters/<slug:slug>/preflight/", views.cluster_preflight, name="cluster-preflight"),
    path("clusters/<slug:slug>/sync/", views.cluster_sync, name="cluster-sync"),
    path("gpu-classes/", views_classes.class_list, name="classes"),
    path("gpu-classes/new/", views_classes.class_new, name="class-new"),
    path("gpu-classes/<uuid:pk>/edit/", views_classes.class_edit, name="class-edit"),
    path("gpu-classes/<uuid:pk>/delete/", views_classes.class_delete, name="class-delete"),
]
