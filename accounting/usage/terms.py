"""Subscriptions' sizes and bursts over time, in the service's own schema (SubscriptionTerm).

Cuebot keeps only a subscription's current size; `record_terms` (a scheduled task, every drift
check interval, in observer mode too: it writes only the service's own table) compares what
Cuebot holds now with the open terms, closes those that changed or whose subscription is gone,
and opens new ones. A change is thus dated by the first check that saw it, at most one interval
late. `terms_between` gives the usage report the sizes in force over a period, and when each
subscription was first seen: before that, its promise is unknown.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Min, Q

from accounting.models import SubscriptionTerm
from accounting.usage import history
from accounting.usage.history import Term
from accounting.usage.periods import epoch

# Serialises two recorders (two task workers): the open terms are read and closed under it.
TERMS_LOCK = 0x61637375  # "acsu"


def _values(term: SubscriptionTerm) -> tuple[str, str, str, str, int, int]:
    return (term.show_id, term.alloc_id, term.show_name, term.alloc_name, term.int_size, term.int_burst)


def record_terms(*, now: datetime) -> int:
    """Record what changed since the last check; returns how many terms were opened or closed."""
    with history.reading_cuebot() as cursor:
        current = history.subscriptions(cursor=cursor)
    changed = 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [TERMS_LOCK])
        still = {}
        for term in SubscriptionTerm.objects.filter(valid_until=None):
            if current.get(term.subscription_id) == _values(term):
                still[term.subscription_id] = term
                continue
            term.valid_until = now
            term.save(update_fields=["valid_until"])
            changed += 1
        for subscription_id, values in current.items():
            if subscription_id in still:
                continue
            show_id, alloc_id, show_name, alloc_name, size, burst = values
            SubscriptionTerm.objects.create(
                subscription_id=subscription_id,
                show_id=show_id,
                alloc_id=alloc_id,
                show_name=show_name,
                alloc_name=alloc_name,
                int_size=size,
                int_burst=burst,
                valid_from=now,
            )
            changed += 1
    return changed


@dataclass(frozen=True)
class Terms:
    """The sizes in force over a period and when each (show id, alloc id) was first seen."""

    terms: list[Term]
    first_seen: dict[tuple[str, str], datetime]
    names: dict[tuple[str, str], tuple[str, str]]


def terms_between(*, since: datetime, until: datetime, now: datetime) -> Terms:
    """Terms meeting [since, until), their open ends at `now` (nothing is promised yet beyond it)."""
    rows = SubscriptionTerm.objects.filter(valid_from__lt=until).filter(Q(valid_until=None) | Q(valid_until__gt=since))
    terms, names = [], {}
    for row in rows.order_by("valid_from"):
        end = row.valid_until or max(now, row.valid_from)
        terms.append(Term(row.show_id, row.alloc_id, row.int_size, epoch(moment=row.valid_from), epoch(moment=end)))
        names[(row.show_id, row.alloc_id)] = (row.show_name, row.alloc_name)
    first_seen = {
        (pair["show_id"], pair["alloc_id"]): pair["first"]
        for pair in SubscriptionTerm.objects.values("show_id", "alloc_id").annotate(first=Min("valid_from"))
    }
    return Terms(terms=terms, first_seen=first_seen, names=names)
