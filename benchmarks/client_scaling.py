"""Client-population scaling: time per round and peak memory, 10 to 10,000 clients.

FedAvg + SimCLR on populations of N clients with the arithmetic of a round held fixed: every
client holds exactly ``n`` images (iid over a ``data.subset`` of N * n Fashion-MNIST images,
which ``np.array_split`` cuts into equal parts), ``k`` clients are sampled per round
(``clients.fraction`` = k / N) and each trains one local epoch as a single batch of ``n``
(``local.batch_size`` = n). A round is therefore k optimizer steps on k * n images whatever
N; only the population the engine partitions, samples from, stores and checkpoints grows.
Target: flat (the 10,000-client figures within 1.2x of the 10-client ones).

Each population runs as a fresh ``python -m fedlight fit`` process (through
``vs_flower.measure``: whole-process wall time and peak RSS of its process tree, sampled
every 50 ms). Evaluation runs only before training and after the last round
(``eval.every`` = rounds, no projector embedding), on a labelled pool of about
``--labelled`` images whatever N (``eval.label_fraction`` = labelled / (N * n)), so it does
not grow with N either; the round times exclude it anyway. Before each run the script
rebuilds the run's partition (``fedlight.engine.run.fit.prepare_data``) and checks that every
client holds exactly n images and that the sampler draws exactly k clients; afterwards it
checks that every round of the run trained k clients.

Per population: the median over rounds 2.. (the first round warms up) of the round time
without evaluation (``seconds - eval_seconds``) and of the time in local training
(``train_seconds``), the share of the round outside local training (sampling, state swaps,
aggregation), the peak RSS and its ratios to the first population's. The peak RSS includes
the training images kept (the "data MiB" column, N * n * 784 bytes) and, transiently, the
whole Fashion-MNIST file being loaded and subset (the same at every N).

A round is only about 0.1 s of small kernels on 2 CPU cores, so run it on an otherwise idle
machine: with the cores oversubscribed by another process, the same rounds took 10-40x
longer (OpenMP threads waiting on descheduled peers) and the ratios mean nothing.

Full size (about 2 minutes a repeat on 2 CPU cores, 6 minutes for three; key=value
arguments anywhere, e.g. ``fabric.accelerator=cpu``, are passed to fedlight)::

    python benchmarks/client_scaling.py --repeats 3 --json client_scaling.json

Tiny check::

    python benchmarks/client_scaling.py --populations 10 100 --rounds 3
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

DEFAULT_RECIPE = HERE / "workloads" / "cross_device_fmnist.yaml"
IMAGE_BYTES = 28 * 28  # one uint8 Fashion-MNIST image
MIB = 2**20


def population_overrides(clients: int, args: argparse.Namespace) -> list[str]:
    """The recipe overrides that give ``clients`` clients of ``args.n`` images, ``args.k`` sampled a round."""
    samples = clients * args.n
    return [
        "partition.kind=iid",
        f"clients.num={clients}",
        f"clients.fraction={args.k / clients!r}",
        f"data.subset={samples}",
        f"local.batch_size={args.n}",
        "local.epochs=1",
        f"rounds={args.rounds}",
        f"eval.every={args.rounds}",
        "eval.projector_samples=0",
        f"eval.label_fraction={min(1.0, args.labelled / samples)!r}",
        *args.overrides,
    ]


def check_setup(recipe: str, overrides: list[str], clients: int, n: int, k: int) -> None:
    """Rebuilds the run's partition and sampler; exits unless every client holds ``n`` images and ``k`` are drawn."""
    from fedlight.config import load_recipe
    from fedlight.engine.loop.sampling import clients_per_round
    from fedlight.engine.run.fit import prepare_data

    resolved = load_recipe(recipe, [*overrides, "run.dir=unused"])
    _, parts = prepare_data(resolved)
    sizes = {len(p) for p in parts}
    if len(parts) != clients or sizes != {n}:
        sys.exit(f"{clients} clients: the partition has {len(parts)} clients of sizes {sorted(sizes)[:5]}, "
                 f"not {clients} of {n}")
    drawn = clients_per_round(clients, resolved.clients.fraction)
    if drawn != k:
        sys.exit(f"{clients} clients: clients.fraction={resolved.clients.fraction} samples {drawn}, not {k}")


def summarise(results: dict[str, Any], k: int, skip: int) -> dict[str, float]:
    """Medians over rounds ``skip + 1``.. of a run's results.json (exits if a round did not train k clients)."""
    history = results["history"]
    wrong = [row["round"] for row in history if len(row["clients"]) != k]
    if wrong:
        sys.exit(f"rounds {wrong} did not train {k} clients")
    rows = history[skip:] or history
    round_s = statistics.median(row["seconds"] - row["eval_seconds"] for row in rows)
    train_s = statistics.median(row["train_seconds"] for row in rows)
    return {"round_seconds": round_s, "train_seconds": train_s, "outside_share": 1 - train_s / round_s,
            "eval_seconds": sum(row["eval_seconds"] for row in history),
            "knn_acc": (results["final"] or {}).get("knn_acc")}


def run_population(recipe: str, clients: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One fresh fedlight process for ``clients`` clients: its summary, wall time and peak memory."""
    overrides = population_overrides(clients, args)
    check_setup(recipe, overrides, clients, args.n, args.k)
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", recipe, *overrides, f"run.dir={folder}", "--overwrite"]
    wall, peak = measure(cmd, dict(os.environ), folder.with_suffix(".log"))
    results = json.loads((folder / "results.json").read_text())
    return {"clients": clients, "data_bytes": clients * args.n * IMAGE_BYTES, "wall_seconds": wall,
            "peak_bytes": peak, **summarise(results, args.k, args.skip)}


def median_rows(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-key median over repeats of one population."""
    return {key: statistics.median(r[key] for r in runs) if runs[0][key] is not None else None for key in runs[0]}


def print_table(rows: list[dict[str, Any]]) -> None:
    """The results table, ratios against the first population."""
    first = rows[0]
    print(f"\n{'clients':>8} {'round s':>8} {'train s':>8} {'outside':>8} {'peak MiB':>9} {'data MiB':>9} "
          f"{'wall s':>7} {'round x':>8} {'peak x':>7}")
    for r in rows:
        print(f"{r['clients']:>8,} {r['round_seconds']:>8.3f} {r['train_seconds']:>8.3f} "
              f"{100 * r['outside_share']:>7.1f}% {r['peak_bytes'] / MIB:>9.0f} {r['data_bytes'] / MIB:>9.1f} "
              f"{r['wall_seconds']:>7.1f} {r['round_seconds'] / first['round_seconds']:>8.2f} "
              f"{r['peak_bytes'] / first['peak_bytes']:>7.2f}")
    last = rows[-1]
    flat = max(last["round_seconds"] / first["round_seconds"], last["peak_bytes"] / first["peak_bytes"])
    print(f"\n{last['clients']:,} vs {first['clients']:,} clients: worst ratio {flat:.2f} "
          f"({'meets' if flat <= 1.2 else 'misses'} the 1.2x target)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default=str(DEFAULT_RECIPE), help="FedAvg + SimCLR recipe (default: cross-device)")
    parser.add_argument("--populations", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--n", type=int, default=6, help="images per client (and the local batch size)")
    parser.add_argument("--k", type=int, default=10, help="clients sampled per round")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--skip", type=int, default=1, help="warm-up rounds left out of the medians")
    parser.add_argument("--labelled", type=int, default=60, help="about this many labelled images for evaluation")
    parser.add_argument("--repeats", type=int, default=1, help="runs per population (medians over them)")
    parser.add_argument("--out", type=Path, default=None, help="folder for run folders and logs (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write the settings, every run and the table here")
    args = parse_with_overrides(parser)
    if any(args.k > n for n in args.populations):
        parser.error(f"--k {args.k} exceeds the smallest population")
    out = args.out or Path(tempfile.mkdtemp(prefix="client_scaling_"))
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.populations}
    for rep in range(args.repeats):
        for clients in args.populations:
            r = run_population(args.recipe, clients, args, out / f"clients{clients}_{rep}")
            runs[clients].append(r)
            print(f"repeat {rep + 1}, {clients:,} clients: round {r['round_seconds']:.3f} s, "
                  f"train {r['train_seconds']:.3f} s, peak {r['peak_bytes'] / MIB:.0f} MiB, "
                  f"wall {r['wall_seconds']:.1f} s", flush=True)
    rows = [median_rows(runs[n]) for n in args.populations]
    print_table(rows)
    print(f"(k={args.k} clients of n={args.n} images a round, {args.rounds} rounds, medians over rounds "
          f"{args.skip + 1}..{args.rounds}; runs in {out})")
    if args.json:
        args.json.write_text(json.dumps({
            "recipe": args.recipe, "n": args.n, "k": args.k, "rounds": args.rounds, "skip": args.skip,
            "labelled": args.labelled, "repeats": args.repeats, "overrides": args.overrides,
            "table": rows, "runs": {str(n): rs for n, rs in runs.items()}}, indent=1))


if __name__ == "__main__":
    main()
