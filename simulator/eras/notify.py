"""The NOTIFY era's simulation (OpenCue main, #2472 to #2533): a model of that era's scheduler
keeps its counters in memory, books against them, INSERTs the procs, hears releases and cap
changes on its own LISTEN connection and recomputes from SUM(proc) on its interval. Cuebot's
side is this project's release path and limit services in the NOTIFY era (ACCOUNTING_SCHEDULER=notify,
no Redis). Its workers are simulator.workers.notify's.

Invariants, checked on quiet samples (every worker between two operations, every notification
heard up to a marker) and at the end: the store never below SUM(proc), GPUs as well as cores;
with no connection lost, every committed release heard exactly once and nothing from a
rolled-back one (cores heard == cores committed), and every cap change heard.
"""

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection

from infra.era import NOTIFY
from simulator import service_era
from simulator.era import Role, RunOptions, progress_counts
from simulator.own_farm import build_sim_farm
from simulator.report import CAP_KINDS, EraReport
from simulator.stopping import Threads
from simulator.workers.gate import Gate
from simulator.workers.notify.booking import booker
from simulator.workers.notify.faults import FAULT_PERIOD_SECONDS, NOTIFY_FAULTS, inject, parse_notify_faults
from simulator.workers.notify.model import Store, load_caps, snapshot
from simulator.workers.notify.operating import operator
from simulator.workers.notify.play import NotifyPlay
from simulator.workers.notify.releasing import release_killed_jobs, releaser
from simulator.workers.notify.scheduler import Scheduler
from simulator.workers.notify.stats import NotifyStats

SAMPLE_SECONDS = 1.5
Counters = dict[tuple[str, str], tuple[int, int]]


@dataclass(frozen=True)
class NotifyEra:
    name: str = "notify"
    fault_kinds: tuple[str, ...] = NOTIFY_FAULTS

    def parse_faults(self, text: str) -> tuple[str, ...]:
        return parse_notify_faults(text)

    def refusal(self, options: RunOptions) -> str | None:
        return "--era notify builds its own farm; --existing is for the Redis era" if options.existing else None

    def wants_http_token(self, options: RunOptions) -> bool:
        return False

    @contextmanager
    def played(self, options: RunOptions) -> Iterator[NotifyPlay]:
        """The model listens until the final checks are done (the report is made inside this
        block); the workers stop before them."""
        with service_era.held(NOTIFY):
            farm = build_sim_farm(
                shows=options.shows, hosts=options.hosts, jobs=options.jobs, rng=random.Random(options.seed)
            )
            stats, store, scheduler_stop = NotifyStats(), Store(), threading.Event()
            scheduler = Scheduler(farm=farm, store=store, stats=stats, stop=scheduler_stop)
            play = NotifyPlay(
                farm=farm, store=store, stats=stats, scheduler=scheduler, gate=Gate(), stop=threading.Event(),
                options=options, rng=random.Random(options.seed),
            )  # fmt: skip
            load_caps(store, farm)
            with Threads(stop=scheduler_stop) as model:
                model.start(scheduler.run, name="sim-scheduler")
                scheduler.listening()  # listening before anything is released
                scheduler.recompute_now()  # the first recompute seeds the counters
                yield play

    def roles(self, play: NotifyPlay) -> list[Role]:
        options = play.options
        return [
            Role("booker", booker, options.bookers),
            Role("releaser", releaser, options.releasers),
            Role("operator", operator),
        ]

    def begin(self, play: NotifyPlay) -> None:
        """Each selected kind fires at least once, in the first half of the run."""
        play.started = now = time.monotonic()
        seconds = play.options.seconds
        play.faults_due = {
            kind: now + play.rng.uniform(0.2, min(FAULT_PERIOD_SECONDS[kind], seconds / 2))
            for kind in play.faults
            if kind in FAULT_PERIOD_SECONDS
        }
        play.next_sample = now + SAMPLE_SECONDS

    def stop_at(self, play: NotifyPlay) -> float:
        return play.started + play.options.seconds

    def tick(self, play: NotifyPlay) -> float:
        """The faults when due, the killed jobs' releases, the quiet samples; a scheduler model
        that died ends the run at once."""
        play.scheduler.raise_if_died()
        now = time.monotonic()
        for kind, when in play.faults_due.items():
            if now >= when:
                inject(play, kind)
                play.faults_due[kind] = now + FAULT_PERIOD_SECONDS[kind]
        release_killed_jobs(play)
        if now >= play.next_sample:
            quiet_sample(play)
            play.next_sample = time.monotonic() + SAMPLE_SECONDS
        return 0.05

    def counts(self, play: NotifyPlay) -> dict[str, int]:
        return progress_counts(play.stats)

    def report(self, play: NotifyPlay, *, seconds: float) -> EraReport:
        # The kills whose procs were still to go: released now, before the final checks.
        play.kill_releases = [(0.0, job_id) for _, job_id in play.kill_releases]
        release_killed_jobs(play)
        quiet_sample(play)
        play.scheduler.recompute_now()
        final_store = play.store.counters()
        with connection.cursor() as cursor:
            truth = snapshot(cursor, play.farm.show_ids)
        return EraReport(report(play, seconds=seconds, final_store=final_store, truth=truth))


def quiet_sample(play: NotifyPlay) -> None:
    """Workers held between operations, every committed notification heard: the store may not
    read below SUM(proc) anywhere."""
    with play.gate.quiet():
        play.scheduler.sync()
        store = play.store.counters()
        with connection.cursor() as cursor:
            truth = snapshot(cursor, play.farm.show_ids)
    play.stats.samples += 1
    for key, (cores, gpus) in truth.items():
        have = store.get(key, (0, 0))
        for name, mine, real in (("cores", have[0], cores), ("gpus", have[1], gpus)):
            if mine < real:
                play.stats.low.append((key, name, mine, real))


def caps_missing(play: NotifyPlay) -> list[tuple]:
    """Every cap change the model has not heard, judged only when no connection was lost."""
    if play.scheduler.lost_connection:
        return []
    caps = play.store.caps
    return [
        (key, name, caps[key].get(name), value)
        for key, expected in play.caps_expected.items()
        for name, value in expected.items()
        if caps[key].get(name) != value
    ]


def invariants(play: NotifyPlay, *, missing: list[tuple], final_store: Counters, truth: Counters) -> dict[str, int]:
    stats, exact = play.stats, play.scheduler.lost_connection is False
    heard, committed = (stats.heard_cores, stats.heard_gpus), (stats.committed_cores, stats.committed_gpus)
    return {
        "store_below_sum_proc": len(stats.low),
        "store_differs_after_final_recompute": sum(
            1 for key, value in truth.items() if final_store.get(key, (0, 0)) != value
        ),
        "releases_not_heard_exactly_once": 0 if not exact else int(heard != committed),
        "cap_changes_not_heard": len(missing),
        "unparsable_payloads": stats.unparsable,
        "killed_job_releases_heard": len(stats.killed_job_releases),
        "over_cap": len(stats.over_cap),
        "worker_errors": len(stats.worker_errors),
    }


def report(play: NotifyPlay, *, seconds: float, final_store: Counters, truth: Counters) -> dict:
    stats, missing = play.stats, caps_missing(play)
    judged = invariants(play, missing=missing, final_store=final_store, truth=truth)
    return {
        "era": "notify",
        "seconds": seconds,
        "faults": dict(stats.faults),
        "bookings": stats.bookings,
        "rejections": dict(stats.rejections),
        "refused_at_cap": {kind: stats.rejections[kind] for kind in CAP_KINDS},
        "releases": stats.releases,
        "cap_changes": stats.cap_changes,
        "recomputes": stats.recomputes,
        "quiet_samples": stats.samples,
        "released_cores": {"committed": stats.committed_cores, "heard": stats.heard_cores},
        "released_gpus": {"committed": stats.committed_gpus, "heard": stats.heard_gpus},
        "releases_dropped_by_recompute": stats.dropped_by_recompute,
        "markers_sent_again": stats.markers_sent_again,
        "exactness_judged": play.scheduler.lost_connection is False,
        "transient_errors": dict(stats.transient_errors),
        "low_samples": [list(map(str, low)) for low in stats.low[:10]],
        "caps_missing": [list(map(str, c)) for c in missing[:10]],
        "killed_job_releases": [list(map(str, r)) for r in stats.killed_job_releases[:10]],
        "over_cap_excused": stats.over_cap_excused,
        "over_cap_by_killed_jobs_procs": stats.over_cap_by_killed_jobs_procs,
        "over_cap_examples": [vars(v) for v in stats.over_cap[:10]],
        "worker_error_messages": stats.worker_errors[:10],
        "invariants": judged,
        "ok": not any(judged.values()),
    }
