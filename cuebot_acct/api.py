"""The JSON API root: /api/v1/, OpenAPI at /api/v1/openapi.json, docs at /api/v1/docs.

Each app contributes one router from its own api.py.
"""
from ninja import NinjaAPI

from accounting.api import router as accounting_router
from shows.api import router as shows_router

api = NinjaAPI(
    title="cuebot-acct",
    version="1",
    description="Cuebot-side accounting for OpenCue's Redis-backed scheduler.",
    urls_namespace="api",
)
api.add_router("/", accounting_router)
api.add_router("/shows", shows_router)
