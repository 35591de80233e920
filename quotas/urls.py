from django.urls import path

from . import views

app_name = "quotas"

urlpatterns = [
    path("requests/<uuid:pk>/", views.request_detail, name="request"),
]
