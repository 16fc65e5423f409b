"""What the benches that run on the demo farm share: its size from the command line, and a median timer.

Imported by bench/recalculate_subs.py, bench/cuebot_drift.py and bench/maestro_farm.py once Django
is set up. --maestro-size is OpenCue Maestro's proof farm (simulator.farm_builder.MAESTRO_PROOF),
the size a site's farm is judged at.
"""

import argparse
import statistics
import time

from simulator.farm_builder import MAESTRO_PROOF, DemoFarmSize, DemoFarmSummary, build_demo_farm


def demo_farm_parser(*, description: str) -> argparse.ArgumentParser:
    """The size options (--shows, --hosts, --procs, --cores-per-host, or --maestro-size) and --rounds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--shows", type=int, default=20)
    parser.add_argument("--hosts", type=int, default=400)
    parser.add_argument("--procs", type=int, default=20000)
    parser.add_argument("--cores-per-host", type=int, default=0, help="0: enough for any host's share of the procs")
    parser.add_argument(
        "--maestro-size", action="store_true", help="OpenCue Maestro's proof farm; the four options above are ignored"
    )
    parser.add_argument("--rounds", type=int, default=7)
    return parser


def demo_farm_size(*, args: argparse.Namespace) -> DemoFarmSize:
    if args.maestro_size:
        return MAESTRO_PROOF
    return DemoFarmSize(shows=args.shows, hosts=args.hosts, procs=args.procs, cores_per_host=args.cores_per_host)


def build_timed(*, size: DemoFarmSize, name: str = "demo farm") -> DemoFarmSummary:
    """The demo farm completed to `size`; prints what it holds and how long that took."""
    started = time.perf_counter()
    summary = build_demo_farm(size=size)
    print(
        f"{name}: {summary.shows} shows, {summary.hosts} hosts ({summary.host_cores // 100:,} cores), "
        f"{summary.procs} procs ({summary.procs_added} added) in {time.perf_counter() - started:.1f} s"
    )
    return summary


def build_sized(*, args: argparse.Namespace) -> DemoFarmSize:
    """The demo farm completed to the size asked for; prints how long that took."""
    size = demo_farm_size(args=args)
    build_timed(size=size)
    return size


def demo_farm_from_arguments(*, description: str) -> argparse.Namespace:
    """The size asked for and --rounds; the demo farm completed to that size."""
    args = demo_farm_parser(description=description).parse_args()
    args.procs = build_sized(args=args).procs
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
