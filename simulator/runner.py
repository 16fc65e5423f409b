"""The one runner: any era's simulation played the same way (simulator.era). The era is held
and its farm built, the workers start, the main thread does the era's part until the workers'
time is up, they stop (however the run ends: simulator.stopping), and the era judges the run."""

import time
from collections.abc import Callable

from simulator.era import EraSimulation, RunOptions, RunReport
from simulator.stopping import Threads

Progress = Callable[[float, dict[str, int]], None]
PROGRESS_SECONDS = 0.25  # between two updates of the progress bar


def run(*, era: EraSimulation, options: RunOptions, progress: Progress = lambda elapsed, counts: None) -> RunReport:
    with era.played(options) as play:
        with Threads(stop=play.stop) as workers:
            era.begin(play)
            started = time.monotonic()
            for role in era.roles(play):
                for index in range(role.count):
                    workers.start(role.body, play, index, name=f"sim-{role.name}-{index}")
            shown = 0.0
            while (remaining := era.stop_at(play) - time.monotonic()) > 0:
                pause = era.tick(play)
                if (now := time.monotonic()) >= shown + PROGRESS_SECONDS:  # not at every tick: a bar costs
                    progress(now - started, era.counts(play))
                    shown = now
                if play.stop.wait(min(pause, remaining)):
                    break
        seconds = time.monotonic() - started
        progress(seconds, era.counts(play))
        return era.report(play, seconds=seconds)
