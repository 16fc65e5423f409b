"""The URLconf: where the apps' pages and routers are put together (the composition root,
with wsgi.py and asgi.py the only modules of cuebot_acct that import the apps)."""

from django.contrib import admin
from django.urls import path

from accounting.operators import health
from accounting.operators.drift_api import router as drift_router
from accounting.operators.limits_api import router as limits_router
from accounting.operators.pages import drift_index, drift_show, overview, repair_tables, reseed_show
from accounting.operators.release_api import router as release_router
from accounting.operators.shows_api import router as shows_router
from accounting.operators.usage_api import router as usage_router
from accounting.operators.usage_page import usage_page
from infra.api import api

api.add_router("/", release_router)
api.add_router("/", drift_router)
api.add_router("/", limits_router)
api.add_router("/shows", shows_router)
api.add_router("/", usage_router)

# JSON under /api/, Django's pages elsewhere.
handler400 = "infra.api.bad_request"
handler404 = "infra.api.not_found"
handler500 = "infra.api.server_error"

urlpatterns = [
    # First: Django tries the patterns in order at every request, and Cuebot's releases, the most
    # frequent, are under /api/ (no other pattern matches there).
    path("api/v1/", api.urls),
    # The farm overview is the admin's front page: it answers the admin index's URL first.
    path("admin/", admin.site.admin_view(overview), name="acct-overview"),
    path("admin/accounting/drift/", admin.site.admin_view(drift_index), name="acct-drift"),
    path("admin/accounting/drift/<str:show_id>/", admin.site.admin_view(drift_show), name="acct-drift-show"),
    path("admin/accounting/drift/<str:show_id>/reseed/", admin.site.admin_view(reseed_show), name="acct-drift-reseed"),
    path(
        "admin/accounting/drift/<str:show_id>/repair/", admin.site.admin_view(repair_tables), name="acct-drift-repair"
    ),
    path("admin/accounting/usage/", admin.site.admin_view(usage_page), name="acct-usage"),
    path("admin/", admin.site.urls),
    path("metrics", health.metrics, name="metrics"),
    path("healthz", health.healthz, name="healthz"),
]
