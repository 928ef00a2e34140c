"""The compare tutorial's budget (docs/tutorials/compare-methods.md, step 3), from the archived runs of MOON's
v3 block: the sweep the tutorial runs (``fedavg_fmnist`` with ``data.subset=10000 clients.num=5 rounds=60``),
24 seeds an arm.

Prints, for FedAvg and MOON, the plateau check (``stats.plateau_gain``: the mean curve's gain over the last
fifth of R rounds; under 1 point passes) at R = 10, 15, ..., 60 on test accuracy, the probe and kNN; the
paired MOON - FedAvg difference on the probe at R = 10, 30 and 60 (the block's first three seeds, and all);
each arm's lift over its random-init value at R = 60; and how many MOON seeds' test accuracy fell from
round 1 to round 2, where its term switches on.

    python benchmarks/tutorial_budget.py
"""

from __future__ import annotations

import json
import statistics
import tarfile
import tempfile
from pathlib import Path

from fedlight import stats

ARCHIVE = Path(__file__).resolve().parent / "results/v3-runs.tar.xz"
ARMS, METRICS, HORIZONS = ("fedavg", "moon"), ("test_acc", "linear_probe_acc", "knn_acc"), tuple(range(10, 61, 5))


def load_runs(folder: Path) -> dict[str, dict[int, dict]]:
    """arm -> seed -> results.json of the archived MOON block."""
    return {arm: {json.loads(p.read_text())["recipe"]["seed"]: json.loads(p.read_text())
                  for p in sorted(folder.glob(f"runs/v3/moon/{arm}/seed*/runs/*/results.json"))} for arm in ARMS}


def at(run: dict, metric: str, round_: int) -> float:
    """``metric`` in points after ``round_`` rounds (round 0: the random-init value)."""
    return 100 * (run["baseline"][metric] if round_ == 0 else run["history"][round_ - 1][metric])


def plateau_gain(runs: dict[int, dict], metric: str, horizon: int) -> float:
    """The gain of the mean curve, cut at ``horizon``, over its last fifth."""
    curve = {r: statistics.fmean(at(run, metric, r) for run in runs.values()) for r in range(horizon + 1)}
    return stats.plateau_gain(curve)[2]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(ARCHIVE) as archive:
            archive.extractall(tmp, members=[m for m in archive if "/v3/moon/" in m.name], filter="data")
        runs = load_runs(Path(tmp))
    print("plateau check, gain over the last fifth of R rounds (P: under 1 point)")
    for metric in METRICS:
        for arm in ARMS:
            cells = [f"R={h}: {g:+.2f}{' P' if stats.at_plateau(g) else ''}"
                     for h, g in ((h, plateau_gain(runs[arm], metric, h)) for h in HORIZONS)]
            print(f"  {metric} {arm} ({len(runs[arm])} seeds): " + ", ".join(cells))
    seeds = sorted(set(runs["moon"]) & set(runs["fedavg"]))
    print("MOON - FedAvg, linear_probe_acc, mean [95% interval]")
    for horizon in (10, 30, 60):
        for pick in (seeds[:3], seeds):
            d = stats.paired([at(runs["moon"][s], "linear_probe_acc", horizon) for s in pick],
                             [at(runs["fedavg"][s], "linear_probe_acc", horizon) for s in pick])
            print(f"  R={horizon}, {len(pick)} seeds: {d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}]")
    print("lift over the random-init value at R = 60, mean [95% interval] (smallest seed's)")
    for arm in ARMS:
        for metric in ("test_acc", "linear_probe_acc"):
            finals = [at(run, metric, 60) for run in runs[arm].values()]
            floors = [at(run, metric, 0) for run in runs[arm].values()]
            lift = stats.lift(finals, floors)
            print(f"  {arm} {metric}: {lift.mean:+.2f} [{lift.low:+.2f}, {lift.high:+.2f}] "
                  f"({min(f - b for f, b in zip(finals, floors)):+.2f})")
    dips = sum(at(run, "test_acc", 2) < at(run, "test_acc", 1) for run in runs["moon"].values())
    print(f"MOON seeds whose test accuracy fell from round 1 to round 2: {dips} of {len(runs['moon'])}")


if __name__ == "__main__":
    main()
