"""Accounting endpoints under /api/v1/."""
from ninja import Router

router = Router(tags=["accounting"])


# --- Reconciliation: drift, locks, limit changes ---
from django.shortcuts import get_object_or_404  # noqa: E402
from ninja import Schema  # noqa: E402
from ninja.errors import HttpError  # noqa: E402

from accounting.auth import BearerToken  # noqa: E402
from accounting.drift import drift_report, show_by_name  # noqa: E402
from accounting.limits import (  # noqa: E402
    InvalidLimit, set_folder_limits, set_job_limits, set_point_limits, set_subscription_limits,
)
from accounting.locks import held_locks  # noqa: E402
from accounting.models import FolderResource, JobResource, Point, Subscription  # noqa: E402
from accounting.units import centicores_from_cores  # noqa: E402


@router.get("/accounting/drift", summary="Redis against PostgreSQL for scheduler-managed shows")
def accounting_drift(request, show: str | None = None):
    show_ids = None
    if show is not None:
        found = show_by_name(name=show)
        if found is None:
            raise HttpError(404, f"unknown show {show!r}")
        show_ids = [found.id]
    return drift_report(show_ids=show_ids).as_dict()


@router.get("/locks", summary="Named locks currently held")
def locks(request):
    return [{"name": lock.name, "owner": lock.owner, "ttl_ms": lock.ttl_ms} for lock in held_locks()]


class SubscriptionLimitsIn(Schema):
    size: int | None = None  # cores
    burst: int | None = None


class FolderLimitsIn(Schema):
    min_cores: int | None = None
    max_cores: int | None = None
    min_gpus: int | None = None
    max_gpus: int | None = None


class JobLimitsIn(Schema):
    max_cores: int | None = None
    max_gpus: int | None = None
    priority: int | None = None


class PointLimitsIn(Schema):
    min_cores: int | None = None
    min_gpus: int | None = None


def _centicores(payload: Schema, names: tuple[str, ...]) -> dict[str, int | None]:
    """Operator cores to PG centicores; 422 for a bad value, before anything changes."""
    values = payload.dict()
    try:
        return {k: centicores_from_cores(v) if k in names and v is not None else v for k, v in values.items()}
    except ValueError as error:
        raise HttpError(422, str(error)) from error


def _limited(change) -> dict:
    try:
        return change()
    except InvalidLimit as error:
        raise HttpError(422, str(error)) from error


@router.patch("/accounting/subscriptions/{subscription_id}/limits", auth=BearerToken(), summary="Set size/burst (cores)")
def patch_subscription_limits(request, subscription_id: str, payload: SubscriptionLimitsIn):
    subscription = get_object_or_404(Subscription, pk=subscription_id)
    values = _centicores(payload, ("size", "burst"))
    sub = _limited(lambda: set_subscription_limits(subscription=subscription, **values))
    return {"id": sub.id, "int_size": sub.int_size, "int_burst": sub.int_burst}


@router.patch("/accounting/folders/{folder_id}/limits", auth=BearerToken(), summary="Set folder caps (cores, -1 unlimited)")
def patch_folder_limits(request, folder_id: str, payload: FolderLimitsIn):
    resource = get_object_or_404(FolderResource, folder_id=folder_id)
    values = _centicores(payload, ("min_cores", "max_cores"))
    folder = _limited(lambda: set_folder_limits(folder_resource=resource, **values))
    return {"folder_id": folder.folder_id, "int_min_cores": folder.int_min_cores, "int_max_cores": folder.int_max_cores,
            "int_min_gpus": folder.int_min_gpus, "int_max_gpus": folder.int_max_gpus}


@router.patch("/accounting/jobs/{job_id}/limits", auth=BearerToken(), summary="Set job caps (cores, -1 unlimited)")
def patch_job_limits(request, job_id: str, payload: JobLimitsIn):
    resource = get_object_or_404(JobResource, job_id=job_id)
    values = _centicores(payload, ("max_cores",))
    job = _limited(lambda: set_job_limits(job_resource=resource, **values))
    return {"job_id": job.job_id, "int_max_cores": job.int_max_cores, "int_max_gpus": job.int_max_gpus, "int_priority": job.int_priority}


@router.patch("/accounting/points/{point_id}/limits", auth=BearerToken(), summary="Set point minimums (cores)")
def patch_point_limits(request, point_id: str, payload: PointLimitsIn):
    point = get_object_or_404(Point, pk=point_id)
    values = _centicores(payload, ("min_cores",))
    point = _limited(lambda: set_point_limits(point=point, **values))
    return {"id": point.id, "int_min_cores": point.int_min_cores, "int_min_gpus": point.int_min_gpus}
