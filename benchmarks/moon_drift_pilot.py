"""Reads the pilot of REPRODUCTION.md's "v4 MOON under drift" by the rules that plan fixed before it.

From the pilot's finished runs (``reproduce.py``'s layout under the block folder) it prints:
- the drift check (``drift_check.py``): FedAvg's clients at E = 10 against the reference row's (E = 2; v3's T5
  for the skewed pilot);
- R: the smallest of 10, 20, 30, 40, 50 where ``fedavg``'s mean ``test_acc`` over the seeds moves by under
  1 point against its value at round R - max(1, R // 5) (none: 50);
- min_lift: max(2, a third of ``fedavg``'s mean lift over its random-init ``test_acc`` at R);
- n: rule v3's (``fedlight.stats.seeds_from_pilot``: the 80% upper bound of the sd of the seeds' MOON - FedAvg
  differences at R, half-width 1 point, cap 24).

    python benchmarks/moon_drift_pilot.py runs/pilot_v4/moon_e10
    python benchmarks/moon_drift_pilot.py runs/pilot_v4/moon_skew --reference fedavg-t5
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
from scipy.stats import t as t_dist

from drift_check import RATIO, drift_by_seed
from fedlight import stats

CANDIDATES = (10, 20, 30, 40, 50)
MOVE = 1.0  # points
CAP, HALF_WIDTH = 24, 1.0


def runs(block: Path, row: str) -> dict[int, dict]:
    """``row``'s finished results by seed."""
    out = {}
    for path in sorted((block / row).glob("seed*/runs/*/results.json")):
        results = json.loads(path.read_text())
        if results.get("rounds_completed") == results["recipe"]["rounds"]:
            out[int(re.search(r"seed(\d+)", str(path.relative_to(block))).group(1))] = results
    return out


def acc(results: dict, round_: int) -> float:
    """``test_acc`` at ``round_``, points."""
    return 100 * next(h["test_acc"] for h in results["history"] if h["round"] == round_)


def plateau_round(fedavg: dict[int, dict]) -> tuple[int, list[str]]:
    """R by the plan's rule, with each candidate's move."""
    said = []
    for r in CANDIDATES:
        back = r - max(1, r // 5)
        move = float(np.mean([acc(x, r) for x in fedavg.values()]) - np.mean([acc(x, back) for x in fedavg.values()]))
        said.append(f"R = {r}: {move:+.2f} against round {back}")
        if abs(move) < MOVE:
            return r, said
    return CANDIDATES[-1], said + ["none by 50: R = 50"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("block", type=Path)
    parser.add_argument("--reference", default="fedavg-e2", help="the drift reference row (default fedavg-e2)")
    args = parser.parse_args()
    fedavg, moon, e2 = (runs(args.block, r) for r in ("fedavg", "moon", args.reference))
    both = sorted(set(fedavg) & set(moon) & set(e2))
    if len(both) < stats.MIN_PILOT_SEEDS:
        raise SystemExit(f"the pilot has {len(both)} seeds with all three rows finished ({both}); the plan reads "
                         f"{stats.MIN_PILOT_SEEDS}")
    row, ref = drift_by_seed(args.block, "fedavg"), drift_by_seed(args.block, args.reference)
    seeds = sorted(set(row) & set(ref) & set(both))
    mean_row, mean_ref = np.mean([row[s] for s in seeds]), np.mean([ref[s] for s in seeds])
    passes = all(row[s] > ref[s] for s in seeds) and mean_row >= RATIO * mean_ref
    print(f"drift check over seeds {seeds}: D(fedavg) {mean_row:.5f}, D({args.reference}) {mean_ref:.5f} "
          f"({mean_row / mean_ref:.2f}x), fedavg further in {sum(row[s] > ref[s] for s in seeds)} of {len(seeds)}: "
          f"{'passes' if passes else 'fails'}")
    fedavg = {s: fedavg[s] for s in both}
    r, said = plateau_round(fedavg)
    print("R: " + "; ".join(said) + f" -> R = {r}")
    lifts = [acc(fedavg[s], r) - 100 * fedavg[s]["baseline"]["test_acc"] for s in both]
    min_lift = max(2.0, float(np.mean(lifts)) / 3)
    print(f"control fedavg at R: lift {np.mean(lifts):.2f} (per seed {', '.join(f'{x:.2f}' for x in lifts)}); "
          f"min_lift {min_lift:.2f}")
    diffs = [acc(moon[s], r) - acc(fedavg[s], r) for s in both]
    n, sd = stats.seeds_from_pilot(diffs, HALF_WIDTH, cap=CAP), float(np.std(diffs, ddof=1))
    reach = float(t_dist.ppf(0.975, CAP - 1)) * stats.sd_upper(sd, len(diffs), 0.8) / np.sqrt(CAP)
    print(f"MOON - FedAvg at R over seeds {both}: mean {np.mean(diffs):+.2f}, sd {sd:.2f} "
          f"(per seed {', '.join(f'{d:+.2f}' for d in diffs)}); n = "
          + (str(n) if n is not None else f"{CAP} (the cap; it reaches +-{reach:.2f})"))


if __name__ == "__main__":
    main()
