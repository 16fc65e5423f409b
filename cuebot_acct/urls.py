from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import path

from accounting.metrics import render
from cuebot_acct.api import api


def metrics(request: HttpRequest) -> HttpResponse:
    body, content_type = render()
    return HttpResponse(body, content_type=content_type)


urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("metrics", metrics),
]
