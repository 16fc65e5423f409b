"""Reads of Cuebot's history (frame_history, job_history, config), the one place that reads them.

Every read goes through `reading_history()`: a read-only transaction (or savepoint) on the
database that holds Cuebot's tables, bounded by a statement timeout, taking plain SELECT's
ACCESS SHARE locks and nothing more. It first checks that the role may read the history and
answers one line naming the GRANT if not (HistoryNotGranted), so a site that has not granted
the history yet loses the report alone.

A run is a frame_history row: cores (centicores) and GPUs from `int_ts_started` to
`int_ts_stopped`, or to `now` while that is 0 (open). Figures leave here as integers:
centicore-seconds and GPU-seconds. Runs are found through Cuebot's index on int_ts_stopped
(`> edge OR = 0`), which reaches a period's runs without reading the years before it.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import transaction

from infra.cuebot_database import cuebot_connection, cuebot_database
from shows.attach import history_grant_problem

# A report or a rollup reads a farm's biggest table: cancelled past this rather than left running.
STATEMENT_TIMEOUT_MS = 120_000

# How each grouping key is read from a run (frame_history fh) and its job (job_history jh).
KEY_COLUMNS = {
    "show": "jh.pk_show",
    "allocation": "fh.pk_alloc",
    "facility": "jh.pk_facility",
    "department": "jh.pk_dept",
    "user": "jh.str_user",
    "shot": "jh.str_shot",
}
OUTCOME = (
    "CASE WHEN fh.int_ts_stopped = 0 THEN 'running' WHEN fh.int_exit_status = 0 THEN 'succeeded' ELSE 'failed' END"
)

# Contiguous days given by their edges (%(edges)s: n days, n + 1 edges): each run is read once and
# cut into the days it meets (width_bucket finds the first and last), so rolling a month of days
# is one pass over its runs, not one index scan per day.
DAYS_OF_RUN = (
    "CROSS JOIN LATERAL generate_series(GREATEST(width_bucket(fh.int_ts_started, %(edges)s::int[]), 1), "
    "LEAST(width_bucket({stop} - 1, %(edges)s::int[]), cardinality(%(edges)s::int[]) - 1)) AS d(i) "
    "CROSS JOIN LATERAL (SELECT LEAST({stop}, (%(edges)s::int[])[d.i + 1]) "
    "- GREATEST(fh.int_ts_started, (%(edges)s::int[])[d.i]) AS seconds) s "
)


class HistoryNotGranted(Exception):
    """The role may not read Cuebot's history; str() is the one line naming the GRANT."""


@contextmanager
def reading_cuebot() -> Iterator:
    """A cursor for reads of Cuebot's tables, on the database that holds them (a hot standby where
    CUEBOT_DATABASE_URL names one): read-only, under the statement timeout."""
    with transaction.atomic(using=cuebot_database()), cuebot_connection().cursor() as cursor:
        cursor.execute("SET TRANSACTION READ ONLY")
        cursor.execute(f"SET LOCAL statement_timeout = {int(STATEMENT_TIMEOUT_MS)}")
        yield cursor


@contextmanager
def reading_history() -> Iterator:
    """reading_cuebot(), once the role is known to read the history tables."""
    with reading_cuebot() as cursor:
        problem = history_grant_problem(cursor=cursor)
        if problem:
            raise HistoryNotGranted(problem)
        yield cursor


@dataclass(frozen=True)
class Piece:
    """A stretch [lo, hi) of a report's bucket `bucket`, read from the runs that stopped after
    `after` or are open (after = 0: every run that meets the stretch)."""

    lo: int
    hi: int
    bucket: int
    after: int = 0


def _clipped(now: int) -> str:
    return (
        f"LEAST(CASE WHEN fh.int_ts_stopped = 0 THEN {int(now)} ELSE fh.int_ts_stopped END, p.hi) "
        "- GREATEST(fh.int_ts_started, p.lo)"
    )


def used_sql(*, keys: Sequence[str], now: int) -> str:
    """Per piece's bucket, the asked keys and the outcome: centicore-seconds and GPU-seconds."""
    columns = "".join(f", {KEY_COLUMNS[key]}" for key in keys)
    return (
        f"SELECT p.bucket{columns}, {OUTCOME}, SUM(fh.int_cores::bigint * s.seconds), "
        "SUM(fh.int_gpus::bigint * s.seconds) "
        "FROM unnest(%(lo)s::int[], %(hi)s::int[], %(after)s::int[], %(bucket)s::int[]) AS p(lo, hi, after, bucket) "
        "JOIN frame_history fh ON fh.int_ts_started < p.hi "
        "AND (fh.int_ts_stopped > GREATEST(p.lo, p.after) OR fh.int_ts_stopped = 0) "
        "JOIN job_history jh ON jh.pk_job = fh.pk_job "
        f"CROSS JOIN LATERAL (SELECT {_clipped(now)} AS seconds) s WHERE s.seconds > 0 "
        f"AND {BOUNDS} "
        f"GROUP BY {', '.join(str(n) for n in range(1, len(keys) + 3))}"
    )


# The pieces' outer bounds as constants: the planner knows nothing of an unnest's rows, and with
# these it reads Cuebot's index on int_ts_stopped (a bitmap of "> floor" and "= 0") rather than
# the whole table.
BOUNDS = "(fh.int_ts_stopped > %(floor)s OR fh.int_ts_stopped = 0) AND fh.int_ts_started < %(ceiling)s"


def pieces_params(pieces: Sequence[Piece]) -> dict:
    return {
        "lo": [piece.lo for piece in pieces],
        "hi": [piece.hi for piece in pieces],
        "after": [piece.after for piece in pieces],
        "bucket": [piece.bucket for piece in pieces],
        "floor": min(max(piece.lo, piece.after) for piece in pieces),
        "ceiling": max(piece.hi for piece in pieces),
    }


def used(*, cursor, pieces: Sequence[Piece], keys: Sequence[str], now: int) -> list[tuple]:
    """(bucket, *key values, outcome, centicore-seconds, GPU-seconds) rows of the runs in `pieces`."""
    if not pieces:
        return []
    cursor.execute(used_sql(keys=keys, now=now), pieces_params(pieces))
    return cursor.fetchall()


@dataclass(frozen=True)
class Term:
    """A subscription's size (centicores) in force over [lo, hi), epoch seconds."""

    show_id: str
    alloc_id: str
    size: int
    lo: int
    hi: int


# The cores a subscription's runs hold at each instant against the size in force then, as one
# sorted list of events per piece (p) or day and subscription: a run gives +cores at its start and
# -cores at its stop, a term -size at its start and +size at its end, each clipped to the piece.
# The running sum over that order (peers at one instant summed together, as a window's default
# frame does) is the excess over the size from that instant to the next event's (LEAD), so one sort
# and one scan of the events give the time above size: no grouping of the instants before it, and
# each run read once (its two events from one row). The subscription's ids are ordered bytewise
# (COLLATE "C"): the same partitions, without the locale's slower comparison of every pair.
OPEN_TO_NOW = "CASE WHEN fh.int_ts_stopped = 0 THEN %(now)s ELSE fh.int_ts_stopped END"
ABOVE_TAIL = """
terms AS (
    SELECT p.bucket, t.s COLLATE "C" AS s, t.a COLLATE "C" AS a, GREATEST(t.t0, p.lo) AS t0,
           LEAST(t.t1, p.hi) AS t1, t.size
      FROM p JOIN unnest(%(t_show)s::text[], %(t_alloc)s::text[], %(t_lo)s::int[], %(t_hi)s::int[], %(t_size)s::bigint[])
           AS t(s, a, t0, t1, size) ON t.t0 < p.hi AND t.t1 > p.lo
),
events AS (
    SELECT r.bucket, r.s, r.a, e.t, e.dv
      FROM runs r CROSS JOIN LATERAL (VALUES (r.t0, r.cores), (r.t1, -r.cores)) AS e(t, dv) WHERE r.t1 > r.t0
    UNION ALL
    SELECT terms.bucket, terms.s, terms.a, e.t, e.dv
      FROM terms CROSS JOIN LATERAL (VALUES (terms.t0, -terms.size), (terms.t1, terms.size)) AS e(t, dv)
),
levels AS (
    SELECT bucket, s, a, t, SUM(dv) OVER w AS excess, LEAD(t) OVER w AS next_t
      FROM events WINDOW w AS (PARTITION BY bucket, s, a ORDER BY t)
)
SELECT bucket, s, a, SUM(GREATEST(excess, 0) * (next_t - t))::bigint
  FROM levels WHERE next_t IS NOT NULL GROUP BY 1, 2, 3
"""
ABOVE_SQL = (
    """
WITH p AS (SELECT * FROM unnest(%(lo)s::int[], %(hi)s::int[], %(bucket)s::int[]) AS p(lo, hi, bucket)),
runs AS (
    SELECT p.bucket, jh.pk_show COLLATE "C" AS s, fh.pk_alloc COLLATE "C" AS a, GREATEST(fh.int_ts_started, p.lo) AS t0,
           LEAST("""
    + OPEN_TO_NOW
    + """, p.hi) AS t1, fh.int_cores::bigint AS cores
      FROM p JOIN frame_history fh ON fh.int_ts_started < p.hi AND (fh.int_ts_stopped > p.lo OR fh.int_ts_stopped = 0)
      JOIN job_history jh ON jh.pk_job = fh.pk_job
     WHERE """
    + BOUNDS
    + """
),"""
    + ABOVE_TAIL
)
# Here each run's clipped edges come from the day split's expressions, which the events would
# evaluate again per event were the runs inlined: they are computed once, into a stored list.
ABOVE_DAYS_SQL = (
    """
WITH p AS (SELECT i AS bucket, (%(edges)s::int[])[i] AS lo, (%(edges)s::int[])[i + 1] AS hi
             FROM generate_series(1, cardinality(%(edges)s::int[]) - 1) AS i),
runs AS MATERIALIZED (
    SELECT d.i AS bucket, jh.pk_show COLLATE "C" AS s, fh.pk_alloc COLLATE "C" AS a,
           GREATEST(fh.int_ts_started, (%(edges)s::int[])[d.i]) AS t0,
           GREATEST(fh.int_ts_started, (%(edges)s::int[])[d.i]) + s.seconds AS t1, fh.int_cores::bigint AS cores
      FROM frame_history fh JOIN job_history jh ON jh.pk_job = fh.pk_job """
    + DAYS_OF_RUN.format(stop=OPEN_TO_NOW)
    + """
     WHERE (fh.int_ts_stopped > (%(edges)s::int[])[1] OR fh.int_ts_stopped = 0)
       AND fh.int_ts_started < (%(edges)s::int[])[cardinality(%(edges)s::int[])]
),"""
    + ABOVE_TAIL
)


def _terms_params(terms: Sequence[Term], now: int) -> dict:
    return {
        "now": now,
        "t_show": [term.show_id for term in terms],
        "t_alloc": [term.alloc_id for term in terms],
        "t_lo": [term.lo for term in terms],
        "t_hi": [term.hi for term in terms],
        "t_size": [term.size for term in terms],
    }


def above_size(*, cursor, pieces: Sequence[Piece], terms: Sequence[Term], now: int) -> list[tuple]:
    """(bucket, show id, alloc id, centicore-seconds above size) for every subscription whose runs
    held more than its size at some instant of the pieces (a run with no term counts in full)."""
    if not pieces:
        return []
    cursor.execute(ABOVE_SQL, {**pieces_params(pieces), **_terms_params(terms, now)})
    return [row for row in cursor.fetchall() if row[3]]


def above_size_by_day(*, cursor, edges: Sequence[int], terms: Sequence[Term], now: int) -> list[tuple]:
    """above_size over contiguous days (their edges), in one pass over their runs; the bucket is
    the day's index from 1."""
    if len(edges) < 2:
        return []
    cursor.execute(ABOVE_DAYS_SQL, {"edges": list(edges), **_terms_params(terms, now)})
    return [row for row in cursor.fetchall() if row[3]]


NAMES_SQL = """
SELECT 'show', pk_show, str_name FROM show WHERE pk_show = ANY(%(show)s)
UNION ALL SELECT 'allocation', pk_alloc, str_name FROM alloc WHERE pk_alloc = ANY(%(allocation)s)
UNION ALL SELECT 'facility', pk_facility, str_name FROM facility WHERE pk_facility = ANY(%(facility)s)
UNION ALL SELECT 'department', pk_dept, str_name FROM dept WHERE pk_dept = ANY(%(department)s)
"""
NAMED_KEYS = ("show", "allocation", "facility", "department")


def names(*, cursor, ids: dict[str, set[str]]) -> dict[tuple[str, str], str]:
    """(key, id) -> the name Cuebot's table gives it now."""
    cursor.execute(NAMES_SQL, {key: sorted(ids.get(key, ())) for key in NAMED_KEYS})
    return {(key, pk): name for key, pk, name in cursor.fetchall()}


SUBSCRIPTIONS_SQL = """
SELECT s.pk_subscription, s.pk_show, s.pk_alloc, sh.str_name, a.str_name, s.int_size, s.int_burst
  FROM subscription s JOIN show sh ON sh.pk_show = s.pk_show JOIN alloc a ON a.pk_alloc = s.pk_alloc
"""


def subscriptions(*, cursor) -> dict[str, tuple[str, str, str, str, int, int]]:
    """pk_subscription -> (show id, alloc id, show name, alloc name, size, burst), as they are now."""
    cursor.execute(SUBSCRIPTIONS_SQL)
    return {row[0]: tuple(row[1:]) for row in cursor.fetchall()}


# Jobs that finished in [lo, hi): job_history's core time against their runs, exact and as
# Cuebot rounds each frame (max(1, floor(seconds * cores / 100)) core-seconds).
JOBS_SQL = """
SELECT jh.pk_job, jh.str_name, COALESCE(sh.str_name, jh.pk_show), jh.int_ts_stopped,
       jh.int_core_time_success + jh.int_core_time_fail,
       COALESCE(SUM(fh.int_cores::bigint * (fh.int_ts_stopped - fh.int_ts_started)) FILTER (WHERE fh.int_ts_stopped > 0), 0),
       COALESCE(SUM(GREATEST(1, fh.int_cores::bigint * (fh.int_ts_stopped - fh.int_ts_started) / 100))
                FILTER (WHERE fh.int_ts_stopped > 0), 0),
       COUNT(fh.pk_frame_history) FILTER (WHERE fh.int_ts_stopped = 0)
  FROM job_history jh LEFT JOIN show sh ON sh.pk_show = jh.pk_show
  LEFT JOIN frame_history fh ON fh.pk_job = jh.pk_job
 WHERE jh.int_ts_started < %(hi)s AND jh.int_ts_stopped >= %(lo)s AND jh.int_ts_stopped < %(hi)s
 GROUP BY jh.pk_job, sh.str_name
"""


def finished_jobs(*, cursor, lo: int, hi: int) -> list[tuple]:
    """(job id, name, show, stopped, job_history core-seconds, runs' centicore-seconds, runs'
    core-seconds as Cuebot rounds them, open runs) per job finished in [lo, hi)."""
    cursor.execute(JOBS_SQL, {"lo": lo, "hi": hi})
    return cursor.fetchall()


HEALTH_SQL = """
SELECT EXISTS (SELECT 1 FROM config WHERE str_key = 'DISABLE_HISTORY'),
       (SELECT count(*) FROM frame_history fh WHERE fh.int_ts_stopped = 0 AND NOT EXISTS
            (SELECT 1 FROM frame f WHERE f.pk_frame = fh.pk_frame AND f.str_state = 'RUNNING')),
       (SELECT count(*) FROM proc p WHERE p.pk_frame IS NOT NULL AND NOT EXISTS
            (SELECT 1 FROM frame_history fh WHERE fh.pk_frame = p.pk_frame AND fh.int_ts_stopped = 0))
"""


def health(*, cursor) -> tuple[bool, int, int]:
    """(DISABLE_HISTORY set, open runs of frames not running, procs booked now with no open run)."""
    cursor.execute(HEALTH_SQL)
    return cursor.fetchone()


def rollup_sql() -> str:
    """Per day (its index, from 1) and every key by id: the closed runs that stopped after that
    day's %(afters)s entry and at or before %(by)s, clipped to each day they meet. The runs are
    found once, by the lowest of those bounds (%(floor)s, a constant: Cuebot's index on
    int_ts_stopped), and each piece kept by its own day's bound."""
    columns = ", ".join(KEY_COLUMNS.values())
    return (
        f"SELECT d.i, {columns}, {OUTCOME}, SUM(fh.int_cores::bigint * s.seconds), SUM(fh.int_gpus::bigint * s.seconds) "
        "FROM frame_history fh JOIN job_history jh ON jh.pk_job = fh.pk_job "
        + DAYS_OF_RUN.format(stop="fh.int_ts_stopped")
        + "WHERE fh.int_ts_stopped > %(floor)s AND fh.int_ts_stopped <= %(by)s "
        "AND fh.int_ts_started < (%(edges)s::int[])[cardinality(%(edges)s::int[])] AND s.seconds > 0 "
        "AND fh.int_ts_stopped > (%(afters)s::int[])[d.i] "
        f"GROUP BY {', '.join(str(n) for n in range(1, len(KEY_COLUMNS) + 3))}"
    )


def closed_used(*, cursor, edges: Sequence[int], afters: Sequence[int], stopped_by: int) -> list[tuple]:
    """(day index from 1, show, alloc, facility, dept, user, shot ids, outcome, centicore-seconds,
    GPU-seconds) of the runs over the days of `edges` that stopped by `stopped_by`, in day i those
    that stopped after afters[i] (0: every run that met it), in one pass over those runs."""
    if len(edges) < 2:
        return []
    floor = min(max(after, lo) for after, lo in zip(afters, edges, strict=False))
    cursor.execute(rollup_sql(), {"edges": list(edges), "afters": list(afters), "floor": floor, "by": stopped_by})
    return cursor.fetchall()


def first_run_started(*, cursor) -> int | None:
    """When the oldest run started (Cuebot's index on (int_ts_started, int_ts_stopped))."""
    cursor.execute("SELECT min(int_ts_started) FROM frame_history")
    return cursor.fetchone()[0]


def open_runs_before(*, cursor, hi: int) -> list[tuple[str, int]]:
    """(run id, started) of the runs open now that started before `hi` (Cuebot's index on
    int_ts_stopped finds them)."""
    cursor.execute(
        "SELECT pk_frame_history, int_ts_started FROM frame_history WHERE int_ts_stopped = 0 AND int_ts_started < %s",
        [hi],
    )
    return cursor.fetchall()


def still_open(*, cursor, run_ids: Sequence[str]) -> tuple[set[str], set[str]]:
    """Of these runs, (those still open, those gone from frame_history)."""
    cursor.execute(
        "SELECT r.id, fh.int_ts_stopped FROM unnest(%s::text[]) AS r(id) "
        "LEFT JOIN frame_history fh ON fh.pk_frame_history = r.id",
        [list(run_ids)],
    )
    rows = cursor.fetchall()
    return {run_id for run_id, stopped in rows if stopped == 0}, {run_id for run_id, stopped in rows if stopped is None}
