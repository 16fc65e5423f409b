"""Accounting endpoints under /api/v1/."""
from ninja import Router

router = Router(tags=["accounting"])


# --- Release path -------------------------------------------------------------------
from typing import Annotated, Literal  # noqa: E402

from django.http import HttpRequest  # noqa: E402
from ninja import Field, Schema, Status  # noqa: E402
from pydantic import StrictStr, field_validator  # noqa: E402

from accounting.auth import BearerToken  # noqa: E402
from accounting.services import Release, unbook_proc, unbook_procs  # noqa: E402

MAX_BATCH = 1000


class ReleaseOut(Schema):
    proc_id: str
    host_id: str
    show_id: str
    alloc_id: str
    folder_id: str
    job_id: str
    layer_id: str
    dept_id: str
    cores_centicores: int = Field(description="Released cores as PostgreSQL stores them (1 core = 100).")
    cores: int = Field(description="Released cores as Redis counts them: per proc, truncated.")
    gpus: int
    memory: int = Field(description="KB")
    gpu_memory: int = Field(description="KB")
    branch: Literal["local", "scheduler", "cuebot"]


class ErrorOut(Schema):
    detail: str


class UnbookBatchIn(Schema):
    proc_ids: Annotated[list[Annotated[StrictStr, Field(min_length=1, max_length=36)]], Field(min_length=1, max_length=MAX_BATCH)]

    @field_validator("proc_ids")
    @classmethod
    def no_duplicates(cls, proc_ids: list[str]) -> list[str]:
        seen: set[str] = set()
        repeated = sorted({p for p in proc_ids if p in seen or seen.add(p)})
        if repeated:
            raise ValueError(f"proc_ids repeat: {', '.join(repeated)}")
        return proc_ids


class UnbookResult(Schema):
    proc_id: str
    status: Literal["released", "not_found"]
    release: ReleaseOut | None = None


class UnbookBatchOut(Schema):
    results: list[UnbookResult]


def _release_out(release: Release) -> dict:
    return {**release.__dict__, "branch": release.branch.value}


@router.post(
    "/procs/unbook", auth=BearerToken(), response={200: UnbookBatchOut}, tags=["release"],
    summary="Release many procs in one transaction",
)
def unbook_many(request: HttpRequest, payload: UnbookBatchIn):
    releases = unbook_procs(proc_ids=payload.proc_ids)
    return {
        "results": [
            {"proc_id": proc_id, "status": "released", "release": _release_out(release)} if release
            else {"proc_id": proc_id, "status": "not_found"}
            for proc_id, release in zip(payload.proc_ids, releases, strict=True)
        ]
    }


@router.post(
    "/procs/{proc_id}/unbook", auth=BearerToken(), response={200: ReleaseOut, 404: ErrorOut}, tags=["release"],
    summary="Release one proc",
)
def unbook_one(request: HttpRequest, proc_id: str):
    release = unbook_proc(proc_id=proc_id)
    if release is None:
        return Status(404, {"detail": f"no proc {proc_id}"})
    return Status(200, _release_out(release))
