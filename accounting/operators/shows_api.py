"""Show endpoints under /api/v1/shows."""

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.errors import HttpError
from pydantic import ConfigDict, StrictBool

from accounting.operators.auth import BearerToken
from accounting.ownership.switching import SwitchRefused
from accounting.ownership.toggle import OWNERSHIP_TOGGLE, set_scheduler_managed
from infra.api_types import AUTH_ERRORS, LOOKUP_ERRORS, WRITE_ERRORS, DbText, ErrorOut
from infra.permissions import CHANGE_OWNERSHIP, VIEW_ACCOUNTING
from infra.writes import writes
from shows.models import Show
from shows.selectors import ShowNameUnusable, list_shows, show_named

router = Router(tags=["shows"])


class ShowOut(Schema):
    id: str
    name: str
    scheduler_managed: bool
    active: bool

    @staticmethod
    def of(show: Show) -> "ShowOut":
        return ShowOut(id=show.id, name=show.str_name, scheduler_managed=show.b_scheduler_managed, active=show.b_active)


class ManagedIn(Schema):
    model_config = ConfigDict(extra="forbid")
    managed: StrictBool


class ManagedOut(Schema):
    name: str
    old: bool
    new: bool


def show_or_404(name: str) -> Show:
    try:
        return show_named(name=name)
    except ShowNameUnusable as error:
        raise HttpError(409 if error.several else 404, str(error)) from None


@router.get(
    "",
    auth=BearerToken(VIEW_ACCOUNTING),
    response={200: list[ShowOut], **AUTH_ERRORS},
    summary="Shows with their ownership flag",
    description=f"Needs the permission {VIEW_ACCOUNTING}.",
)
def shows(request: HttpRequest):
    return [ShowOut.of(show) for show in list_shows()]


@router.get(
    "/{name}",
    auth=BearerToken(VIEW_ACCOUNTING),
    response={200: ShowOut, 409: ErrorOut, **LOOKUP_ERRORS, **AUTH_ERRORS},
    summary="One show with its ownership flag",
    description=f"Needs the permission {VIEW_ACCOUNTING}.",
)
def show(request: HttpRequest, name: DbText):
    return ShowOut.of(show_or_404(name))


@router.put(
    "/{name}/scheduler-managed",
    response={200: ManagedOut, 409: ErrorOut, 503: ErrorOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    auth=BearerToken(CHANGE_OWNERSHIP),
    summary="Move a show to the scheduler (true) or back to Cuebot (false)",
    description=f"Needs the permission {CHANGE_OWNERSHIP}.",
)
@writes(OWNERSHIP_TOGGLE)
def put_scheduler_managed(request: HttpRequest, name: DbText, payload: ManagedIn):
    try:
        old, new = set_scheduler_managed(show=show_or_404(name), managed=payload.managed)
    except SwitchRefused as error:
        raise HttpError(503, str(error)) from None
    return ManagedOut(name=name, old=old, new=new)
