"""Writes to shows: the ownership toggle, the operator's one step between Cuebot and the scheduler,
and a show's other columns changed from the admin."""

from collections.abc import Sequence

from django.db import transaction

from accounting.ownership import switching
from infra.era import era
from infra.writes import Write
from shows.attach import writer_grant
from shows.models import Show
from shows.selectors import refresh_flag_cache

OWNERSHIP_TOGGLE = Write(action="the ownership toggle", grant=writer_grant("show"))
SHOW_CHANGE = Write(action="a change", grant=writer_grant("show"))


def change_show(*, show: Show, columns: Sequence[str]) -> None:
    """Save these of `show`'s columns, set on it already (as the admin's form sets them), and only
    these: Cuebot's own edits change one column each, and a column another writer changed since
    is not put back. The flag is not one of them: set_scheduler_managed hands a show over."""
    SHOW_CHANGE.require(of=f"show {show.str_name}")
    if "b_scheduler_managed" in columns:
        raise ValueError("the scheduler-managed flag moves with set_scheduler_managed, not as a column")
    if columns:
        show.save(update_fields=list(columns))


def set_scheduler_managed(*, show: Show, managed: bool) -> tuple[bool, bool]:
    """Flip `show.b_scheduler_managed` with one UPDATE; returns (old, new). No drain step.

    Maestro era (infra.era): that UPDATE, then the shared flag cache takes the new
    value after commit, and nothing else. Cuebot keeps the five tables for flagged shows too, so
    there is nothing to hand over and the accounting Redis is never touched (cueadmin's
    `-scheduler-managed SHOW on|off` is the same one UPDATE).

    Redis and NOTIFY eras: a switch to the scheduler first closes the show's Redis keys to
    booking, in the transaction (SwitchRefused, nothing changed, if Redis cannot be reached); a
    toggle that then rolls back leaves them closed, which is harmless while Cuebot owns the show.
    Everything else happens after commit: the shared flag cache takes the new value (every
    process sees it at once), and a real change hands the show over: a switch to the scheduler
    seeds its Redis keys (counters, then the limits that open them), a switch back recomputes
    its PG accounting tables from `proc`.
    """
    OWNERSHIP_TOGGLE.require(of=show.str_name)
    with transaction.atomic():
        old = Show.objects.select_for_update().values_list("b_scheduler_managed", flat=True).get(pk=show.pk)
        changed = old != managed
        hand_over = changed and not era().cuebot_owns_every_show
        if hand_over and not managed:
            switching.mark_settling(show_id=show.pk)
        if hand_over and managed:
            switching.before_switch_to_scheduler(show_id=show.pk)
        if changed:
            Show.objects.filter(pk=show.pk).update(b_scheduler_managed=managed)
        # robust: a cache hiccup is logged and must not stop the hand-over below.
        transaction.on_commit(lambda: refresh_flag_cache(show_id=show.pk, managed=managed), robust=True)
        if hand_over and managed:
            transaction.on_commit(lambda: switching.after_switch_to_scheduler(show_id=show.pk))
        elif hand_over:
            transaction.on_commit(lambda: switching.after_switch_to_cuebot(show_id=show.pk))
    show.b_scheduler_managed = managed
    return old, managed
