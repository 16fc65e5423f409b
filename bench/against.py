"""A change against the tree before it: bench/release.py run in turns on a git revision and on
this tree, same machine, same hour, its ratios side by side.

    .venv/bin/python bench/against.py --base 45b8489 [--runs 5] \
        [--bench-args "--skip http --skip cuebot --skip notify"]

A ratio against the floor moves with the machine and the hour more than with most changes (the
tree of issue 19 read its batches at 0.71 of their floor on one machine and 0.62 on another, the
tree before it 0.74 and 0.64), so "at least where it was" is a comparison of two trees, measured
in turns so that a change of load hits both. The base revision is checked out in a temporary git
worktree and given this tree's bench/release.py and bench/floor_release.lua, so both trees are
measured by the same bench, with this interpreter and this environment (the base must run against
the database as it is migrated now). The worktree is removed afterwards. Printed, never asserted.
"""

import argparse
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_FILES = ("bench/release.py", "bench/floor_release.lua")
# A row of bench/release.py's tables: the path (52 columns), releases/s, the median ratio (spread).
RATIO_ROW = re.compile(r"^(?P<path>.{52}) +\d+ +(?P<ratio>\d+\.\d+) \(")


def ratios(*, tree: Path, bench_args: list[str]) -> dict[str, float]:
    """Each row's median ratio against its floor, from one run of the bench in `tree`."""
    run = subprocess.run([sys.executable, "bench/release.py", *bench_args], cwd=tree, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"bench/release.py failed in {tree}:\n{run.stdout}{run.stderr}")
    return {m["path"].strip(): float(m["ratio"]) for m in map(RATIO_ROW.match, run.stdout.splitlines()) if m}


def base_tree(*, revision: str, into: Path) -> Path:
    """The revision in a worktree of its own, with this tree's bench."""
    tree = into / "base"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), revision], cwd=ROOT, check=True)
    for name in BENCH_FILES:
        (tree / name).write_bytes((ROOT / name).read_bytes())
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to measure this tree against")
    parser.add_argument("--runs", type=int, default=5, help="bench runs per tree, in turns")
    parser.add_argument(
        "--bench-args",
        default="--skip http --skip cuebot --skip notify",
        help="arguments for bench/release.py (quoted, one string)",
    )
    options = parser.parse_args()
    bench_args = shlex.split(options.bench_args)
    seen: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-against-") as scratch:
        base = base_tree(revision=options.base, into=Path(scratch))
        try:
            for run in range(options.runs):
                for side, tree in (("base", base), ("this", ROOT)):
                    for path, ratio in ratios(tree=tree, bench_args=bench_args).items():
                        seen.setdefault(path, {"base": [], "this": []})[side].append(ratio)
                print(f"run {run + 1} of {options.runs} done", file=sys.stderr)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=True)
    print(
        f"bench/release.py {options.bench_args}, {options.runs} runs per tree in turns; "
        f"median ratio to its floor per run, then the median of the runs"
    )
    print(f"{'path':52s}  {options.base[:12]:>12s}  {'this tree':>9s}  {'change':>6s}  runs (base | this)")
    for path, sides in seen.items():
        if len(sides["base"]) != options.runs or len(sides["this"]) != options.runs:
            continue  # a row one of the trees does not print
        if set(sides["base"]) | set(sides["this"]) == {1.0}:
            continue  # a floor, against itself
        base_median, this_median = statistics.median(sides["base"]), statistics.median(sides["this"])
        runs = f"{' '.join(f'{r:.2f}' for r in sides['base'])} | {' '.join(f'{r:.2f}' for r in sides['this'])}"
        print(f"{path:52s}  {base_median:12.2f}  {this_median:9.2f}  {this_median - base_median:+6.2f}  {runs}")


if __name__ == "__main__":
    main()
