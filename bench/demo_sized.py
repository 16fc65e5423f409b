"""What the benches that run on the demo farm share: its size from the command line, and a median timer.

Imported by bench/recalculate_subs.py and bench/cuebot_drift.py once Django is set up.
"""

import argparse
import statistics
import time

from simulator.farm_builder import DemoFarmSize, build_demo_farm


def demo_farm_from_arguments(*, description: str) -> argparse.Namespace:
    """The size asked for (--shows, --hosts, --procs) and --rounds; the demo farm completed to that size."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--shows", type=int, default=20)
    parser.add_argument("--hosts", type=int, default=400)
    parser.add_argument("--procs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    build_demo_farm(size=DemoFarmSize(shows=args.shows, hosts=args.hosts, procs=args.procs))
    return args


def timed(fn, *, rounds: int, before=lambda: None) -> float:
    """The median of `rounds` runs of fn, in seconds, `before` run untimed ahead of each."""
    samples = []
    for _ in range(rounds):
        before()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
