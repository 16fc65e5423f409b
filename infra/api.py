"""The JSON API root: /api/v1/, OpenAPI at /api/v1/openapi.json, docs at /api/v1/docs.

The endpoints' routers are attached by the URLconf (cuebot_acct.urls), so this root imports
no app. Every error the API answers is JSON `{"detail": ...}`: validation (422), a missing permission (403, also naming it), an
oversized body (413), a release cut off from its database (503, with Retry-After) and an
unexpected failure (500) included; paths under /api/ that match no endpoint answer a JSON 404
(cuebot_acct.urls).
"""

import json
import logging
from typing import Any

import orjson
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from ninja import NinjaAPI, Swagger
from ninja.errors import HttpError
from ninja.parser import Parser
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder

from infra.api_types import JsonNumber, MissingPermission, NotJson, OutcomeUnknown
from infra.writes import WritesOff

log = logging.getLogger(__name__)


class JsonOnly(Parser):
    """A body is read only when it says it is JSON: a form or text/plain is refused (415), not
    guessed at. A number with a fraction or an exponent is kept as written (JsonNumber), not
    rounded into a float, so `2.675` cores is refused as too fine rather than read as 2.67."""

    def parse_body(self, request: HttpRequest):
        if request.content_type != "application/json":
            raise NotJson(request.content_type)
        return parsed_json(request.body)


def parsed_json(body: bytes) -> Any:
    """A JSON body as the API reads it (JsonOnly; accounting.operators.release_lane too)."""
    return json.loads(body, parse_float=JsonNumber)


class OrjsonRenderer(JSONRenderer):
    """ninja's JSON renderer, written by orjson: the answer of a batch of 100 releases took
    459 µs through json.dumps and ninja's encoder, 35 µs through orjson (issue 35). What orjson
    does not write itself goes to ninja's encoder (a Decimal, a URL, a pydantic model), and so do
    datetimes, so that they keep Django's format (milliseconds, `Z`). A dict key that is not a
    string is written as json.dumps writes it (orjson refuses one unless told)."""

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return rendered(data)


_fallback = NinjaJSONEncoder().default
_options = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS


def rendered(data: Any) -> bytes:
    """An answer's body as the API writes every answer (OrjsonRenderer).

    Written first without OPT_NON_STR_KEYS, which only changes how a key that is not a str is
    written (refused without it) and made orjson take 85 µs for a batch of 100 release answers
    against 49 (issue 43); an answer that has such a key, or that orjson refuses for any other
    reason, is written again with it, as before."""
    try:
        return orjson.dumps(data, default=_fallback, option=orjson.OPT_PASSTHROUGH_DATETIME)
    except orjson.JSONEncodeError:
        return orjson.dumps(data, default=_fallback, option=_options)


api = NinjaAPI(
    parser=JsonOnly(),
    renderer=OrjsonRenderer(),
    title="cuebot-acct",
    version="1",
    description="Cuebot-side accounting for OpenCue's Redis-backed scheduler.",
    urls_namespace="api",
    # Swagger UI would send the schema to validator.swagger.io: the docs must work air-gapped.
    docs=Swagger(settings={"validatorUrl": None}),
)


def answered(request: HttpRequest, data: Any, *, status: int = 200) -> HttpResponse:
    """An answer rendered as every answer of the API is, for an endpoint that builds its answer
    from values already typed and returns it as is: ninja would validate it against the
    endpoint's response schema on every request (1.4 ms for a batch of 100 releases, more than
    its rendering), where the tests hold the endpoint's answers to that schema once."""
    return api.create_response(request, data, status=status)


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # django-ninja answers a body it cannot parse (not JSON, not UTF-8) with 400; for this
    # API malformed input is unprocessable like any other invalid body: 422 with a JSON detail.
    if exc.status_code == 400 and isinstance(exc.__cause__, NotJson):
        return api.create_response(request, {"detail": str(exc.__cause__)}, status=415)
    if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
        return api.create_response(request, {"detail": f"the body is not UTF-8: {exc.__cause__}"}, status=422)
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):
        return api.create_response(request, {"detail": f"malformed JSON body: {exc.__cause__}"}, status=422)
    if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
        return api.create_response(request, {"detail": "malformed JSON body: nested too deeply"}, status=422)
    status, body, headers = error_answer(exc)
    response = api.create_response(request, body, status=status)
    for name, value in headers:
        response[name] = value
    if isinstance(exc, OutcomeUnknown):
        # Logged at WARNING where it was raised, with its cause; Django would add an ERROR line for
        # any 5xx (django.utils.log.log_response, which skips a response marked so).
        response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def error_answer(exc: HttpError | WritesOff) -> tuple[int, dict, list[tuple[str, str]]]:
    """The status and body of the API's answer to what an endpoint raised (an HttpError, an
    observer's WritesOff), and the headers it adds after Content-Type: http_error and writes_off
    answer with them, and so does accounting.operators.release_lane."""
    if isinstance(exc, WritesOff):
        # 403 as for a token's missing permission: asking again changes nothing until an operator
        # does; `setting` tells the two apart, and `grant` says what the operator would give.
        return 403, {"detail": str(exc), "setting": "ACCOUNTING_WRITES", "grant": exc.grant}, []
    body: dict[str, Any] = {"detail": str(exc)}
    if isinstance(exc, MissingPermission):
        body["permission"] = exc.permission
    if isinstance(exc, OutcomeUnknown):
        body |= {"outcome": "unknown", "retry": "safe"}
        return exc.status_code, body, [("Retry-After", str(exc.retry_after))]
    return exc.status_code, body, []


@api.exception_handler(WritesOff)
def writes_off(request: HttpRequest, exc: WritesOff) -> HttpResponse:
    status, body, _ = error_answer(exc)
    return api.create_response(request, body, status=status)


@api.exception_handler(RequestDataTooBig)
def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Django would answer 400 with an HTML page; the size is DATA_UPLOAD_MAX_MEMORY_SIZE.
    return api.create_response(request, {"detail": f"request body too large: {exc}"}, status=413)


INTERNAL_ERROR = "internal server error; see the service's log"


def log_unexpected(*, method: str | None, path: str, error: Exception) -> None:
    log.error("unexpected error on %s %s", method, path, exc_info=error)


@api.exception_handler(Exception)
def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    log_unexpected(method=request.method, path=request.path, error=exc)
    return api.create_response(request, {"detail": INTERNAL_ERROR}, status=500)


def _under_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


class JsonErrorsUnderApi:
    """Middleware: an error answered under /api/ by Django itself rather than an endpoint
    (405 for a method the path does not take, a 400 from request parsing) is JSON with a
    `detail`, like every other answer there. Errors the server in front answers (gunicorn's
    431 for oversized headers) never reach Django."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            _under_api(request)
            and response.status_code >= 400
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            detail = (
                f"method {request.method} not allowed here" if response.status_code == 405 else response.reason_phrase
            )
            json_response = JsonResponse({"detail": detail}, status=response.status_code)
            if response.has_header("Allow"):
                json_response["Allow"] = response["Allow"]
            return json_response
        return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's handler404: JSON for a path under /api/ that matches no endpoint."""
    if _under_api(request):
        return JsonResponse({"detail": f"no endpoint {request.path}"}, status=404)
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's handler400 (what it answers to an oversized body outside an endpoint, too)."""
    if _under_api(request):
        return JsonResponse({"detail": f"bad request: {exception}"}, status=400)
    return defaults.bad_request(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's handler500, for a failure outside an endpoint (a middleware, the URL resolver)."""
    if _under_api(request):
        return JsonResponse({"detail": INTERNAL_ERROR}, status=500)
    return defaults.server_error(request)
