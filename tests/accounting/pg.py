"""Assertions about the PG accounting tables against SUM(proc), and about what the service sends
PostgreSQL, for tests."""

import tempfile
from contextlib import contextmanager

import psycopg
import pytest
from django.db import DatabaseError, connection

from accounting.models import Proc
from accounting.release.unbook import unbook_proc, unbook_procs
from simulator.pg_truth import mismatches
from tests.service_role import as_cuebot


def accounting_mismatches(*, show_id: str) -> list[tuple]:
    """Rows of the five tables whose booked columns differ from SUM(proc); [] when all agree."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM subscription WHERE pk_show = %s", [show_id])
        assert cursor.fetchone()[0], "no subscription rows for the show"
    return mismatches(show_id=show_id)


def drift_all_tables(*, show_id: str) -> None:
    """What a toggle mid-flight can leave behind: every booked column wrong (some negative)."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE subscription SET int_cores = -300, int_gpus = 7 WHERE pk_show = %s", [show_id])
        cursor.execute(
            "UPDATE folder_resource r SET int_cores = 12345 FROM folder f "
            "WHERE f.pk_folder = r.pk_folder AND f.pk_show = %s",
            [show_id],
        )
        cursor.execute(
            "UPDATE job_resource r SET int_cores = -1, int_local_cores = 9 FROM job j "
            "WHERE j.pk_job = r.pk_job AND j.pk_show = %s",
            [show_id],
        )
        cursor.execute(
            "UPDATE layer_resource r SET int_gpus = 3 FROM job j WHERE j.pk_job = r.pk_job AND j.pk_show = %s",
            [show_id],
        )
        cursor.execute("UPDATE point SET int_cores = 42 WHERE pk_show = %s", [show_id])


def protocol_exchanges(run) -> list[tuple[list[str], list[str]]]:
    """What `run` sent on the test's connection and what came back, as the waits it made:
    one (messages sent, messages answered) pair per time the client stopped sending to read,
    each message named by its libpq trace type and text (`Bind "" "_pg3_0" ...`, `Sync`)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            run()
        finally:
            pgconn.untrace()
        trace.seek(0)
        # A Parse carries its SQL as written, newlines included: a line that does not open
        # with a direction goes on the message before it.
        lines: list[str] = []
        for line in trace.read().decode(errors="replace").rstrip("\n").split("\n"):
            if line.startswith(("F\t", "B\t")) or not lines:
                lines.append(line)
            else:
                lines[-1] += " " + line
    exchanges: list[tuple[list[str], list[str]]] = []
    for direction, _length, *message in (line.split("\t") for line in lines):
        text = " ".join(" ".join(message).split())
        if direction == "F":
            if not exchanges or exchanges[-1][1]:
                exchanges.append(([], []))
            exchanges[-1][0].append(text)
        else:
            exchanges[-1][1].append(text)
    return exchanges


@contextmanager
def commit_refused():
    """Every COMMIT of a transaction that deleted a proc fails, as a deferred constraint would
    make it fail: the statements all succeed and the transaction is lost at its very end."""
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute("""
            CREATE FUNCTION test_refuse_commit() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN RAISE EXCEPTION 'commit refused by the test'; END $$""")
        cursor.execute("""
            CREATE CONSTRAINT TRIGGER test_refuse_commit AFTER DELETE ON proc
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_refuse_commit()""")
    try:
        yield
    finally:
        with as_cuebot(), connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER test_refuse_commit ON proc")
            cursor.execute("DROP FUNCTION test_refuse_commit()")


def release_refused_at_commit(*, procs: list, batch: bool) -> None:
    """Release `procs` (all of them, or the first alone) with every COMMIT refused: the release
    raises, and every proc is still there."""
    with commit_refused(), pytest.raises(DatabaseError, match="commit refused by the test"):
        if batch:
            unbook_procs(proc_ids=[p.id for p in procs])
        else:
            unbook_proc(proc_id=procs[0].id)
    assert Proc.objects.filter(pk__in=[p.id for p in procs]).count() == len(procs)
