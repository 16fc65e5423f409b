"""Cuebot's history of a generated farm: job_history and frame_history rows as Cuebot writes them.

Cuebot's frame trigger opens a frame_history row when a frame starts running (the host's
allocation, the frame's cores and GPUs, the start in epoch seconds) and closes it when the frame
stops (the stop, the exit status, the peak memory); a retried frame has one row per run. Cuebot
writes a job's job_history row at launch and copies the job's core time into it (success and
fail, each run counted `max(1, floor(seconds * cores / 100))`) when it finishes. Here the past
is written in one statement each (INSERT ... SELECT over generate_series), the way those
triggers would have left it, so that a month of a large farm takes minutes, not hours:

- finished jobs before `now`, `frames_per_job` runs each; every tenth frame fails once (exit 1)
  and runs again, a second row of the same frame;
- the farm's running frames (those with a proc) an open run each, started within the last hour,
  and their jobs' job_history rows as launched.

Ids are md5 of a name under `namespace`, so writing the same history twice adds nothing.
"""

from dataclasses import dataclass

from django.db import connection, transaction

from simulator.farm_builder import DEPARTMENTS, demo_id

DAY = 86_400


@dataclass(frozen=True)
class HistoryShape:
    """What to write: `days` of finished jobs up to `until` (epoch seconds), `runs_per_day` runs a
    day (Maestro's proof farm, 20,000 procs of one-hour frames: 480,000), `frames_per_job` each."""

    until: int
    days: int
    runs_per_day: int
    frames_per_job: int = 100
    namespace: str = "demo"

    @property
    def runs(self) -> int:
        return self.days * self.runs_per_day

    @property
    def jobs(self) -> int:
        return -(-self.runs // self.frames_per_job)

    @property
    def since(self) -> int:
        return self.until - self.days * DAY


@dataclass(frozen=True)
class HistoryWritten:
    jobs: int
    runs: int
    open_runs: int


def demo_structure() -> dict[str, list]:
    """The demo farm's rows a history names: its shows (with their names), allocations (whether
    they hold GPUs), departments and facility, as farm_builder made them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pk_show, str_name FROM show WHERE str_name LIKE 'demo%%' ORDER BY str_name")
        shows = cursor.fetchall()
        cursor.execute("SELECT pk_alloc, str_tag = 'gpu' FROM alloc WHERE str_name LIKE 'demo.%%' ORDER BY str_name")
        allocs = cursor.fetchall()
    return {
        "show_ids": [pk for pk, _ in shows],
        "show_names": [name for _, name in shows],
        "alloc_ids": [pk for pk, _ in allocs],
        "alloc_gpus": [gpu for _, gpu in allocs],
        "dept_ids": [demo_id(f"dept:{name}") for name in DEPARTMENTS],
        "dept_names": list(DEPARTMENTS),
        "facility": [demo_id("facility")],
    }


# A past job j: its show (the first shows busier: job j's is the show at the square of j's golden-ratio
# fraction of the list, so that the first has half the jobs of four shows and the last an eighth),
# department, user and shot dealt round; it ran from its first run's start to its last run's stop
# (the formulas of RUNS below).
PAST_JOBS = """
INSERT INTO job_history (pk_job, pk_show, str_name, str_shot, str_user, pk_facility, pk_dept,
                         int_ts_started, int_ts_stopped, int_frame_count, int_layer_count, b_archived,
                         dt_last_modified)
SELECT md5(%(ns)s || ':job:' || j)::uuid::text,
       (%(show_ids)s::text[])[show],
       (%(show_names)s::text[])[show] || '-' || (%(dept_names)s::text[])[dept] || '-past' || lpad(j::text, 7, '0'),
       'sh' || lpad((j %% 40)::text, 3, '0'),
       'artist' || (j %% 7),
       (%(facility)s::text[])[1],
       (%(dept_ids)s::text[])[dept],
       %(since)s + (j * %(frames)s)::bigint * %(span)s / %(runs)s,
       0, %(frames)s, 1, true, current_date
  FROM generate_series(%(first_job)s, %(last_job)s) AS j,
       LATERAL (SELECT 1 + floor(cardinality(%(show_ids)s::text[]) * power(j * 0.6180339887 %% 1, 2))::int AS show,
                       1 + j %% cardinality(%(dept_ids)s::text[]) AS dept) AS dealt
ON CONFLICT DO NOTHING
"""

# Run i of job i / frames, on host i / 3 modulo the hosts (and that host's allocation, as farm_builder
# deals them; not i itself, whose parity would put every failure on one allocation): starts spread evenly over the period (frames of a job a minute apart
# in fives), 30 to 90 minutes long, so that about runs_per_day / 24 run at any time; run 3 of
# every ten fails and run 4 is its retry (the same pk_frame, a second row, after it).
RUNS = """
INSERT INTO frame_history (pk_frame_history, pk_frame, pk_layer, pk_job, str_name, str_state, int_mem_reserved,
                           int_mem_max_used, int_cores, str_host, int_exit_status, pk_alloc, int_ts_started,
                           int_ts_stopped, dt_last_modified, int_gpus, int_gpu_mem_reserved, int_gpu_mem_max_used)
SELECT md5(%(ns)s || ':run:' || i)::uuid::text,
       md5(%(ns)s || ':frame:' || (i - (i %% 10 = 4)::int))::uuid::text,
       md5(%(ns)s || ':layer:' || i / %(frames)s)::uuid::text,
       md5(%(ns)s || ':job:' || i / %(frames)s)::uuid::text,
       lpad((i %% %(frames)s - (i %% 10 = 4)::int + 1)::text, 4, '0') || '-render',
       'RUNNING', 4194304, 2097152 + (i * 7919) %% 1572864,
       (ARRAY[100, 250, 400, 200])[1 + i %% 4],
       'demo-host-' || lpad((1 + i / 3 %% %(hosts)s)::text, 5, '0'),
       CASE WHEN i %% 10 = 3 THEN 1 ELSE 0 END,
       (%(alloc_ids)s::text[])[1 + (i / 3 %% %(hosts)s) %% cardinality(%(alloc_ids)s::text[])],
       started, started + 1800 + (i * 7919) %% 3600, current_date,
       gpus, gpus * 16777216, gpus * 8388608
  FROM generate_series(%(first_run)s::bigint, %(last_run)s::bigint) AS i,
       LATERAL (SELECT CASE WHEN i %% 10 = 4  -- the retry starts a minute after the failed run stopped
                            THEN %(since)s + (i - 1)::bigint * %(span)s / %(runs)s + ((i - 1) %% 5) * 60
                                 + 1800 + ((i - 1) * 7919) %% 3600 + 60
                            ELSE %(since)s + i::bigint * %(span)s / %(runs)s + (i %% 5) * 60 END AS started,
                       CASE WHEN (%(alloc_gpus)s::boolean[])[1 + (i / 3 %% %(hosts)s) %% cardinality(%(alloc_ids)s::text[])]
                            THEN 1 ELSE 0 END AS gpus) AS run
ON CONFLICT DO NOTHING
"""

# What job_usage would have copied into each finished job's row: its core time by exit status, in
# Cuebot's per-run rounding, and when its last run stopped.
JOB_TOTALS = """
UPDATE job_history jh
   SET int_core_time_success = t.success, int_core_time_fail = t.fail, int_ts_stopped = t.stopped,
       int_gpu_time_success = t.gpu_success, int_gpu_time_fail = t.gpu_fail
  FROM (SELECT pk_job,
               SUM(GREATEST(1, (int_ts_stopped - int_ts_started)::bigint * int_cores / 100))
                   FILTER (WHERE int_exit_status = 0) AS success,
               COALESCE(SUM(GREATEST(1, (int_ts_stopped - int_ts_started)::bigint * int_cores / 100))
                   FILTER (WHERE int_exit_status <> 0), 0) AS fail,
               COALESCE(SUM((int_ts_stopped - int_ts_started)::bigint * int_gpus)
                   FILTER (WHERE int_exit_status = 0), 0) AS gpu_success,
               COALESCE(SUM((int_ts_stopped - int_ts_started)::bigint * int_gpus)
                   FILTER (WHERE int_exit_status <> 0), 0) AS gpu_fail,
               MAX(int_ts_stopped) AS stopped
          FROM frame_history
         WHERE pk_job IN (SELECT md5(%(ns)s || ':job:' || j)::uuid::text
                            FROM generate_series(%(first_job)s, %(last_job)s) AS j)
         GROUP BY pk_job) t
 WHERE jh.pk_job = t.pk_job AND jh.int_ts_stopped = 0
"""


def write_past(
    *, shape: HistoryShape, structure: dict[str, list], hosts: int, runs: range | None = None, settle: bool = True
) -> int:
    """The finished jobs and their runs (`runs`, a part of the shape's: all by default, the runs
    of whole jobs), and with `settle` their totals (settle_jobs); returns the runs added."""
    params = past_params(shape=shape, structure=structure, hosts=hosts, runs=runs)
    with connection.cursor() as cursor:
        cursor.execute(PAST_JOBS, params)
        cursor.execute(RUNS, params)
        added = cursor.rowcount
        if settle:
            cursor.execute(JOB_TOTALS, params)
    return added


def settle_jobs(*, shape: HistoryShape, runs: range | None = None) -> None:
    """Each finished job's core time and stop, from its runs, as job_usage would have copied them."""
    with connection.cursor() as cursor:
        cursor.execute(JOB_TOTALS, past_params(shape=shape, structure={}, hosts=1, runs=runs))


def past_params(*, shape: HistoryShape, structure: dict[str, list], hosts: int, runs: range | None) -> dict:
    runs = runs if runs is not None else range(shape.runs)
    return {
        **structure,
        "ns": shape.namespace,
        "since": shape.since,
        "span": shape.days * DAY - 4 * 3600,  # the last runs (a failed one and its retry) stop before `until`
        "runs": shape.runs,
        "first_run": runs.start,
        "last_run": runs.stop - 1,
        "first_job": runs.start // shape.frames_per_job,
        "last_job": (runs.stop - 1) // shape.frames_per_job,
        "frames": shape.frames_per_job,
        "hosts": max(1, hosts),
    }


# The running frames' jobs as Cuebot's launch wrote them (nothing finished yet), started two hours
# before `now`; each running frame an open run, on its host's allocation, started 5 to 59 minutes ago.
LIVE_JOBS = """
INSERT INTO job_history (pk_job, pk_show, str_name, str_shot, str_user, pk_facility, pk_dept, int_ts_started,
                         dt_last_modified)
SELECT j.pk_job, j.pk_show, j.str_name, j.str_shot, j.str_user, j.pk_facility, j.pk_dept, %(now)s - 7200, current_date
  FROM job j WHERE j.pk_job IN (SELECT f.pk_job FROM frame f JOIN proc p ON p.pk_frame = f.pk_frame)
ON CONFLICT DO NOTHING
"""
OPEN_RUNS = """
INSERT INTO frame_history (pk_frame_history, pk_frame, pk_layer, pk_job, str_name, str_state, int_mem_reserved,
                           int_cores, str_host, pk_alloc, int_ts_started, dt_last_modified, int_gpus,
                           int_gpu_mem_reserved)
SELECT md5(%(ns)s || ':open:' || f.pk_frame)::uuid::text, f.pk_frame, f.pk_layer, f.pk_job, f.str_name, 'RUNNING',
       p.int_mem_reserved, p.int_cores_reserved, h.str_name, h.pk_alloc,
       %(now)s - 300 - ('x' || substr(md5(f.pk_frame), 1, 6))::bit(24)::int %% 3240, current_date,
       p.int_gpus_reserved, p.int_gpu_mem_reserved
  FROM frame f JOIN proc p ON p.pk_frame = f.pk_frame JOIN host h ON h.pk_host = p.pk_host
 WHERE NOT EXISTS (SELECT 1 FROM frame_history fh WHERE fh.pk_frame = f.pk_frame AND fh.int_ts_stopped = 0)
ON CONFLICT DO NOTHING
"""


def write_running(*, now: int, namespace: str) -> int:
    """An open run for every running frame that has none; returns the runs opened."""
    with connection.cursor() as cursor:
        cursor.execute(LIVE_JOBS, {"now": now})
        cursor.execute(OPEN_RUNS, {"now": now, "ns": namespace})
        return cursor.rowcount


def history_tables_here() -> bool:
    """Whether this database has Cuebot's history tables (a site's always has; a database this
    project attached to may have been built from Cuebot's tables alone)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('frame_history') IS NOT NULL AND to_regclass('job_history') IS NOT NULL")
        return cursor.fetchone()[0]


def write_history(*, shape: HistoryShape, hosts: int) -> HistoryWritten:
    """The demo farm's past (finished jobs and their runs up to `shape.until`) and present (an
    open run per running frame), in one transaction."""
    with transaction.atomic():
        runs = write_past(shape=shape, structure=demo_structure(), hosts=hosts)
        opened = write_running(now=shape.until, namespace=shape.namespace)
    return HistoryWritten(jobs=shape.jobs, runs=runs, open_runs=opened)
