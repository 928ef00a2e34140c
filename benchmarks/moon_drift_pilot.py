"""Reads the pilot of REPRODUCTION.md's "v4 MOON under drift" by the rules that plan fixed before it.

From the pilot's finished runs (``reproduce.py``'s layout under the block folder) it prints:
- the drift check (``drift_check.py``): FedAvg's clients at E = 10 against the reference row's (E = 2; v3's T5
  for the skewed pilot);
- R: the smallest of 10, 20, 30, 40, 50 where ``fedavg``'s mean ``test_acc`` over the seeds moves by under
  1 point against its value at round R - max(1, R // 5) (none: 50);
- min_lift: max(2, a third of ``fedavg``'s mean lift over its random-init ``test_acc`` at R);
- n: rule v3's (``power_v3.capped_n``: the 80% upper bound of the sd of the seeds' MOON - FedAvg differences at
  R, half-width 1 point, cap 24).

    python benchmarks/moon_drift_pilot.py runs/pilot_v4/moon_e10
    python benchmarks/moon_drift_pilot.py runs/pilot_v4/moon_skew --reference fedavg-t5
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from drift_check import check
from fedlight import stats
from power_v3 import CONFIDENCE, capped_n, lifts, pilot_runs, side

CANDIDATES = (10, 20, 30, 40, 50)
MOVE = 1.0  # points
HALF_WIDTH = 1.0
METRIC = "test_acc"


def mean_at(block: str, row: str, seeds: list[int], round_: int) -> float:
    """``row``'s mean ``test_acc`` (points) over ``seeds`` at ``round_``."""
    at = side(block, row, METRIC, round_)
    return float(np.mean([at[s] for s in seeds]))


def plateau_round(block: str, seeds: list[int]) -> tuple[int, list[str]]:
    """R by the plan's rule, with each candidate's move."""
    said = []
    for r in CANDIDATES:
        back = r - max(1, r // 5)
        move = mean_at(block, "fedavg", seeds, r) - mean_at(block, "fedavg", seeds, back)
        said.append(f"R = {r}: {move:+.2f} against round {back}")
        if abs(move) < MOVE:
            return r, said
    return CANDIDATES[-1], said + ["none by 50: R = 50"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("block", type=Path)
    parser.add_argument("--reference", default="fedavg-e2", help="the drift reference row (default fedavg-e2)")
    args = parser.parse_args()
    block = str(args.block)
    seeds = sorted(set.intersection(*(set(pilot_runs(block, row, METRIC)) for row in ("fedavg", "moon", args.reference))))
    if len(seeds) < stats.MIN_PILOT_SEEDS:
        raise SystemExit(f"the pilot has {len(seeds)} seeds with all three rows finished ({seeds}); the plan reads "
                         f"{stats.MIN_PILOT_SEEDS}")
    print(check(args.block, "fedavg", args.reference, set(seeds))[0])
    r, said = plateau_round(block, seeds)
    print("R: " + "; ".join(said) + f" -> R = {r}")
    lift = lifts(block, "fedavg", METRIC, r)
    each = [lift[s] for s in seeds]
    print(f"control fedavg at R: lift {np.mean(each):.2f} (per seed {', '.join(f'{x:.2f}' for x in each)}); "
          f"min_lift {max(2.0, float(np.mean(each)) / 3):.2f}")
    diff = side(block, "moon - fedavg", METRIC, r)
    diffs = [diff[s] for s in seeds]
    sd = float(np.std(diffs, ddof=1))
    _, shown = capped_n(stats.sd_upper(sd, len(diffs), CONFIDENCE), HALF_WIDTH)
    print(f"MOON - FedAvg at R over seeds {seeds}: mean {np.mean(diffs):+.2f}, sd {sd:.2f} "
          f"(per seed {', '.join(f'{d:+.2f}' for d in diffs)}); n = {shown}")


if __name__ == "__main__":
    main()
