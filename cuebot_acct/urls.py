from django.contrib import admin
from django.urls import path

from accounting import views as accounting_views
from cuebot_acct.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("metrics", accounting_views.metrics, name="metrics"),
    path("healthz", accounting_views.healthz, name="healthz"),
]
