"""The names beside the ids of a release answer (show, allocation, folder, job, layer, department),
kept a while per worker so the release path seldom pays a query for them."""

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import cast

from django.db import connection

from accounting.release.types import Release
from shows.models import Alloc, Dept, Folder, Job, Layer, Show

# A release answer names what it released. Names change rarely and a release client releases
# the procs of a few jobs over and over: each id's name is kept for a minute, so the release path
# pays a query only for ids it has not seen lately. A worker runs for months and a farm tens of
# thousands of jobs a day: at most NAMES_KEPT are kept, the oldest (in lookup order, which with
# one lifetime is expiry order) dropped at the next miss once over the bound or past their minute.
NAME_SECONDS = 60.0
NAMES_KEPT = 10_000
_names: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()
_names_written = threading.Lock()  # a miss's writes; a hit only reads
_clock = time.monotonic
_NAMED = {"show": Show, "alloc": Alloc, "folder": Folder, "job": Job, "layer": Layer, "dept": Dept}
NAMED_KINDS = tuple(_NAMED)


def names_of(*, wanted: Iterable[tuple[str, str | None]]) -> dict[tuple[str, str], str]:
    """(kind, id) -> name for kinds show, alloc, folder, job, layer, dept; "gone" where no row."""
    now = _clock()
    found: dict[tuple[str, str], str] = {}
    missing: dict[str, set[str]] = {}
    for kind, id in wanted:
        if id is None:
            continue
        hit = _names.get((kind, id))
        if hit and hit[0] > now:
            found[(kind, id)] = hit[1]
        else:
            missing.setdefault(kind, set()).add(id)
    if not missing:
        return found
    rows = _names_by_kind(missing=missing)
    with _names_written:
        for kind, ids in missing.items():
            for id in ids:
                found[(kind, id)] = name = rows.get((kind, id), "gone")
                _names.pop((kind, id), None)
                _names[(kind, id)] = (now + NAME_SECONDS, name)
        while _names and (len(_names) > NAMES_KEPT or next(iter(_names.values()))[0] <= now):
            _names.popitem(last=False)
    return found


def _names_by_kind(*, missing: dict[str, set[str]]) -> dict[tuple[str, str], str]:
    """(kind, id) -> name for ids not in the memo, in one round trip whatever the kinds: a
    release of a job not seen lately misses its job and layer, often its folder too, and a
    query per kind made that first answer pay up to six (issue 35)."""
    parts: list[str] = []
    params: list[str | list[str]] = []
    for kind, ids in missing.items():
        meta = _NAMED[kind]._meta
        table, pk = connection.ops.quote_name(meta.db_table), connection.ops.quote_name(meta.pk.column)
        parts.append(f"SELECT %s::text, {pk}, str_name FROM {table} WHERE {pk} = ANY(%s)")
        params += [kind, list(ids)]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        return {(kind, id): name for kind, id, name in cursor.fetchall()}


# The ids a release answer names, as Release holds them side by side (show_id to dept_id), in
# _NAMED's order: sliced out of each release at once. Refused at import if Release's fields move.
_NAME_IDS = slice(Release._fields.index("show_id"), Release._fields.index("dept_id") + 1)
if Release._fields[_NAME_IDS] != tuple(f"{kind}_id" for kind in _NAMED):
    raise TypeError(f"accounting.operators.names: Release's fields {Release._fields} no longer hold _NAMED's ids")


def release_names(*, releases: Iterable[Release]) -> dict[str, dict[str, str | None]]:
    """proc id -> {show, alloc, folder, job, layer, dept: name} for these releases.

    Named once per distinct set of ids, and that dict shared by its releases: the procs of a
    batch come from a few layers (a batch of 100 named proc by proc spent a quarter of its
    request's CPU here, issue 35)."""
    releases = list(releases)
    # tuples: mypy types a named tuple's slice by a non-literal slice as one of its fields
    ids_of = [cast(tuple, r[_NAME_IDS]) for r in releases]
    distinct = dict.fromkeys(ids_of)
    known = names_of(wanted=[(kind, id) for ids in distinct for kind, id in zip(_NAMED, ids, strict=True)])
    named = {ids: {kind: known.get((kind, id)) for kind, id in zip(_NAMED, ids, strict=True)} for ids in distinct}
    return {r.proc_id: named[ids] for r, ids in zip(releases, ids_of, strict=True)}
