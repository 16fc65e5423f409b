"""Names of the farm's rows as the faces give them: the names beside the ids of a release answer
(show, allocation, folder, job, layer, department), kept a while per worker so the release path
seldom pays a query for them; each accounting key's name, and each Redis field's label."""

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import cast

from django.db import connection
from django.db.models import Model

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


# The rows that name a folder's, a job's and a layer's key, and their name's columns.
_OWN_NAMES = {
    "folder": (Folder, ("show__str_name", "str_name")),
    "job": (Job, ("show__str_name", "str_name")),
    "layer": (Layer, ("job__show__str_name", "job__str_name", "str_name")),
}


def _joined_names(model: type[Model], ids: set[str], *columns: str) -> dict[str, str]:
    rows = model._default_manager.filter(pk__in=ids).values_list("pk", *columns) if ids else []
    return {pk: " / ".join(parts) for pk, *parts in rows}


def key_labels(*, redis_keys: Iterable[str]) -> dict[str, str]:
    """A readable name per accounting key, in six queries at most whatever the number of keys."""
    by_kind: dict[str, list[list[str]]] = {}
    for key in redis_keys:
        _, kind, *ids = key.split(":")
        by_kind.setdefault(kind, []).append(ids)
    # acct:sub:<show>:<alloc> names its show first, acct:point:<dept>:<show> last.
    subs, points = by_kind.get("sub", []), by_kind.get("point", [])
    shows = _joined_names(Show, {ids[0] for ids in subs} | {ids[1] for ids in points}, "str_name")
    allocs, depts = (
        _joined_names(Alloc, {ids[1] for ids in subs}, "str_name"),
        _joined_names(Dept, {ids[0] for ids in points}, "str_name"),
    )
    own = {
        kind: _joined_names(model, {ids[0] for ids in by_kind.get(kind, [])}, *columns)
        for kind, (model, columns) in _OWN_NAMES.items()
    }
    labels = {}
    for kind, entries in by_kind.items():
        for ids in entries:
            key = ":".join(["acct", kind, *ids])
            if kind == "sub":
                labels[key] = f"{shows.get(ids[0], 'show gone')} / {allocs.get(ids[1], 'allocation gone')}"
            elif kind == "point":
                labels[key] = f"{shows.get(ids[1], 'show gone')} / {depts.get(ids[0], 'department gone')}"
            else:
                found = own.get(kind, {}).get(ids[0])
                labels[key] = f"{kind} {found}" if found else f"{kind} gone ({ids[0][:8]}…)"
    return labels


# What each field of each kind of key holds (docs/redis-protocol.md), in an operator's words.
# Every face that lists Redis fields (the drift page, acct_drift, the drift API) names them
# through field_label and keeps the raw field beside the name, for scripts and for HGET.
_BOOKED = {"int_cores": "cores booked", "int_gpus": "GPUs booked"}
FIELD_LABELS = {
    "sub": {**_BOOKED, "size": "size in cores", "burst": "burst in cores"},
    "folder": {
        **_BOOKED,
        "int_min_cores": "min cores",
        "int_max_cores": "max cores",
        "int_min_gpus": "min GPUs",
        "int_max_gpus": "max GPUs",
    },
    "job": {**_BOOKED, "int_max_cores": "max cores", "int_max_gpus": "max GPUs", "int_priority": "priority"},
    "layer": _BOOKED,
    "point": {**_BOOKED, "int_min_cores": "min cores", "int_min_gpus": "min GPUs"},
}


def field_label(*, key: str, field: str) -> str:
    """An operator's name for `field` of the accounting key `key`; a field its kind of key
    does not hold (a stray one someone wrote by hand) reads as itself."""
    kind = key.split(":")[1] if key.count(":") >= 2 else ""
    return FIELD_LABELS.get(kind, {}).get(field, field)
