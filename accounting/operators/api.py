"""Accounting endpoints under /api/v1/: release, drift, locks and limit changes."""

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, TypeVar

from django.conf import settings
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Field, Router, Schema
from ninja.errors import HttpError
from ninja.schema import DjangoGetter
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    PlainValidator,
    StrictStr,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from accounting.limits.changes import (
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
from accounting.operators.selectors import (
    aged_redis_drift,
    aged_table_drift,
    drift_status,
    named_locks,
    recorded_drift,
    release_names,
    table_drift_status,
    table_repair,
)
from accounting.operators.shows_api import show_or_404
from accounting.reconcile.cuebot_drift import cuebot_table_drift
from accounting.reconcile.drift import drift_report
from accounting.release.types import Release
from accounting.release.unbook import unbook_proc, unbook_procs
from cuebot_acct.api import answered
from cuebot_acct.api_types import (
    AUTH_ERRORS,
    LOOKUP_ERRORS,
    NO_NUL,
    WRITE_ERRORS,
    DbText,
    ErrorOut,
    InvalidOut,
    JsonNumber,
    OutcomeUnknown,
    OutcomeUnknownOut,
    json_int,
    storable,
)
from cuebot_acct.outages import first_line, is_postgresql_outage
from cuebot_acct.permissions import CHANGE_LIMITS, RELEASE_PROCS, VIEW_ACCOUNTING
from shows.models import Show

logger = logging.getLogger(__name__)

router = Router(tags=["accounting"])


# Release path.
MAX_BATCH = 1000


# The release answers' schema (OpenAPI, docs/api.md): plain pydantic models, not ninja Schemas.
# The endpoints build their answers from Release tuples, whose fields are typed already, and
# return them rendered (cuebot_acct.api.answered), not validated again per request: the tests
# hold every kind of answer (released, not found, job gone) to these models.
class ReleaseOut(BaseModel):
    proc_id: str
    host_id: str
    show_id: str
    alloc_id: str
    folder_id: str | None = Field(description="null when the proc's job row was gone at the release")
    job_id: str
    layer_id: str
    dept_id: str | None = Field(description="null when the proc's job row was gone at the release")
    cores_centicores: int = Field(description="Released cores as PostgreSQL stores them (1 core = 100).")
    cores: int = Field(description="Released cores as Redis counts them: per proc, truncated.")
    gpus: int
    memory_kb: int = Field(description="Reserved memory given back, in KB (Cuebot's unit: 4194304 is 4 GiB).")
    gpu_memory_kb: int = Field(description="Reserved GPU memory given back, in KB.")
    branch: Literal["local", "scheduler", "cuebot"]
    names: dict[str, str | None] = Field(
        description='The names of show, alloc, folder, job, layer and dept ("gone" for a row that no longer exists; '
        "null where the id is unknown: folder and dept when the job row was gone)."
    )


# A plain pydantic model too: a ninja Schema wraps its validation for ORM objects, and with
# extra="forbid" validates the body twice (41 µs a batch of 100 ids against 19, issue 43).
class UnbookBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not ignored

    proc_ids: Annotated[
        list[
            Annotated[StrictStr, Field(min_length=1, max_length=36, json_schema_extra=NO_NUL), AfterValidator(storable)]
        ],
        Field(min_length=1, max_length=MAX_BATCH, json_schema_extra={"uniqueItems": True}),
    ]

    @field_validator("proc_ids")
    @classmethod
    def no_duplicates(cls, proc_ids: list[str]) -> list[str]:
        if len(set(proc_ids)) == len(proc_ids):  # the common case, without counting each id
            return proc_ids
        repeated = sorted(p for p, n in Counter(proc_ids).items() if n > 1)
        if repeated:
            raise ValueError(f"proc_ids repeat: {', '.join(repeated)}")
        return proc_ids


class UnbookResult(BaseModel):
    proc_id: str
    status: Literal["released", "not_found"]
    release: ReleaseOut | None = None


class UnbookBatchOut(BaseModel):
    results: list[UnbookResult]


def _release_out(release: Release, names: dict[str, str | None]) -> dict:
    """ReleaseOut's fields, in its order, and nothing else of the Release. The branch is the
    Branch itself, a str enum: orjson writes it as its value, and reading `.value` through the
    enum's descriptor cost a batch of 100 answers a sixth of their building (issue 43)."""
    return {
        "proc_id": release.proc_id,
        "host_id": release.host_id,
        "show_id": release.show_id,
        "alloc_id": release.alloc_id,
        "folder_id": release.folder_id,
        "job_id": release.job_id,
        "layer_id": release.layer_id,
        "dept_id": release.dept_id,
        "cores_centicores": release.cores_centicores,
        "cores": release.cores,
        "gpus": release.gpus,
        "memory_kb": release.memory,
        "gpu_memory_kb": release.gpu_memory,
        "branch": release.branch,
        "names": names,
    }


CUT_OFF = (
    "the release's connection to PostgreSQL was lost before its outcome was known (a restart, a terminated "
    "backend, a failover): it may or may not have been made. Sending the same release again is safe: a proc "
    "already released is answered as not found and credits nothing."
)


@contextmanager
def _cut_off_is_503(*, proc_ids: list[str]) -> Iterator[None]:
    """A release whose PostgreSQL connection was lost raises OutcomeUnknown (503, Retry-After), logged
    at WARNING in one line: an outage, not a bug. Its DELETE may have committed or not, and
    nothing was published or counted unless it did; a retry is a new release, which finds a proc
    the lost one released gone, in every era (docs/api.md, "Errors")."""
    try:
        yield
    except Exception as error:
        if not is_postgresql_outage(error):
            raise
        logger.warning(
            "release of %s cut off from PostgreSQL (%s: %s): answered 503, outcome unknown, a retry is safe",
            proc_ids[0] if len(proc_ids) == 1 else f"{len(proc_ids)} procs from {proc_ids[0]}",
            type(error).__name__,
            first_line(error),
        )
        raise OutcomeUnknown(CUT_OFF) from error


def released_one(*, proc_id: str) -> tuple[int, dict]:
    """The proc released, and the status and answer of its endpoint (404: no such proc). Shared by
    the endpoint and by accounting.operators.release_lane, which serves it ahead of Django."""
    with _cut_off_is_503(proc_ids=[proc_id]):
        release = unbook_proc(proc_id=proc_id)
        if release is None:
            return 404, {"detail": f"no proc {proc_id}"}
        return 200, _release_out(release, release_names(releases=[release])[release.proc_id])


def released_many(*, proc_ids: list[str]) -> dict:
    """The procs released in one transaction, and their endpoint's answer (as released_one)."""
    with _cut_off_is_503(proc_ids=proc_ids):
        releases = unbook_procs(proc_ids=proc_ids)
        names = release_names(releases=[r for r in releases if r is not None])
    return {
        "results": [
            {"proc_id": proc_id, "status": "released", "release": _release_out(release, names[proc_id])}
            if release
            else {"proc_id": proc_id, "status": "not_found", "release": None}
            for proc_id, release in zip(proc_ids, releases, strict=True)
        ]
    }


@router.post(
    "/procs/unbook",
    auth=BearerToken(RELEASE_PROCS),
    response={200: UnbookBatchOut, 422: InvalidOut, 503: OutcomeUnknownOut, **WRITE_ERRORS},
    tags=["release"],
    summary="Release many procs in one transaction",
    description=f"Needs the permission {RELEASE_PROCS}.",
)
def unbook_many(request: HttpRequest, payload: UnbookBatchIn):
    return answered(request, released_many(proc_ids=payload.proc_ids))


@router.post(
    "/procs/{proc_id}/unbook",
    auth=BearerToken(RELEASE_PROCS),
    response={200: ReleaseOut, **LOOKUP_ERRORS, 503: OutcomeUnknownOut, **WRITE_ERRORS},
    tags=["release"],
    summary="Release one proc",
    description=f"Needs the permission {RELEASE_PROCS}.",
)
def unbook_one(request: HttpRequest, proc_id: DbText):
    status, answer = released_one(proc_id=proc_id)
    return answered(request, answer, status=status)


# Reconciliation: drift, locks, limit changes.


# A live drift report reads every key of a show from Redis and SUM(proc) from PostgreSQL:
# one show per request, one at a time per process, so readers cannot slow the release path
# (eight loops on the farm-wide report took release p99 from 10 to 162 ms). The farm-wide
# view is the periodic drift check's last result, computed once for every reader.
_live_drift = threading.Lock()


@router.get(
    "/accounting/drift",
    auth=BearerToken(VIEW_ACCOUNTING),
    response={200: dict[str, Any], 409: ErrorOut, 429: ErrorOut, **LOOKUP_ERRORS, **AUTH_ERRORS},
    summary="Cuebot's tables against SUM(proc), and Redis against PostgreSQL: one show live, or every show "
    "as of the last drift check",
    description=f"Needs the permission {VIEW_ACCOUNTING}. With `show`, read now (one such report at a time "
    "per process: 429 while another runs): `cuebot_tables`, the rows of Cuebot's five tables that "
    "differ from SUM(proc) if Cuebot owns the show's rows (every show in the Maestro era), each "
    "named (`show / allocation`, `show / folder`, `job`, `job / layer`, `show / department`) with "
    "stored, true and difference in cores (a number, 2.5 for a fractional one) and GPUs, and "
    "`repair`, the command that repairs them; in the redis era also that show's Redis keys and "
    "fields beside it. Each drifted row carries `first_seen` (the first periodic check that saw it "
    'drifted), `age_seconds` (from then to now) and `since` ("4.00 cores high since 03:12 UTC (2 h 5 '
    'min)"); null and "not seen drifted by the periodic check yet" for a row no check has seen. '
    "Without, the periodic drift check's last result per show: "
    "`cuebot_tables.shows` (rows drifted), and the Redis fields per scheduler-managed show "
    "in the redis era; and `drifted_rows`, every row the last checks found drifted, oldest first, "
    "each with its `first_seen`, `checked_at` (the last check of its source, which saw it) and `age_seconds` "
    "between them.",
)
def accounting_drift(request, show: DbText | None = None):
    if show is None:
        return _last_check()
    found = show_or_404(show)
    if not _live_drift.acquire(blocking=False):
        raise HttpError(429, "a live drift report is being computed by this process; retry in a second")
    try:
        now = timezone.now()
        redis = (
            aged_redis_drift(report=drift_report(show_ids=[found.id]), now=now)
            if settings.ACCOUNTING_REDIS_ENABLED
            else {}
        )
        tables = aged_table_drift(report=cuebot_table_drift(show_ids=[found.id]), now=now)
        return {**redis, "cuebot_tables": {**tables, "repair": table_repair(show=found.str_name)}}
    finally:
        _live_drift.release()


def _last_check() -> dict[str, Any]:
    status, tables = drift_status(), table_drift_status()
    names = dict(Show.objects.filter(pk__in=[*status.shows, *tables.shows]).values_list("pk", "str_name"))
    return {
        "source": "the periodic drift check (acct-drift-check); ask ?show=NAME for one show now",
        "checked_at": status.checked_at.isoformat() if status.checked_at else None,
        "error": status.error,
        "shows": [
            {"show": names.get(pk, pk), "show_id": pk, "fields_drifted": d.fields, "fields_checked": d.checked}
            for pk, d in sorted(status.shows.items(), key=lambda item: names.get(item[0], item[0]))
        ],
        "cuebot_tables": {
            "checked_at": tables.checked_at.isoformat() if tables.checked_at else None,
            "shows": [
                {"show": names.get(pk, pk), "show_id": pk, "rows_drifted": rows}
                for pk, rows in sorted(tables.shows.items(), key=lambda item: names.get(item[0], item[0]))
            ],
        },
        "drifted_rows": [row.as_dict() for row in recorded_drift()],
    }


@router.get(
    "/locks",
    auth=BearerToken(VIEW_ACCOUNTING),
    response={200: list[dict[str, Any]], **AUTH_ERRORS},
    summary="Named locks currently held",
    description=f"Needs the permission {VIEW_ACCOUNTING}. The Redis leases where there is an accounting Redis "
    "(`ttl_ms`, the time left), and recalculate_subs's PostgreSQL lock where there is none (`ttl_ms` null: it "
    "ends with its holder's transaction; `owner` names the backend).",
)
def locks(request):
    return [{"name": lock.name, "owner": lock.owner, "ttl_ms": lock.ttl_ms} for lock in named_locks()]


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


T = TypeVar("T")


def _limited(change: Callable[[], T]) -> T:
    try:
        return change()
    except InvalidLimit as error:
        raise HttpError(422, str(error)) from error


@router.patch(
    "/accounting/subscriptions/{subscription_id}/limits",
    auth=BearerToken(CHANGE_LIMITS),
    response={200: SubscriptionLimitsOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    summary="Set size/burst (cores)",
    description=LIMITS_DESCRIPTION,
)
def patch_subscription_limits(request, subscription_id: DbText, payload: SubscriptionLimitsIn):
    subscription = get_object_or_404(Subscription, pk=subscription_id)
    values = _centicores(payload, model=Subscription, cores=("size", "burst"))
    sub = _limited(lambda: set_subscription_limits(subscription=subscription, **values))
    return {"id": sub.id, "limits": {"size": cores_number(sub.int_size), "burst": cores_number(sub.int_burst)}}


@router.patch(
    "/accounting/folders/{folder_id}/limits",
    auth=BearerToken(CHANGE_LIMITS),
    response={200: FolderLimitsOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    summary="Set folder caps (cores, -1 unlimited)",
    description=LIMITS_DESCRIPTION,
)
def patch_folder_limits(request, folder_id: DbText, payload: FolderLimitsIn):
    resource = get_object_or_404(FolderResource, folder_id=folder_id)
    values = _centicores(payload, model=FolderResource, cores=("min_cores", "max_cores"))
    folder = _limited(lambda: set_folder_limits(folder_resource=resource, **values))
    return {
        "folder_id": folder.folder_id,
        "limits": {
            "min_cores": cores_number(folder.int_min_cores),
            "max_cores": cores_number(folder.int_max_cores),
            "min_gpus": folder.int_min_gpus,
            "max_gpus": folder.int_max_gpus,
        },
    }


@router.patch(
    "/accounting/jobs/{job_id}/limits",
    auth=BearerToken(CHANGE_LIMITS),
    response={200: JobLimitsOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    summary="Set job caps (cores)",
    description=LIMITS_DESCRIPTION,
)
def patch_job_limits(request, job_id: DbText, payload: JobLimitsIn):
    resource = get_object_or_404(JobResource, job_id=job_id)
    values = _centicores(payload, model=JobResource, cores=("max_cores",))
    job = _limited(lambda: set_job_limits(job_resource=resource, **values))
    return {
        "job_id": job.job_id,
        "limits": {
            "max_cores": cores_number(job.int_max_cores),
            "max_gpus": job.int_max_gpus,
            "priority": job.int_priority,
        },
    }


@router.patch(
    "/accounting/points/{point_id}/limits",
    auth=BearerToken(CHANGE_LIMITS),
    response={200: PointLimitsOut, **LOOKUP_ERRORS, **WRITE_ERRORS},
    summary="Set point minimums (cores)",
    description=LIMITS_DESCRIPTION,
)
def patch_point_limits(request, point_id: DbText, payload: PointLimitsIn):
    point = get_object_or_404(Point, pk=point_id)
    values = _centicores(payload, model=Point, cores=("min_cores",))
    point = _limited(lambda: set_point_limits(point=point, **values))
    return {"id": point.id, "limits": {"min_cores": cores_number(point.int_min_cores), "min_gpus": point.int_min_gpus}}
