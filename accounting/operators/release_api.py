"""Release endpoints under /api/v1/: one proc, or many in one transaction (the release lane serves
the same answers ahead of Django)."""

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Literal

from django.http import HttpRequest
from ninja import Field, Router
from pydantic import AfterValidator, BaseModel, ConfigDict, StrictStr, field_validator

from accounting.operators.auth import BearerToken
from accounting.operators.names import release_names
from accounting.release.types import Release
from accounting.release.unbook import RELEASE, unbook_proc, unbook_procs
from infra.api import answered
from infra.api_types import (
    LOOKUP_ERRORS,
    NO_NUL,
    WRITE_ERRORS,
    DbText,
    InvalidOut,
    OutcomeUnknown,
    OutcomeUnknownOut,
    storable,
)
from infra.outages import first_line, is_postgresql_outage
from infra.permissions import RELEASE_PROCS
from infra.writes import writes

logger = logging.getLogger(__name__)

router = Router(tags=["accounting"])


# Release path.
MAX_BATCH = 1000


# The release answers' schema (OpenAPI, docs/api.md): plain pydantic models, not ninja Schemas.
# The endpoints build their answers from Release tuples, whose fields are typed already, and
# return them rendered (infra.api.answered), not validated again per request: the tests
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
@writes(RELEASE)
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
@writes(RELEASE)
def unbook_one(request: HttpRequest, proc_id: DbText):
    status, answer = released_one(proc_id=proc_id)
    return answered(request, answer, status=status)
