"""`manage.py set_subscription SHOW ALLOC --size/--burst CORES`: an operator's subscription limits from a
shell, in cores (accounting.live.units.parse_cores, the policy the admin and the API share), saved through
accounting.limits.changes like every other face."""

from django.core.management.base import CommandError

from accounting.limits.changes import LIMIT_CHANGES, InvalidLimit, set_subscription_limits
from accounting.live.units import format_cores
from accounting.management.commands._limit_args import parse_limits
from accounting.management.commands._show_arg import show_argument
from accounting.management.commands._writes import DeclaredCommand
from accounting.models import Subscription


class Command(DeclaredCommand):
    help = (
        "Change a subscription's size and/or burst, in cores (like cueadmin). For a scheduler-managed "
        "show the new values reach Redis right after commit."
    )
    writes = (LIMIT_CHANGES["subscription"],)

    def add_arguments(self, parser) -> None:
        parser.add_argument("show", help="show name")
        parser.add_argument("alloc", help="allocation name")
        parser.add_argument("--size", help="cores, up to two decimals (2.5)")
        parser.add_argument("--burst", help="cores, up to two decimals (2.5)")

    def handle(self, *args, show: str, alloc: str, **options) -> None:
        values = parse_limits(options, model=Subscription, cores=["size", "burst"], counts=[])
        found = show_argument(name=show)
        subscription = Subscription.objects.filter(show=found, alloc__str_name=alloc).first()
        if subscription is None:
            raise CommandError(f"no subscription of show {show!r} on allocation {alloc!r}", returncode=2)
        try:
            subscription = set_subscription_limits(subscription=subscription, **values)
        except InvalidLimit as error:
            raise CommandError(f"{error}; nothing changed", returncode=2) from None
        self.stdout.write(
            f"{show}/{alloc}: size {format_cores(subscription.int_size)}, burst {format_cores(subscription.int_burst)}"
        )
