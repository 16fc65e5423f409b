"""The farm's names: the str_name of show, allocation, folder, job, layer and department rows by
their ids. Every face that names a row by its ids asks here: the release answers (through their
memo, accounting.operators.names) and the accounting keys' labels by names_by_kind, in one
statement whatever the kinds asked; the drift statements of Cuebot's tables by name_sql, inside
the statement, so their rows come named in the same snapshot and round trip."""

from collections.abc import Iterable

from django.db import connection

from shows.models import Alloc, Dept, Folder, Job, Layer, Show

NAMED = {"show": Show, "alloc": Alloc, "folder": Folder, "job": Job, "layer": Layer, "dept": Dept}


def _table_and_pk(kind: str) -> tuple[str, str]:
    meta = NAMED[kind]._meta
    return connection.ops.quote_name(meta.db_table), connection.ops.quote_name(meta.pk.column)


def name_sql(*, kind: str, id_sql: str) -> str:
    """The name of the `kind` row whose id is the SQL expression `id_sql`, as a scalar subquery
    (NULL where no row): a statement's own rows named as it reads them."""
    table, pk = _table_and_pk(kind)
    return f"(SELECT str_name FROM {table} WHERE {pk} = {id_sql})"


def names_by_kind(*, wanted: Iterable[tuple[str, str | None]]) -> dict[tuple[str, str], str]:
    """(kind, id) -> name for kinds show, alloc, folder, job, layer, dept, in one round trip (none
    when nothing is asked); an id of None is skipped and an id with no row is left out. A query per
    kind made a release of a job not seen lately pay up to six (issue 35)."""
    by_kind: dict[str, set[str]] = {}
    for kind, id in wanted:
        if id is not None:
            by_kind.setdefault(kind, set()).add(id)
    if not by_kind:
        return {}
    parts: list[str] = []
    params: list[str | list[str]] = []
    for kind, ids in by_kind.items():
        table, pk = _table_and_pk(kind)
        parts.append(f"SELECT %s::text, {pk}, str_name FROM {table} WHERE {pk} = ANY(%s)")
        params += [kind, sorted(ids)]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        return {(kind, id): name for kind, id, name in cursor.fetchall()}
