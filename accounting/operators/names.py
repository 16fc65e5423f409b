"""Names of the farm's rows as the faces give them: the names beside the ids of a release answer
(show, allocation, folder, job, layer, department), kept a while per worker so the release path
seldom pays a query for them; each accounting key's name, and each Redis field's label."""

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import cast

from accounting.release.types import Release
from shows.models import Folder, Job, Layer
from shows.names import NAMED, names_by_kind

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
NAMED_KINDS = tuple(NAMED)


def names_of(*, wanted: Iterable[tuple[str, str | None]]) -> dict[tuple[str, str], str]:
    """(kind, id) -> name for kinds show, alloc, folder, job, layer, dept; "gone" where no row. The
    memo first, then one statement for every miss (shows.names)."""
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
    rows = names_by_kind(wanted=((kind, id) for kind, ids in missing.items() for id in ids))
    with _names_written:
        for kind, ids in missing.items():
            for id in ids:
                found[(kind, id)] = name = rows.get((kind, id), "gone")
                _names.pop((kind, id), None)
                _names[(kind, id)] = (now + NAME_SECONDS, name)
        while _names and (len(_names) > NAMES_KEPT or next(iter(_names.values()))[0] <= now):
            _names.popitem(last=False)
    return found


# The ids a release answer names, as Release holds them side by side (show_id to dept_id), in
# NAMED's order: sliced out of each release at once. Refused at import if Release's fields move.
_NAME_IDS = slice(Release._fields.index("show_id"), Release._fields.index("dept_id") + 1)
if Release._fields[_NAME_IDS] != tuple(f"{kind}_id" for kind in NAMED):
    raise TypeError(f"accounting.operators.names: Release's fields {Release._fields} no longer hold NAMED's ids")


def release_names(*, releases: Iterable[Release]) -> dict[str, dict[str, str | None]]:
    """proc id -> {show, alloc, folder, job, layer, dept: name} for these releases.

    Named once per distinct set of ids, and that dict shared by its releases: the procs of a
    batch come from a few layers (a batch of 100 named proc by proc spent a quarter of its
    request's CPU here, issue 35)."""
    releases = list(releases)
    # tuples: mypy types a named tuple's slice by a non-literal slice as one of its fields
    ids_of = [cast(tuple, r[_NAME_IDS]) for r in releases]
    distinct = dict.fromkeys(ids_of)
    known = names_of(wanted=[(kind, id) for ids in distinct for kind, id in zip(NAMED, ids, strict=True)])
    named = {ids: {kind: known.get((kind, id)) for kind, id in zip(NAMED, ids, strict=True)} for ids in distinct}
    return {r.proc_id: named[ids] for r, ids in zip(releases, ids_of, strict=True)}


# The parents a folder's, a job's and a layer's key is named by (show / folder, show / job,
# show / job / layer), read from the row the key names.
_PARENTS = {
    "folder": (Folder, ("show_id",), ("show",)),
    "job": (Job, ("show_id",), ("show",)),
    "layer": (Layer, ("job__show_id", "job_id"), ("show", "job")),
}


def key_labels(*, redis_keys: Iterable[str]) -> dict[str, str]:
    """A readable name per accounting key, in four queries at most whatever the number of keys:
    the parents of the folders, jobs and layers named, then every name at once (shows.names)."""
    split = {key: key.split(":")[1:] for key in redis_keys}  # kind, then the key's ids
    parents = _parents(ids={kind: {ids[0] for k, *ids in split.values() if k == kind} for kind in _PARENTS})
    parts = {
        key: _own_parts(kind=kind, ids=ids) or parents.get((kind, ids[0]), []) for key, (kind, *ids) in split.items()
    }
    names = names_by_kind(wanted=(part for named in parts.values() for part in named))
    return {key: _label(kind=kind, ids=ids, parts=parts[key], names=names) for key, (kind, *ids) in split.items()}


def _own_parts(*, kind: str, ids: list[str]) -> list[tuple[str, str]]:
    """The rows a subscription's or a point's key names by its own ids: acct:sub:<show>:<alloc>
    names its show first, acct:point:<dept>:<show> last."""
    if kind == "sub":
        return [("show", ids[0]), ("alloc", ids[1])]
    if kind == "point":
        return [("show", ids[1]), ("dept", ids[0])]
    return []


def _parents(*, ids: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Each folder, job and layer asked: the row, after its parents (none for a row gone)."""
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for kind, (model, columns, kinds) in _PARENTS.items():
        rows = model._default_manager.filter(pk__in=ids[kind]).values_list("pk", *columns) if ids[kind] else []
        found |= {(kind, pk): [*zip(kinds, parents, strict=True), (kind, pk)] for pk, *parents in rows}
    return found


_GONE = {"show": "show gone", "alloc": "allocation gone", "dept": "department gone"}


def _label(*, kind: str, ids: list[str], parts: list[tuple[str, str]], names: dict[tuple[str, str], str]) -> str:
    if kind in ("sub", "point"):
        return " / ".join(names.get(part, _GONE[part[0]]) for part in parts)
    if parts and all(part in names for part in parts):
        return f"{kind} " + " / ".join(names[part] for part in parts)
    return f"{kind} gone ({ids[0][:8]}…)"


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
