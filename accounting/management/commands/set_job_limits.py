from django.core.management.base import BaseCommand, CommandError

from accounting.limits import set_job_limits
from accounting.management.commands._limit_args import parse_limits
from accounting.models import JobResource
from accounting.units import format_cores


class Command(BaseCommand):
    help = (
        "Change a job's max cores (in cores, -1 unlimited), max GPUs and/or priority. For a "
        "scheduler-managed show the new values reach Redis right after commit."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("job", help="job name")
        parser.add_argument("--max-cores", help="cores, -1 for unlimited")
        parser.add_argument("--max-gpus", help="GPUs, -1 for unlimited")
        parser.add_argument("--priority")

    def handle(self, *args, job: str, **options) -> None:
        values = parse_limits(options, cores=["max_cores"], counts=["max_gpus", "priority"])
        resource = JobResource.objects.filter(job__str_name=job).first()
        if resource is None:
            raise CommandError(f"no job named {job!r}", returncode=2)
        resource = set_job_limits(job_resource=resource, **values)
        self.stdout.write(
            f"{job}: max cores {format_cores(resource.int_max_cores)}, max gpus {resource.int_max_gpus}, "
            f"priority {resource.int_priority}"
        )
