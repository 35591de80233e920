"""Telemetry pages, mounted at /telemetry/."""

from django.urls import path

from . import views, views_reclaim

app_name = "telemetry"

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("teams/<slug:slug>/", views.team, name="team"),
    path("idle/", views.idle, name="idle"),
    path("reclaim/", views_reclaim.reclaim_page, name="reclaim"),
    path("health/", views.health_list, name="health"),
    path("showback/", views.showback_page, name="showback"),
    path("showback.csv", views.showback_csv, name="showback-csv"),
    path("showback-classes.csv", views.showback_classes_csv, name="showback-classes-csv"),
]
