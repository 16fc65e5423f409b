"""`manage.py set_job_limits JOB ...`: a live job's max cores (the policy every face shares,
accounting.live.units.parse_cores), GPUs and priority from a shell, saved through accounting.limits.changes."""

from django.core.management.base import CommandError

from accounting.limits.changes import LIMIT_CHANGES, InvalidLimit, set_job_limits
from accounting.live.units import format_cores
from accounting.management.commands._limit_args import parse_limits
from accounting.management.commands._writes import DeclaredCommand
from accounting.models import JobResource
from shows.selectors import AmbiguousName, get_live_job


class Command(DeclaredCommand):
    help = (
        "Change a job's max cores (in cores), max GPUs and/or priority; the job is named by its live "
        "(visible) name, or its id. -1 is refused: Cuebot compares a job's max as a number. For a "
        "scheduler-managed show the new values reach Redis right after commit."
    )
    writes = (LIMIT_CHANGES["job_resource"],)

    def add_arguments(self, parser) -> None:
        parser.add_argument("job", help="the job's live (visible) name, or its id")
        parser.add_argument("--max-cores", help="cores, up to two decimals (2.5)")
        parser.add_argument("--max-gpus", help="GPUs")
        parser.add_argument("--priority")

    def handle(self, *args, job: str, **options) -> None:
        values = parse_limits(options, model=JobResource, cores=["max_cores"], counts=["max_gpus", "priority"])
        try:
            found = get_live_job(name_or_id=job)
        except AmbiguousName as error:
            raise CommandError(str(error), returncode=2) from None
        resource = JobResource.objects.filter(job=found).first() if found else None
        if resource is None:
            raise CommandError(
                f"no live job named {job!r} (a finished job keeps its name but is not live)", returncode=2
            )
        try:
            resource = set_job_limits(job_resource=resource, **values)
        except InvalidLimit as error:
            raise CommandError(f"{error}; nothing changed", returncode=2) from None
        self.stdout.write(
            f"{job}: max cores {format_cores(resource.int_max_cores)}, max gpus {resource.int_max_gpus}, "
            f"priority {resource.int_priority}"
        )
