"""What a NOTIFY-era run counts, shared by its threads."""

import threading
from collections import Counter
from dataclasses import dataclass, field

from simulator.report import OverCap


@dataclass
class NotifyStats:
    bookings: int = 0
    rejections: Counter = field(default_factory=Counter)
    releases: int = 0
    committed_cores: int = 0  # released cores of committed scheduler-managed releases
    committed_gpus: int = 0
    heard_cores: int = 0  # released cores heard on acct_release, applied or dropped by a recompute
    heard_gpus: int = 0
    dropped_by_recompute: int = 0
    markers_sent_again: int = 0  # sync markers sent while no listener was there, sent again
    cap_changes: int = 0
    recomputes: int = 0
    samples: int = 0
    faults: Counter = field(default_factory=Counter)
    transient_errors: Counter = field(default_factory=Counter)
    low: list[tuple] = field(default_factory=list)  # (key, field, store, truth)
    unparsable: int = 0
    # Bookings whose committed SUM(proc) exceeded a cap the model knew (simulator.invariants),
    # and those past a cap it had not heard yet.
    over_cap: list[OverCap] = field(default_factory=list)
    over_cap_excused: int = 0
    # Bookings past a cap only when the procs of FINISHED (killed) jobs still running count.
    over_cap_by_killed_jobs_procs: int = 0
    # Releases heard for a job after its kill's marker: (job, cores, gpus). The NOTIFY era sends
    # none for a FINISHED job (docs/notify.md): its procs are out of the recompute already.
    killed_job_releases: list[tuple] = field(default_factory=list)
    worker_errors: list[str] = field(default_factory=list)  # an unexpected error ended a worker
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **amounts: int) -> None:
        """For counts that several worker threads move: `+=` on an attribute is a read and a
        write, and two releasers interleaving there lose a release from the exactness check."""
        with self.lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def count(self, counter: str, key: str) -> None:
        with self.lock:
            getattr(self, counter)[key] += 1
