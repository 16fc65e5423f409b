"""Limit endpoints under /api/v1/accounting/: a subscription's, a folder's, a job's and a point's
limits set in cores and counts."""

from collections.abc import Callable
from typing import Annotated, Any

from django.db.models import Model
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema
from ninja.errors import HttpError
from ninja.schema import DjangoGetter
from pydantic import ConfigDict, PlainValidator, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from accounting.limits.changes import (
    LIMIT_CHANGES,
    UNLIMITED_ALLOWED,
    WHOLE_CORES_COLUMNS,
    InvalidLimit,
    column_max,
    set_folder_limits,
    set_job_limits,
    set_point_limits,
    set_subscription_limits,
)
from accounting.live.units import CoresRefused, cores_number, cores_text, not_a_number, parse_cores
from accounting.models import FolderResource, JobResource, Point, Subscription
from accounting.operators.auth import BearerToken
from infra.api_types import LOOKUP_ERRORS, WRITE_ERRORS, DbText, JsonNumber, json_int
from infra.permissions import CHANGE_LIMITS
from infra.writes import writes

router = Router(tags=["accounting"])


def _typed_cores(value: object, *, unlimited: bool, maximum: int, whole: bool) -> int:
    """A cores field's JSON value to centicores by the policy every face shares
    (accounting.live.units.parse_cores): a JSON number as the client wrote it; a string, a
    boolean or null is no number of cores."""
    if isinstance(value, JsonNumber):
        return parse_cores(text=value.text, unlimited=unlimited, maximum=maximum, whole=whole)
    if isinstance(value, int) and not isinstance(value, bool):
        return parse_cores(text=str(value), unlimited=unlimited, maximum=maximum, whole=whole)
    raise not_a_number(unlimited=unlimited)


def _schema_maximum(centicores: int) -> int | float:
    """The column's maximum in cores as the schema states it: exact where a JSON double holds
    it (every integer column, a size), else the whole cores below (a burst's bigint)."""
    exact = cores_number(centicores)
    return exact if cores_text(centicores) == f"{exact}".removesuffix(".0") else centicores // 100


def _limit(model: type, column: str, *, cores: bool) -> Any:
    """An optional limit bounded by its column. Cores: a JSON number with at most two decimals
    (the column holds hundredths), read by _typed_cores and refused with the admin's and the
    commands' message; counts: a JSON integer (not true or "5"). -1 (unlimited) only where
    Cuebot reads it so (UNLIMITED_ALLOWED)."""
    top = column_max(model=model, column=column)
    unlimited, whole = (model, column) in UNLIMITED_ALLOWED, (model, column) in WHOLE_CORES_COLUMNS
    if not cores:
        description = (
            "count, -1 for unlimited"
            if unlimited
            else "count, >= 0 (-1 is no unlimited here: Cuebot compares it as a number)"
        )
        return Annotated[json_int(ge=-1 if unlimited else 0, le=top) | None, Field(description=description)]

    def check(value: object) -> object:
        # Checked here, for a 422 naming the field; converted by the endpoint. The value is
        # returned as sent because ninja may validate the body twice.
        try:
            _typed_cores(value, unlimited=unlimited, maximum=top, whole=whole)
        except CoresRefused as refused:
            raise PydanticCustomError("cores", "{reason}", {"reason": str(refused)}) from None
        return value

    description = "cores, up to two decimals (2.5, 0.25); " + (
        "-1 for unlimited" if unlimited else ">= 0 (-1 is no unlimited here: Cuebot compares it as a number)"
    )
    schema = {"type": "number", "minimum": -1 if unlimited else 0, "maximum": _schema_maximum(top)}
    return Annotated[
        Annotated[object, PlainValidator(check), WithJsonSchema(schema)] | None, Field(description=description)
    ]


class LimitsIn(Schema):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def an_object(cls, data):
        # ninja reads attributes off any value, so a list or a number would validate as "no
        # change". With extra="forbid" ninja validates the body as parsed first (checked
        # here), then again wrapped in its DjangoGetter.
        if not isinstance(data, dict | DjangoGetter):
            raise ValueError("the body must be a JSON object")
        return data


# The limit fields' types are built at import from their columns' bounds (_limit): pydantic reads the
# Annotated types built, mypy cannot evaluate a call as a type: those lines alone ignore valid-type.
class SubscriptionLimitsIn(LimitsIn):
    size: _limit(Subscription, "int_size", cores=True) = None  # type: ignore[valid-type]
    burst: _limit(Subscription, "int_burst", cores=True) = None  # type: ignore[valid-type]


class FolderLimitsIn(LimitsIn):
    min_cores: _limit(FolderResource, "int_min_cores", cores=True) = None  # type: ignore[valid-type]
    max_cores: _limit(FolderResource, "int_max_cores", cores=True) = None  # type: ignore[valid-type]
    min_gpus: _limit(FolderResource, "int_min_gpus", cores=False) = None  # type: ignore[valid-type]
    max_gpus: _limit(FolderResource, "int_max_gpus", cores=False) = None  # type: ignore[valid-type]


class JobLimitsIn(LimitsIn):
    max_cores: _limit(JobResource, "int_max_cores", cores=True) = None  # type: ignore[valid-type]
    max_gpus: _limit(JobResource, "int_max_gpus", cores=False) = None  # type: ignore[valid-type]
    priority: _limit(JobResource, "int_priority", cores=False) = None  # type: ignore[valid-type]


class PointLimitsIn(LimitsIn):
    min_cores: _limit(Point, "int_min_cores", cores=True) = None  # type: ignore[valid-type]
    min_gpus: _limit(Point, "int_min_gpus", cores=False) = None  # type: ignore[valid-type]


# Cores only: centicores are PostgreSQL's storage, and an answer that carried both invited a
# script to read the wrong one (a size of 16000 for 160 cores).
LIMITS_IN_CORES = Field(
    description="The limits as they are now, in the units they are set in: cores (a number, "
    "2.5 for a fractional one; -1 unlimited), GPUs and priorities as counts."
)


class SubscriptionLimitsOut(Schema):
    id: str
    limits: dict[str, int | float] = LIMITS_IN_CORES


class FolderLimitsOut(Schema):
    folder_id: str
    limits: dict[str, int | float] = LIMITS_IN_CORES


class JobLimitsOut(Schema):
    job_id: str
    limits: dict[str, int | float] = LIMITS_IN_CORES


class PointLimitsOut(Schema):
    id: str
    limits: dict[str, int | float] = LIMITS_IN_CORES


LIMITS_DESCRIPTION = (
    f"Needs the permission {CHANGE_LIMITS}. A value beyond its column's range, an unknown field or a "
    "body that is not a JSON object is a 422 naming the field; nothing changes."
)


def _centicores(payload: Schema, *, model: type, cores: tuple[str, ...]) -> dict[str, int | None]:
    """The body's values in PG units: each cores field (option `x` is column `int_x`) to
    centicores, as its validator checked it; counts as they are."""
    values = payload.dict()
    for name in cores:
        if values[name] is not None:
            column = f"int_{name}"
            values[name] = _typed_cores(
                values[name],
                unlimited=(model, column) in UNLIMITED_ALLOWED,
                maximum=column_max(model=model, column=column),
                whole=(model, column) in WHOLE_CORES_COLUMNS,
            )
    return values


def _changed(model: type[Model], key: dict, payload: Schema, change: Callable, *, cores: tuple[str, ...]):
    """The row (404 if none) after `change` set its limits from the body in PG units (422 if refused)."""
    row: Model = get_object_or_404(model, **key)
    try:
        # Each service takes its row by its table's name (subscription=, folder_resource=, ...).
        return change(**{model._meta.db_table: row}, **_centicores(payload, model=model, cores=cores))
    except InvalidLimit as error:
        raise HttpError(422, str(error)) from error


def _limits(row, *, cores: tuple[str, ...], counts: tuple[str, ...] = ()) -> dict[str, int | float]:
    """The row's limits as the answer gives them: option `x` is column `int_x`; cores in cores."""
    return {
        **{name: cores_number(getattr(row, f"int_{name}")) for name in cores},
        **{n: getattr(row, f"int_{n}") for n in counts},
    }


@router.patch(
    "/accounting/subscriptions/{subscription_id}/limits",
    auth=BearerToken(CHANGE_LIMITS),
    response={200: SubscriptionLimitsOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    summary="Set size/burst (cores)",
    description=LIMITS_DESCRIPTION,
)
@writes(LIMIT_CHANGES["subscription"])
def patch_subscription_limits(request, subscription_id: DbText, payload: SubscriptionLimitsIn):
    cores = ("size", "burst")
    sub = _changed(Subscription, {"pk": subscription_id}, payload, set_subscription_limits, cores=cores)
    return {"id": sub.id, "limits": _limits(sub, cores=cores)}


@router.patch(
    "/accounting/folders/{folder_id}/limits",
    auth=BearerToken(CHANGE_LIMITS),
    response={200: FolderLimitsOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    summary="Set folder caps (cores, -1 unlimited)",
    description=LIMITS_DESCRIPTION,
)
@writes(LIMIT_CHANGES["folder_resource"])
def patch_folder_limits(request, folder_id: DbText, payload: FolderLimitsIn):
    cores = ("min_cores", "max_cores")
    folder = _changed(FolderResource, {"folder_id": folder_id}, payload, set_folder_limits, cores=cores)
    return {"folder_id": folder.folder_id, "limits": _limits(folder, cores=cores, counts=("min_gpus", "max_gpus"))}


@router.patch(
    "/accounting/jobs/{job_id}/limits",
    auth=BearerToken(CHANGE_LIMITS),
    response={200: JobLimitsOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    summary="Set job caps (cores)",
    description=LIMITS_DESCRIPTION,
)
@writes(LIMIT_CHANGES["job_resource"])
def patch_job_limits(request, job_id: DbText, payload: JobLimitsIn):
    cores = ("max_cores",)
    job = _changed(JobResource, {"job_id": job_id}, payload, set_job_limits, cores=cores)
    return {"job_id": job.job_id, "limits": _limits(job, cores=cores, counts=("max_gpus", "priority"))}


@router.patch(
    "/accounting/points/{point_id}/limits",
    auth=BearerToken(CHANGE_LIMITS),
    response={200: PointLimitsOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    summary="Set point minimums (cores)",
    description=LIMITS_DESCRIPTION,
)
@writes(LIMIT_CHANGES["point"])
def patch_point_limits(request, point_id: DbText, payload: PointLimitsIn):
    cores = ("min_cores",)
    point = _changed(Point, {"pk": point_id}, payload, set_point_limits, cores=cores)
    return {"id": point.id, "limits": _limits(point, cores=cores, counts=("min_gpus",))}
