from django.contrib import admin
from django.urls import path

from cuebot_acct.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
