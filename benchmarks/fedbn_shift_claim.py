"""The FedBN block (REPRODUCTION.md, "v3 FedBN under feature shift"): its table, and rule v3's reading.

    python benchmarks/fedbn_shift_claim.py pilot     # runs/fedbn_shift/pilot: table, min_lift and n
    python benchmarks/fedbn_shift_claim.py verdict 12.99   # runs/fedbn_shift/verdict: table and the claim's verdict
    python benchmarks/fedbn_shift_claim.py pilot_simclr --objective simclr   # the SimCLR half (its own plan)

Rows (``benchmarks/fedbn_shift_runs.sh``): ``fedbn`` and ``fedavg`` (supervised, the claim), and beside them
``simclr_shift`` / ``simclr_label`` (FedAvg-SimCLR's kNN under feature shift / Dirichlet 0.5 label skew).
Metric ``local_test_acc`` in points: each client's model on its own domain's test images, the mean over
clients; the floor is the seed's random-init value (results.json's ``baseline``). With ``--objective simclr``
the rows are ``fedbn_simclr`` and ``fedavg_simclr`` and the metric ``local_knn_acc`` (each client's own
encoder by kNN on its own domain's test images, its training share the bank).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from fedlight import stats
from rule_v4 import curves_line

RUNS = Path(__file__).resolve().parents[1] / "runs" / "fedbn_shift"
KNN = "knn_acc"
OBJECTIVES = {"supervised": ("fedbn", "fedavg", "local_test_acc"),  # the claim's rows and metric, by objective
              "simclr": ("fedbn_simclr", "fedavg_simclr", "local_knn_acc")}
TARGET = 1.0  # rule v3's half-width wanted: max(1 point, a third of the paper's effect); 1 point here


def finished(folder: Path, arm: str) -> dict[int, dict]:
    """seed -> results.json of every finished run of ``arm``."""
    out = {}
    for path in sorted(folder.glob(f"{arm}-*/results.json")):
        r = json.loads(path.read_text())
        if r.get("final") is not None and r["rounds_completed"] == r["recipe"]["rounds"]:
            out[r["recipe"]["seed"]] = r
    return out


def points(r: dict, key: str, where: str = "final") -> float:
    return 100 * r[where][key]


def main(stage: str, min_lift: float | None, objective: str) -> None:
    folder = RUNS / stage
    fedbn_arm, fedavg_arm, metric = OBJECTIVES[objective]
    fedbn, fedavg = finished(folder, fedbn_arm), finished(folder, fedavg_arm)
    seeds = sorted(set(fedbn) & set(fedavg))
    print(f"## {stage} (runs/fedbn_shift/{stage}: {len(seeds)} seeds with both claim rows done: {seeds})\n")
    print("| seed | floor | FedAvg final | FedBN final | FedBN - FedAvg |\n|---|---|---|---|---|")
    for s in seeds:
        floor = points(fedavg[s], metric, "baseline")
        a, b = points(fedbn[s], metric), points(fedavg[s], metric)
        print(f"| {s} | {floor:.2f} | {b:.2f} | {a:.2f} | {a - b:+.2f} |")
    beside(folder)
    if len(seeds) < 3:
        print("\nfewer than 3 seeds: nothing to read")
        return
    a = np.array([points(fedbn[s], metric) for s in seeds])
    b = np.array([points(fedavg[s], metric) for s in seeds])
    floors = np.array([points(fedavg[s], metric, "baseline") for s in seeds])
    control, method = stats.lift(b, floors), stats.lift(a, floors)
    print(f"\nFedAvg (control) lift {control.mean:.2f} (sd {control.sd:.2f}, 95% low {control.low:.2f}); "
          f"FedBN lift {method.mean:.2f} (95% low {method.low:.2f})")
    print("means by round: " + curves_line({fedbn_arm: [fedbn[s] for s in seeds],
                                            fedavg_arm: [fedavg[s] for s in seeds]}, metric))
    d = stats.paired(a, b)
    print(f"FedBN - FedAvg {d.mean:+.2f}, sd {d.sd:.2f}, 95% [{d.low:+.2f}, {d.high:+.2f}]")
    if min_lift is None:  # a pilot
        print(f"min_lift = max(2, control lift / 3) = {max(2.0, control.mean / 3):.2f}")
        if len(seeds) >= 5:
            print(f"n (sd+ 80% of the differences, half-width {TARGET}): "
                  f"{stats.seeds_from_pilot(a - b, TARGET, cap=24) or 'more than 24'}")
        return
    if not stats.trained(b, floors, min_lift):
        print(f"control did not train (95% low {control.low:.2f} < min_lift {min_lift}): the claim is void")
        return
    test = stats.directional(d, +1)
    print(f"A. FedBN > FedAvg on {metric}: p {test.p:.2g}: **{test.verdict}**")


def beside(folder: Path) -> None:
    """FedAvg-SimCLR's final kNN under feature shift and under label skew, per seed (no verdict)."""
    shift, label = finished(folder, "simclr_shift"), finished(folder, "simclr_label")
    seeds = sorted(set(shift) & set(label))
    if not seeds:
        return
    print("\nBeside (no verdict): FedAvg-SimCLR's kNN (10% labels), final, points\n")
    print("| seed | feature shift (pooled) | per domain | label skew (Dirichlet 0.5) | shift - label |\n|---|---|---|---|---|")
    for s in seeds:
        per = [f"{100 * v:.1f}" for k, v in sorted(shift[s]["final"].items()) if k.startswith("knn_acc_domain")]
        a, b = points(shift[s], KNN), points(label[s], KNN)
        print(f"| {s} | {a:.2f} | {' / '.join(per)} | {b:.2f} | {a - b:+.2f} |")
    for name, runs in (("feature shift", shift), ("label skew", label)):
        final = np.mean([points(runs[s], KNN) for s in seeds])
        floor = np.mean([points(runs[s], KNN, "baseline") for s in seeds])
        print(f"{name}: mean {final:.2f}, random init {floor:.2f}, lift {final - floor:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", nargs="?", default="pilot", help="the runs' folder under runs/fedbn_shift")
    parser.add_argument("min_lift", nargs="?", type=float, help="the registered min_lift (a verdict); none: a pilot")
    parser.add_argument("--objective", choices=list(OBJECTIVES), default="supervised")
    args = parser.parse_args()
    main(args.stage, args.min_lift, args.objective)
