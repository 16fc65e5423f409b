"""recalculate_subs: Cuebot's subscription recompute from a shell, for the shows Cuebot owns in this era."""

from django.core.management.base import CommandError

from accounting.live.units import format_cores
from accounting.management.commands._writes import DeclaredCommand
from accounting.reconcile.recalculate_subs import RECALCULATE_SUBS, recalculate_subs


class Command(DeclaredCommand):
    help = (
        "Recompute subscription int_cores/int_gpus from SUM(proc) for the shows Cuebot owns: every show in "
        "the Maestro era (ACCOUNTING_SCHEDULER=maestro), flagged or not; otherwise the Cuebot-managed ones "
        "(scheduler-managed shows are never written). Above a lowered burst too; the bursts stay as "
        "they are. --dry-run prints what would change. Exit 1 if a row could not be set."
    )
    writes = (RECALCULATE_SUBS,)

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="print the rows that would change, write nothing")

    def handle(self, *args, dry_run: bool, **options) -> None:
        result = recalculate_subs(dry_run=dry_run)
        if not result.ran:
            self.stdout.write("recalculate_subs is already running elsewhere; nothing done")
            return
        for c in result.changes:
            self.stdout.write(
                f"{c.show} / {c.alloc}: {format_cores(c.old_cores)} → {format_cores(c.new_cores)}, "
                f"gpus {c.old_gpus} → {c.new_gpus}"
            )
        verb = "would change" if dry_run else "changed"
        self.stdout.write(f"{len(result.changes)} subscription row(s) {verb}")
        for failure in result.failures:
            self.stderr.write(f"subscription {failure.pk} left as it was: {failure.error}")
        if result.failures:
            raise CommandError(
                f"{len(result.failures)} subscription row(s) could not be set to SUM(proc)", returncode=1
            )
