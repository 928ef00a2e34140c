"""CF-CL evidence (Wagle et al. 2022, Fig. 3b, 3c and the delay savings): policies x seeds, tabulated.

    python benchmarks/cfcl_report.py --recipe recipes/cfcl_fmnist_small.yaml --out runs/cfcl \
        --seeds 0 1 2 --policies smart uniform none --targets 0.6 0.65

Each (policy, seed) is one ``fit`` into ``<out>/<policy>/seed<k>``, in this process (one
start-up for all runs); finished runs are reused. The report gives, in Markdown:
accuracy vs SGD iterations per policy (mean +- std over seeds, random-init floor first),
the iterations and the transmission delay (the paper's 1 Mbit/s model, from the ledger) each
policy needs to reach each target, the variance of label counts across devices' training sets
(Fig. 3c, mean over the run's pulls), the share of the last pull's points whose class the
receiver does not hold (labels are read for these two measurements only) and the bytes sent.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from fedlight.config import load_recipe
from fedlight.engine.parts.cfcl.delay import period_delay
from fedlight.engine.parts.cfcl.exchange_schedule import EXCHANGE
from fedlight.engine.run.fit import fit, prepare_data


def run(recipe: Path, policy: str, seed: int, out: Path, overrides: list[str]) -> dict:
    folder = out / policy / f"seed{seed}"
    results = folder / "results.json"
    if not (results.is_file() and json.loads(results.read_text())["final"] is not None):
        print(f"+ fit {recipe} seed={seed} exchange.policy={policy} run.dir={folder} {' '.join(overrides)}", flush=True)
        fit(load_recipe(recipe, [f"seed={seed}", f"exchange.policy={policy}", f"run.dir={folder}", *overrides]),
            overwrite=True)
    return json.loads(results.read_text())


def curve(res: dict, metric: str) -> dict[int, float]:
    """{iterations: metric} over evaluated periods, iteration 0 being the random-init model."""
    out = {0: res["baseline"][metric]}
    out.update({row["iterations"]: row[metric] for row in res["history"] if row.get(metric) is not None})
    return out


def comm_delay(folder: Path) -> dict[int, float]:
    """{round: cumulative transmission delay in s} from the run's ``comm.csv`` (the paper's
    1 Mbit/s model without the measured compute time, which depends on the machine's load)."""
    lines = (folder / "comm.csv").read_text().splitlines()[1:]
    rows = [[int(r), int(c), d, t, int(n)] for r, c, d, t, n in (line.split(",") for line in lines)]
    out, total = {}, 0.0
    for round_ in sorted({r[0] for r in rows}):
        total += period_delay([r for r in rows if r[0] == round_])
        out[round_ + 1] = total
    return out


def first_reach(res: dict, metric: str, target: float, delays: dict[int, float]) -> tuple[int | None, float | None]:
    """(iterations, cumulative transmission delay in s) at the first evaluation with ``metric >= target``;
    (0, 0) when the random-init model already reaches it."""
    if res["baseline"][metric] >= target:
        return 0, 0.0
    for row in res["history"]:
        if row.get(metric) is not None and row[metric] >= target:
            return row["iterations"], delays[row["round"]]
    return None, None


def novel_share(folder: Path) -> float | None:
    """Share of the last pull's points (all devices) whose class the receiver does not hold
    (labels used for this measurement only); None without an exchange. The partition is the
    run's own, rebuilt from the recipe it saved (its seed and overrides included)."""
    ckpt = torch.load(folder / "checkpoints/last.pt", weights_only=True)
    data, parts = prepare_data(load_recipe(folder / "recipe.yaml"))
    labels = data.train_y.numpy()
    novel, total = 0, 0
    for client, state in ckpt["clients"].items():
        pulled = labels[state.get(EXCHANGE + "pulled", torch.empty(0, dtype=torch.long)).numpy()]
        novel += int((~np.isin(pulled, labels[parts[client]])).sum())
        total += len(pulled)
    return novel / total if total else None


def cell(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    v = np.array(values, dtype=float) * scale
    return f"{v.mean():.{digits}f} +- {v.std():.{digits}f}"


def reach_cell(pairs: list[tuple[int | None, float | None]], index: int) -> str:
    got = [p[index] for p in pairs if p[index] is not None]
    if not got:
        return "not reached"
    text = f"{np.mean(got):.0f}" if index == 0 else f"{np.mean(got):.1f}"
    return text + (f" ({len(got)}/{len(pairs)} seeds)" if len(got) < len(pairs) else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, default=Path("recipes/cfcl_fmnist_small.yaml"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--policies", nargs="+", default=["smart", "uniform", "none"])
    parser.add_argument("--metrics", nargs="+", default=["linear_probe_acc", "knn_acc"])
    parser.add_argument("--targets", type=float, nargs="+", default=[0.6], help="accuracies to reach (first metric)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides for every run")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {p: [] for p in args.policies}
    for s in args.seeds:  # seed-major: a cut-short session still has every policy for its first seeds
        for p in args.policies:
            runs[p].append(run(args.recipe, p, s, args.out, args.overrides))
    seeds = len(args.seeds)
    print(f"\n{args.recipe}, seeds {' '.join(map(str, args.seeds))}; mean +- std over seeds, in %\n")
    for metric in args.metrics:
        curves = {p: [curve(r, metric) for r in rs] for p, rs in runs.items()}
        steps = sorted(set.intersection(*(set(c) for cs in curves.values() for c in cs)))
        print(f"{metric} vs SGD iterations (0 = random init)\n")
        print("| iterations | " + " | ".join(args.policies) + " |")
        print("|---:|" + "---:|" * len(args.policies))
        for t in steps:
            print(f"| {t} | " + " | ".join(cell([c[t] for c in curves[p]]) for p in args.policies) + " |")
        print()
    metric = args.metrics[0]
    print(f"Per policy ({metric} targets; iterations and transmission delay at 1 Mbit/s at the first evaluation "
          "reaching them, mean over the seeds that reach it; label-count variance across devices' training sets, "
          "mean over classes and pulls)\n")
    head = ["policy", f"final {metric}", "label-count variance", "novel-class share of last pull", "D2D MB",
            "uplink MB"]
    for target in args.targets:
        head += [f"iters to {target:.0%}", f"delay to {target:.0%} (s)"]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for p, rs in runs.items():
        row = [p, cell([r["final"][metric] for r in rs]),
               f"{np.mean([np.mean([h['label_var'] for h in r['history']]) for r in rs]):.0f}",
               cell([v for v in (novel_share(args.out / p / f"seed{s}") for s in args.seeds)
                     if v is not None] or [float("nan")]),
               f"{np.mean([r['comm']['bytes_d2d'] for r in rs]) / 1e6:.1f}",
               f"{np.mean([r['comm']['bytes_up'] for r in rs]) / 1e6:.1f}"]
        for target in args.targets:
            pairs = [first_reach(r, metric, target, comm_delay(args.out / p / f"seed{s}"))
                     for r, s in zip(rs, args.seeds)]
            row += [reach_cell(pairs, 0), reach_cell(pairs, 1)]
        print("| " + " | ".join(row) + " |")
    compute = {p: np.mean([r["history"][-1]["delay_seconds"]
                           - comm_delay(args.out / p / f"seed{s}")[r["rounds_completed"]]
                           for r, s in zip(rs, args.seeds)]) for p, rs in runs.items()}
    print("\nexchange compute time over the run (K-means, scores; wall seconds summed over periods of the slowest "
          "device, on this machine): " + ", ".join(f"{p} {v:.1f}" for p, v in compute.items()))
    print(f"\n{seeds} seeds; wall seconds per run: "
          + ", ".join(f"{p} {np.mean([r['wall_seconds'] for r in rs]):.0f}" for p, rs in runs.items()))


if __name__ == "__main__":
    main()
