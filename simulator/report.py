"""What a run counted, shared by every worker thread, and how it is printed."""

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

# Every cap a booking is checked against, as the rejections name them: a default run must
# refuse bookings at each (docs/simulator.md), or a scheduler that ignored it could pass.
CAP_KINDS = (
    "subscription burst",
    "folder cores",
    "folder gpus",
    "job cores",
    "job gpus",
    "layer cores",
    "layer gpus",
)


@dataclass(frozen=True)
class OverCap:
    """A booking whose INSERT left a key's SUM(proc) above the cap in force, in cores or GPUs;
    `started` and `checked` (time.monotonic()) bound the booking, from its script to the check."""

    table: str
    key: str
    show_id: str
    booked: int
    cap: int
    unit: str = "cores"
    started: float = 0.0
    checked: float = 0.0


def overlaps(windows: list[tuple[str, float, float]], name: str, started: float, checked: float) -> bool:
    """Whether a window of `name` (a key or show id: began, ended) overlaps [started, checked]."""
    return any(n == name and begin <= checked and started <= end for n, begin, end in windows)


@dataclass
class Stats:
    bookings: int = 0
    rejections: Counter = field(default_factory=Counter)
    rollbacks: int = 0
    releases: int = 0
    release_calls: Counter = field(default_factory=Counter)
    release_misses: int = 0
    faults: Counter = field(default_factory=Counter)
    reseed_cycles_run: int = 0
    reseed_cycles_skipped: int = 0
    # Keys a scheduler-like reseed (no in-flight overlay) wrote while live in-flight
    # operations touched them: each such write may have left the key reading low.
    reseed_keys_over_inflight: int = 0
    # Where the scheduler's own reseed runs (--reseeder scheduler): per key, the in-flight
    # amounts (cores, GPUs) its last write of that key ignored (how far below SUM(proc) that
    # write may have left it, until the key is written again), and when it last wrote
    # (time.monotonic()); counters seen below SUM(proc) within that reseed's documented bound,
    # and bookings past a cap by no more than the bound lets a key read low (each reported,
    # neither a violation: docs/redis-protocol.md).
    scheduler_ignored: dict[str, tuple[int, int]] = field(default_factory=dict)
    scheduler_wrote_at: float = float("-inf")
    low_within_scheduler_bound: int = 0
    over_cap_within_scheduler_bound: int = 0
    bootstraps: int = 0
    failovers: int = 0
    rebuilds_after_failover: int = 0
    # Redis calls of the bookers and the operator that failed (no master during a failover).
    redis_errors: Counter = field(default_factory=Counter)
    reseed_cycles_failed: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    # Rolled back whole by PostgreSQL (deadlock, serialization) and retried by the caller.
    transient_errors: Counter = field(default_factory=Counter)
    over_cap: list[OverCap] = field(default_factory=list)
    # Managed keys' counters below SUM(proc) in a quiet sample (no operation under way), taken
    # before each reseed (what releases and bookings left) and after it (what it wrote).
    low_counters: list[tuple] = field(default_factory=list)
    quiet_samples: int = 0
    # PG accounting rows of Cuebot-managed shows seen below zero during the run.
    negative_pg_rows: list[tuple] = field(default_factory=list)
    # When an operator lowered a key's cap, or switched a show's owner: (key or show id,
    # began, ended), time.monotonic(). A booking over its cap is excused only if its own
    # window overlaps one of these on its key or show: the cap or the owner of the moment.
    cap_lowerings: list[tuple[str, float, float]] = field(default_factory=list)
    switches: list[tuple[str, float, float]] = field(default_factory=list)
    # release-stall: publishes sent after their in-flight entry expired, how many found the
    # expired entry still there (not purged by a reseed yet), and every counter one of them
    # lowered: (key, field, before, after).
    stalled_publishes: int = 0
    stalled_publishes_entry_expired: int = 0
    reseeds_deferred_for_stalls: int = 0
    # Procs of scheduler-managed shows released in process once the run's last reseed was done:
    # what the final check judges exactly (Redis must be left exactly at SUM(proc)).
    releases_after_last_reseed: int = 0
    expired_inflight_applied: list[tuple] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def count(self, counter: str, label: str, amount: int = 1) -> None:
        with self._lock:
            getattr(self, counter)[label] += amount

    def record(self, collection: str, item: object) -> None:
        with self._lock:
            target = getattr(self, collection)
            target.append(item) if isinstance(target, list) else target.add(item)

    def note_scheduler_write(
        self, *, keys_written: frozenset[str], ignored: dict[str, tuple[int, int]], complete: bool
    ) -> None:
        """A write of the scheduler-like reseed: each key written now carries what this write
        ignored (nothing, for most), in place of what an earlier write left."""
        with self._lock:
            for key in keys_written:
                self.scheduler_ignored.pop(key, None)
            self.scheduler_ignored.update(ignored)
            if complete:
                self.scheduler_wrote_at = time.monotonic()

    def scheduler_ignored_now(self) -> dict[str, tuple[int, int]]:
        with self._lock:
            return dict(self.scheduler_ignored)

    def counted_over_cap(self) -> list[OverCap]:
        with self._lock:
            return [
                v
                for v in self.over_cap
                if not overlaps(self.cap_lowerings, v.key, v.started, v.checked)
                and not overlaps(self.switches, v.show_id, v.started, v.checked)
            ]


@dataclass(frozen=True)
class Report:
    seed: int
    seconds: float
    farm: dict
    stats: Stats
    drift_rows: list
    negative_counters: list[tuple[str, str, int]]
    faults_pending: dict[str, int]
    # Cuebot-managed shows' PG rows that differ from SUM(proc) after the final reconcile.
    pg_drift_rows: list = field(default_factory=list)
    # Managed counters against SUM(proc) once the workers stopped and every in-flight entry
    # settled, before the final reseed rewrites them: never low; exact when no fault of the
    # run may leave Redis high (exactness_judged), which catches a release that was lost.
    low_before_final_reseed: list = field(default_factory=list)
    high_before_final_reseed: list = field(default_factory=list)
    exactness_judged: bool = False
    # Counters release.lua found below what a release took off (cuebot_acct_release_clamped_total
    # over the run): each proves a counter was low before, wherever no sample fell.
    releases_clamped: int = 0

    @property
    def invariants(self) -> dict[str, int]:
        return {
            "over_cap": len(self.stats.counted_over_cap()),
            "drift_after_reconcile": len(self.drift_rows),
            "negative_counters": len(self.negative_counters),
            "low_counters_sampled": len(self.stats.low_counters),
            "low_before_final_reseed": len(self.low_before_final_reseed),
            "high_before_final_reseed": len(self.high_before_final_reseed) if self.exactness_judged else 0,
            "releases_found_counter_low": self.releases_clamped,
            "negative_pg_rows": len(self.stats.negative_pg_rows),
            "pg_drift_after_reconcile": len(self.pg_drift_rows),
            "expired_inflight_applied": len(self.stats.expired_inflight_applied),
            "worker_errors": sum(self.stats.errors.values()),
        }

    @property
    def ok(self) -> bool:
        return not any(self.invariants.values())

    def as_dict(self) -> dict:
        return {**self._counts(), **self._judged(), "ok": self.ok}

    def _counts(self) -> dict:
        s = self.stats
        return {
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
            "farm": self.farm,
            "bookings": s.bookings,
            "bookings_per_second": round(s.bookings / self.seconds, 1) if self.seconds else 0,
            "rejections": dict(sorted(s.rejections.items())),
            "refused_at_cap": {kind: s.rejections[kind] for kind in CAP_KINDS},
            "rollbacks": s.rollbacks,
            "quiet_samples": s.quiet_samples,
            "releases": s.releases,
            "release_calls": dict(sorted(s.release_calls.items())),
            "release_misses": s.release_misses,
            "faults": {kind: s.faults[kind] for kind in sorted(s.faults)},
            "faults_not_injected": self.faults_pending,
            "reseed": {
                "cycles_run": s.reseed_cycles_run,
                "cycles_skipped": s.reseed_cycles_skipped,
                "bootstraps": s.bootstraps,
                "cycles_failed": dict(s.reseed_cycles_failed),
                "keys_written_over_inflight": s.reseed_keys_over_inflight,
                "failovers": s.failovers,
                "rebuilds_after_failover": s.rebuilds_after_failover,
            },
            "redis_errors": dict(s.redis_errors),
            "stalled_publishes": {
                "sent": s.stalled_publishes,
                "entry_expired": s.stalled_publishes_entry_expired,
                "reseeds_deferred": s.reseeds_deferred_for_stalls,
            },
            "excluded": {"cap_lowerings": len(s.cap_lowerings), "switches": len(s.switches)},
            "within_scheduler_bound": {
                "low_counters_sampled": s.low_within_scheduler_bound,
                "over_cap": s.over_cap_within_scheduler_bound,
            },
        }

    def _judged(self) -> dict:
        s = self.stats
        return {
            "exactness_judged": self.exactness_judged,
            "releases_after_last_reseed": s.releases_after_last_reseed,
            "over_cap_excluded": len(s.over_cap) - len(s.counted_over_cap()),
            "invariants": self.invariants,
            "errors": dict(s.errors),
            "transient_errors": dict(s.transient_errors),
            "over_cap_examples": [vars(v) for v in s.counted_over_cap()[:10]],
            "drift_examples": [str(r) for r in self.drift_rows[:10]],
            "negative_examples": [list(n) for n in self.negative_counters[:10]],
            "low_examples": [list(n) for n in self.stats.low_counters[:10]],
            "final_low_examples": [list(n) for n in self.low_before_final_reseed[:10]],
            "final_high_examples": [list(n) for n in self.high_before_final_reseed[:10]]
            if self.exactness_judged
            else [],
            "negative_pg_examples": [list(n) for n in self.stats.negative_pg_rows[:10]],
            "expired_applied_examples": [list(n) for n in self.stats.expired_inflight_applied[:10]],
            "pg_drift_examples": [list(n) for n in self.pg_drift_rows[:10]],
        }

    def as_text(self) -> str:
        d = self.as_dict()
        lines = [*self._summary(d), "", "invariants (all must be 0):"]
        lines += [
            f"  {name:<26}{value:>6}  {'ok' if value == 0 else 'FAILED'}" for name, value in d["invariants"].items()
        ]
        if d["faults_not_injected"]:
            lines.append(f"faults scheduled but not injected: {d['faults_not_injected']}")
        for title, rows in (
            ("errors", d["errors"].items()),
            ("over cap", d["over_cap_examples"]),
            ("drift", d["drift_examples"]),
            ("negative", d["negative_examples"]),
            ("low", d["low_examples"]),
            ("low before the final reseed", d["final_low_examples"]),
            ("expired in-flight entry applied", d["expired_applied_examples"]),
            ("high before the final reseed", d["final_high_examples"]),
            ("negative PG", d["negative_pg_examples"]),
            ("PG drift", d["pg_drift_examples"]),
        ):
            for row in rows:
                lines.append(f"  {title}: {row}")
        lines.append("")
        lines.append("OK: every invariant holds" if self.ok else "FAILED: an invariant does not hold")
        return "\n".join(lines)

    def _summary(self, d: dict) -> list[str]:
        return [
            f"farm simulation: seed {d['seed']}, {d['seconds']} s, {d['farm']}",
            "",
            f"  bookings              {d['bookings']:>10}  ({d['bookings_per_second']}/s)",
            f"  rejections            {sum(d['rejections'].values()):>10}  {d['rejections']}",
            f"  refused at each cap   {min(d['refused_at_cap'].values()):>10}  (the fewest; {d['refused_at_cap']})",
            f"  rollbacks             {d['rollbacks']:>10}",
            f"  quiet samples         {d['quiet_samples']:>10}",
            f"  releases              {d['releases']:>10}  calls {d['release_calls']}, not found {d['release_misses']}",
            f"  faults injected       {sum(d['faults'].values()):>10}  {d['faults']}",
            f"  reseed cycles run     {d['reseed']['cycles_run']:>10}",
            f"  reseed cycles skipped {d['reseed']['cycles_skipped']:>10}",
            f"  reseed cycles failed  {sum(d['reseed']['cycles_failed'].values()):>10}  {d['reseed']['cycles_failed']}",
            f"  keys reseeded over in-flight operations (no overlay) {d['reseed']['keys_written_over_inflight']}",
            f"  empty-Redis bootstraps{d['reseed']['bootstraps']:>10}  (after {d['faults'].get('redis-restart', 0)} redis-restart "
            f"and {d['faults'].get('redis-kill', 0)} redis-kill faults)",
            f"  failovers noticed     {d['reseed']['failovers']:>10}  rebuilt {d['reseed']['rebuilds_after_failover']} "
            f"(after {d['faults'].get('failover', 0)} failover faults; Redis errors {d['redis_errors']})",
            f"  transient PG errors   {sum(d['transient_errors'].values()):>10}  {d['transient_errors']}",
            f"  stalled publishes     {d['stalled_publishes']['sent']:>10}  (sent after their in-flight entry expired; "
            f"{d['stalled_publishes']['entry_expired']} found it there, not purged by a reseed yet; "
            f"{d['stalled_publishes']['reseeds_deferred']} reseed cycles deferred for them)",
            f"  over cap, excused     {d['over_cap_excluded']:>10}  (booked while their cap was lowered ({d['excluded']['cap_lowerings']} "
            f"lowerings) or their show switched ({d['excluded']['switches']} switches))",
            f"  within the scheduler's reseed bound: {d['within_scheduler_bound']['low_counters_sampled']} counters "
            f"sampled below SUM(proc), {d['within_scheduler_bound']['over_cap']} bookings past a cap "
            "(--reseeder scheduler: what its reseed may leave low, docs/redis-protocol.md)",
            f"  exactness judged      {'yes' if d['exactness_judged'] else 'no':>10}  "
            + (
                f"({d['releases_after_last_reseed']} scheduler-managed procs released after the last reseed)"
                if d["exactness_judged"]
                else "(a fault of this run may leave Redis high, or no scheduler-managed proc was released after "
                f"the last reseed: {d['releases_after_last_reseed']} were)"
            ),
        ]


@dataclass(frozen=True)
class EraReport:
    """The NOTIFY and Maestro eras' report: their counts and invariants as one dict, printed one
    line a value; `ok` only when every invariant is 0."""

    data: dict

    @property
    def ok(self) -> bool:
        return bool(self.data["ok"])

    def as_dict(self) -> dict:
        return self.data

    def as_text(self) -> str:
        return "\n".join(f"{name:34s} {value}" for name, value in self.data.items())
