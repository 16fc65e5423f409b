"""The JSON API root: /api/v1/, OpenAPI at /api/v1/openapi.json, docs at /api/v1/docs.

Each app contributes one router from its own api.py.
"""
import json

from ninja import NinjaAPI
from ninja.errors import HttpError

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


@api.exception_handler(HttpError)
def http_error(request, exc: HttpError):
    # django-ninja answers a body that is not JSON with 400; for this API malformed input
    # is unprocessable like any other invalid body: 422 with a JSON detail.
    if exc.status_code == 400 and isinstance(exc.__cause__, json.JSONDecodeError):
        return api.create_response(request, {"detail": f"malformed JSON body: {exc.__cause__}"}, status=422)
    return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)
