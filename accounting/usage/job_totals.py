"""The jobs finished in a period whose runs do not add up to Cuebot's own total in job_history,
and why: what `manage.py acct_usage --reconcile` lists."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from accounting.usage import history
from accounting.usage.periods import epoch
from accounting.usage.query import UsageQuery


@dataclass(frozen=True)
class JobMismatch:
    """A job finished in the period whose runs do not add up to job_history's core time, as
    Cuebot rounds each frame (max(1, floor(seconds x cores / 100)) core-seconds)."""

    job: str
    show: str
    stopped: datetime
    core_seconds: Decimal  # the runs' exact core-seconds, as the report counts them
    rounded_core_seconds: int  # the same runs as Cuebot rounds each frame
    job_history_core_seconds: int  # int_core_time_success + int_core_time_fail
    why: str


def _why(*, disabled: bool, open_runs: int, rounded: int, recorded: int) -> str:
    reasons = []
    if disabled:
        reasons.append("DISABLE_HISTORY is set: runs went unrecorded")
    if open_runs:
        reasons.append(f"{open_runs} open run(s) of frames no longer running (not counted)")
    if recorded > rounded and not disabled:
        reasons.append("runs missing from frame_history (a run deleted, or never recorded)")
    if rounded > recorded:
        reasons.append("the runs hold more than Cuebot counted for the job")
    return "; ".join(reasons)


def reconcile_jobs(*, query: UsageQuery) -> list[JobMismatch]:
    """The jobs finished in the query's period whose runs differ from job_history's core time."""
    with history.reading_history() as cursor:
        disabled = history.health(cursor=cursor)[0]
        rows = history.finished_jobs(cursor=cursor, lo=epoch(moment=query.since), hi=epoch(moment=query.until))
    mismatches = []
    for _, name, show, stopped, recorded, exact, rounded, open_runs in sorted(rows, key=lambda row: (row[2], row[1])):
        if rounded == recorded and not open_runs:
            continue
        mismatches.append(
            JobMismatch(
                job=name,
                show=show,
                stopped=datetime.fromtimestamp(stopped, tz=query.since.tzinfo),
                core_seconds=Decimal(exact) / 100,
                rounded_core_seconds=int(rounded),
                job_history_core_seconds=int(recorded),
                why=_why(disabled=disabled, open_runs=open_runs, rounded=rounded, recorded=recorded),
            )
        )
    return mismatches
