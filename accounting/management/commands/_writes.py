"""What a command writes, declared once, and its answer while ACCOUNTING_WRITES is off: the
service's one sentence, as a CommandError (exit status 2, the commands' "refused, nothing
changed"), not a traceback."""

import functools
from collections.abc import Callable

from django.core.management.base import BaseCommand, CommandError

from infra.writes import Write, WritesOff


def refused_while_observing(handle: Callable) -> Callable:
    """Wrap a command's handle() (or execute()): a write refused by ACCOUNTING_WRITES=off ends in one line."""

    @functools.wraps(handle)
    def handled(self, *args, **options):
        try:
            return handle(self, *args, **options)
        except WritesOff as refused:
            raise CommandError(str(refused), returncode=2) from None

    return handled


class DeclaredCommand(BaseCommand):
    """A command of the service: `writes`, the Writes it may make (none: nothing of Cuebot's, nor the
    scheduler's counters), which their services refuse while observing, the command ending in the
    refusal's one line. Every command of the service is one (tests hold them to their declarations)."""

    writes: tuple[Write, ...]
    execute = refused_while_observing(BaseCommand.execute)
