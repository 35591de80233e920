"""Pages under /node-labels/."""

from django.urls import path

from . import views

app_name = "nodelabels"

urlpatterns = [
    path("", views.label_set_list, name="list"),
    path("new/", views.label_set_new, name="new"),
    path("<uuid:pk>/edit/", views.label_set_edit, name="edit"),
    path("<uuid:pk>/delete/", views.label_set_delete, name="delete"),
]
