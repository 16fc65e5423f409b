"""`manage.py set_folder_limits SHOW FOLDER ...`: a folder's caps from a shell, cores in the policy every
face shares (accounting.live.units.parse_cores), -1 for unlimited where Cuebot reads it so, saved through
accounting.limits.changes."""

from django.core.management.base import CommandError

from accounting.limits.changes import LIMIT_CHANGES, InvalidLimit, set_folder_limits
from accounting.live.units import format_cores
from accounting.management.commands._limit_args import parse_limits
from accounting.management.commands._writes import DeclaredCommand
from accounting.models import FolderResource
from shows.selectors import AmbiguousName, ShowNameUnusable, only_one, show_named


class Command(DeclaredCommand):
    help = (
        "Change a folder's min/max cores (in cores, -1 unlimited) and min/max GPUs. For a "
        "scheduler-managed show the new values reach Redis right after commit."
    )
    writes = (LIMIT_CHANGES["folder_resource"],)

    def add_arguments(self, parser) -> None:
        parser.add_argument("show", help="show name")
        parser.add_argument("folder", help="folder name")
        parser.add_argument("--min-cores", help="cores, up to two decimals (2.5)")
        parser.add_argument("--max-cores", help="cores, up to two decimals, at least 1; -1 (or unlimited) for no limit")
        parser.add_argument("--min-gpus")
        parser.add_argument("--max-gpus", help="-1 for unlimited")

    def handle(self, *args, show: str, folder: str, **options) -> None:
        values = parse_limits(
            options,
            model=FolderResource,
            cores=["min_cores", "max_cores"],
            counts=["min_gpus", "max_gpus"],
            unlimited=("max_cores", "max_gpus"),
        )
        try:
            found = show_named(name=show)
            resource = only_one(
                FolderResource.objects.filter(folder__show=found, folder__str_name=folder),
                what=f"folder of show {show!r}",
                name=folder,
            )
        except (ShowNameUnusable, AmbiguousName) as error:  # the show's name, then the folder's
            raise CommandError(str(error), returncode=2) from None
        if not resource:
            raise CommandError(f"no folder {folder!r} in show {show!r}", returncode=2)
        try:
            resource = set_folder_limits(folder_resource=resource, **values)
        except InvalidLimit as error:
            raise CommandError(f"{error}; nothing changed", returncode=2) from None
        self.stdout.write(
            f"{show}/{folder}: cores {format_cores(resource.int_min_cores)}..{format_cores(resource.int_max_cores)}, "
            f"gpus {resource.int_min_gpus}..{resource.int_max_gpus}"
        )
