from django.core.management.base import CommandError

from accounting.management.commands._show_arg import show_argument
from accounting.management.commands._writes import DeclaredCommand
from accounting.ownership.switching import SwitchRefused
from accounting.ownership.toggle import OWNERSHIP_TOGGLE, set_scheduler_managed

# cueadmin -scheduler-managed SHOW on|off takes on/off; the earlier -setSchedulerManaged took true/false.
VALUES = {"true": True, "on": True, "false": False, "off": False}


class Command(DeclaredCommand):
    help = (
        "Flag a show scheduler-managed (on or true) or clear its flag (off or false); "
        "like `cueadmin -scheduler-managed SHOW on|off`. One UPDATE, no drain."
    )
    writes = (OWNERSHIP_TOGGLE,)

    def add_arguments(self, parser) -> None:
        parser.add_argument("show", help="show name")
        parser.add_argument("value", help="on or off (true or false)")

    def handle(self, *args, show: str, value: str, **options) -> None:
        managed = VALUES.get(value.lower())
        if managed is None:
            raise CommandError(f"value must be on, off, true or false, got {value!r}; nothing changed", returncode=2)
        found = show_argument(name=show)
        try:
            old, new = set_scheduler_managed(show=found, managed=managed)
        except SwitchRefused as error:
            raise CommandError(f"{found.str_name}: {error}") from None
        self.stdout.write(f"{found.str_name}: b_scheduler_managed {str(old).lower()} -> {str(new).lower()}")
