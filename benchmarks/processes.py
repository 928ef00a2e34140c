"""One process of two threads vs. two processes of one thread, and vs. one
process of two worker models of one thread each.

Runs a recipe as fresh ``python -m fedlight fit`` processes on the CPU in three
configurations, alternating their order over ``--repeats``:

* ``fabric.devices=1 fabric.threads=2``: one process, two torch threads;
* ``fabric.devices=2 fabric.threads=1``: two Fabric DDP processes (gloo), one thread each;
  the sampled clients are split over the ranks and their FedAvg sums all-reduced;
* ``fabric.devices=1 fabric.threads=2 fabric.workers=2``: one process, two worker models
  training clients side by side in two threads of one torch thread each.

Per configuration, medians over the repeats of: the whole process's wall time (imports,
data, DDP start-up, evaluation: what a researcher waits for, via ``vs_flower.measure``,
which also gives the peak RSS of the process tree), the round seconds without evaluation
(``seconds - eval_seconds``, timed on rank 0) summed over rounds ``--skip + 1``.., the local
training seconds (``train_seconds``, the mean over ranks) summed over the same rounds, and
the share of the round outside local training, 1 - train / round (sampling, state swaps,
aggregation and, with two processes, the collectives and waiting for the slower rank).
The first round is left out by default: with two processes, rank 1 starts training while
rank 0 still scores the initial model, so round 1's times mix training and evaluation.
The speed ratio is the one-process time over the two-process time (>= 1: two processes
are at least as fast). The engine makes two processes train the same clients with the
same seeds as one, so both configurations must end with the same kNN accuracy (printed,
and flagged when they differ by more than ``--knn-tolerance``). They agree up to
floating-point rounding only: one and two torch threads reduce in different orders, and
Adam and the kNN's ranking amplify that drift over the rounds (a few test images). With
``--check-exact`` one more run, one process of one thread, shows that the processes
themselves change nothing: its per-round losses and kNN must equal the two-process run's
bit for bit.

Full size (cross-silo: about 2 minutes a run, 18 minutes in all; cross-device: about
1 minute a run, 9 minutes in all; on 2 otherwise idle CPU cores)::

    python benchmarks/processes.py benchmarks/workloads/cross_silo_fmnist.yaml --repeats 3 --json processes_silo.json
    python benchmarks/processes.py benchmarks/workloads/cross_device_fmnist.yaml --repeats 3 --json processes_device.json

Tiny check (key=value arguments are passed to fedlight)::

    python benchmarks/processes.py benchmarks/workloads/cross_device_fmnist.yaml --repeats 1 --check-exact \\
        rounds=2 clients.num=20 data.subset=2000 data.test_subset=1000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from command_line import parse_with_overrides  # noqa: E402
from vs_flower import measure  # noqa: E402

DEFAULT_RECIPE = HERE / "workloads" / "cross_silo_fmnist.yaml"
CONFIGS: dict[str, list[str]] = {
    "1 process x 2 threads": ["fabric.accelerator=cpu", "fabric.devices=1", "fabric.threads=2"],
    "2 processes x 1 thread": ["fabric.accelerator=cpu", "fabric.devices=2", "fabric.threads=1"],
    "1 process x 2 workers": ["fabric.accelerator=cpu", "fabric.devices=1", "fabric.threads=2", "fabric.workers=2"],
}
MIB = 2**20


def summarise(results: dict[str, Any], skip: int) -> dict[str, Any]:
    """Round, training and evaluation seconds of a results.json, summed over rounds ``skip + 1``..."""
    history = results["history"]
    rows = history[skip:] or history
    round_s = sum(row["seconds"] - row["eval_seconds"] for row in rows)
    train_s = sum(row["train_seconds"] for row in rows)
    return {"round_seconds": round_s, "train_seconds": train_s, "outside_share": 1 - train_s / round_s,
            "eval_seconds": sum(row["eval_seconds"] for row in history), "engine_wall_seconds": results["wall_seconds"],
            "rounds_summed": len(rows), "knn_acc": (results["final"] or {}).get("knn_acc"),
            "clients": [row["clients"] for row in history], "train_loss": [row["train_loss"] for row in history]}


def run_config(recipe: str, overrides: list[str], folder: Path, skip: int) -> dict[str, Any]:
    """One fresh fedlight run: its wall time, peak memory and summed round times."""
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", recipe, *overrides, f"run.dir={folder}", "--overwrite"]
    wall, peak = measure(cmd, dict(os.environ), folder.with_suffix(".log"))
    results = json.loads((folder / "results.json").read_text())
    return {"wall_seconds": wall, "peak_bytes": peak, **summarise(results, skip)}


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-key median over the repeats of one configuration (numbers only)."""
    return {key: statistics.median(r[key] for r in runs) if isinstance(runs[0][key], (int, float)) else None
            for key in runs[0] if key not in ("clients", "train_loss")}


def print_table(med: dict[str, dict[str, Any]], skip: int) -> None:
    """The comparison table; speed ratios are the first configuration's time over each one's."""
    first = next(iter(med.values()))
    print(f"\n{'configuration':<24} {'wall s':>7} {'rounds s':>9} {'train s':>8} {'outside':>8} "
          f"{'peak MiB':>9} {'kNN %':>7} {'speed (wall)':>13} {'speed (rounds)':>15}")
    for name, m in med.items():
        knn = f"{100 * m['knn_acc']:.2f}" if m["knn_acc"] is not None else "-"
        print(f"{name:<24} {m['wall_seconds']:>7.1f} {m['round_seconds']:>9.2f} {m['train_seconds']:>8.2f} "
              f"{100 * m['outside_share']:>7.1f}% {m['peak_bytes'] / MIB:>9.0f} {knn:>7} "
              f"{first['wall_seconds'] / m['wall_seconds']:>12.2f}x {first['round_seconds'] / m['round_seconds']:>14.2f}x")
    print(f"(medians over repeats; rounds s and train s summed over rounds {skip + 1}.., without evaluation)")


def check_knn(rows: dict[str, list[dict[str, Any]]], tolerance: float) -> bool:
    """Prints every run's final kNN and loss drift; True when all runs trained the same clients and agree
    in kNN within ``tolerance``."""
    everyone = [r for runs in rows.values() for r in runs]
    if any(r["clients"] != everyone[0]["clients"] for r in everyone):
        print("DIFFERENT clients sampled: the configurations did not run the same federation")
        return False
    drift = max(abs(a - b) / abs(b) for r in everyone for a, b in zip(r["train_loss"], everyone[0]["train_loss"])
                if a is not None and b)
    print(f"same clients every round in every run; largest relative train-loss difference {drift:.1e}")
    values = [r["knn_acc"] for r in everyone]
    for name, runs in rows.items():
        accs = ["-" if r["knn_acc"] is None else f"{r['knn_acc']:.6f}" for r in runs]
        print(f"final kNN, {name}: {', '.join(accs)}")
    if any(v is None for v in values):
        print("no final kNN to compare (the run ended without evaluation)")
        return False
    spread = max(values) - min(values)
    same = spread <= tolerance
    verdict = "same model up to rounding" if same else "DIFFERENT beyond rounding drift"
    print(f"kNN spread {100 * spread:.2f} points (tolerance {100 * tolerance:.2f}): {verdict}")
    return same


def check_exact(recipe: str, overrides: list[str], folder: Path, two: dict[str, Any], skip: int) -> bool:
    """One process of one thread; True when its losses and kNN equal the two-process run's exactly."""
    one = run_config(recipe, [*overrides, "fabric.accelerator=cpu", "fabric.devices=1", "fabric.threads=1"],
                     folder, skip)
    exact = one["train_loss"] == two["train_loss"] and one["knn_acc"] == two["knn_acc"]
    print(f"1 process x 1 thread vs 2 processes x 1 thread: losses {one['train_loss']} vs {two['train_loss']}, "
          f"kNN {one['knn_acc']} vs {two['knn_acc']}: {'bit-identical' if exact else 'DIFFERENT'}")
    return exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", default=str(DEFAULT_RECIPE))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", type=int, default=1, help="warm-up rounds left out of the summed round times")
    parser.add_argument("--knn-tolerance", type=float, default=0.01,
                        help="largest kNN difference (fraction) put down to rounding drift")
    parser.add_argument("--check-exact", action="store_true",
                        help="one more run, 1 process x 1 thread, which must equal the 2-process run bit for bit")
    parser.add_argument("--out", type=Path, default=None, help="folder for run folders and logs (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write the settings, every run and the medians here")
    args = parse_with_overrides(parser)
    out = args.out or Path(tempfile.mkdtemp(prefix="processes_"))
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for rep in range(args.repeats):
        order = list(CONFIGS) if rep % 2 == 0 else list(CONFIGS)[::-1]
        for name in order:
            folder = out / f"config{list(CONFIGS).index(name)}_{rep}"
            r = run_config(args.recipe, [*args.overrides, *CONFIGS[name]], folder, args.skip)
            rows[name].append(r)
            print(f"repeat {rep + 1}, {name}: wall {r['wall_seconds']:.1f} s, rounds {r['round_seconds']:.2f} s, "
                  f"train {r['train_seconds']:.2f} s, outside {100 * r['outside_share']:.1f}%, "
                  f"peak {r['peak_bytes'] / MIB:.0f} MiB", flush=True)
    med = {name: median_row(runs) for name, runs in rows.items()}
    print_table(med, args.skip)
    same = check_knn(rows, args.knn_tolerance)
    exact = None
    if args.check_exact:
        exact = check_exact(args.recipe, args.overrides, out / "devices1_threads1", rows[list(CONFIGS)[1]][0], args.skip)
    print(f"(runs in {out})")
    if args.json:
        args.json.write_text(json.dumps({"recipe": args.recipe, "repeats": args.repeats, "skip": args.skip,
                                         "overrides": args.overrides, "configs": CONFIGS, "same_knn": same,
                                         "exact_across_processes": exact, "runs": rows, "median": med}, indent=1))


if __name__ == "__main__":
    main()
