"""FLESD's public set per seed, from the partition alone (no run read, nothing trained): its size and
classes, as the twin draws them (``fit.prepare_data``: the subset, then the Dirichlet split, whose
``partition.public_client`` share is the public set and trains no client).

    python benchmarks/public_sets.py --seeds 1000-1023 partition.alpha=0.01 data.subset=20000 \
        server.queue_size=1024 server.batch_size=64

Prints a row a seed (images, classes present, classes holding at least 5% of the set, the largest
class counts, and the ESD steps an epoch the recipe's ``server.queue_size`` and ``server.batch_size``
leave: 0 means fedlight refuses the run, as it did v3 FLESD seed 1019) and a summary line. The
paper's public set is client 0's share of CIFAR-10's 50,000 training images (FLESD section 4).

``--lift ROW`` (repeatable; a row's folder of a v3 block, ``runs/v3/flesd/alpha0.01/flesd``) adds each
seed's kNN lift (final minus the same seed's random-init value, points) of that row's finished run and,
over the seeds that have one, its mean, sd and how many seeds end below their floor, with the mean
lift by the count of classes holding 5% of the set and Spearman's rho of the lift against that count
and against the set's size. What it prints is read after a block's results, never a verdict.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy import stats

from fedlight.config import load_recipe
from fedlight.engine.run.fit import prepare_data
from fedlight.server.flesd import esd_steps_per_epoch


def seed_range(text: str) -> list[int]:
    """The seeds of ``1000-1023`` (inclusive) or ``1000``.

    Raises:
        argparse.ArgumentTypeError: not FIRST-LAST with FIRST <= LAST.
    """
    first, _, last = text.partition("-")
    try:
        seeds = list(range(int(first), int(last or first) + 1))
    except ValueError:
        seeds = []
    if not seeds:
        raise argparse.ArgumentTypeError(f"'{text}' is not FIRST-LAST with FIRST <= LAST (or one seed)")
    return seeds


def knn_lift(row: Path, seed: int) -> float | None:
    """The kNN lift in points of ``row``'s finished run of ``seed`` (None: no finished run)."""
    path = row / f"seed{seed}" / "runs" / f"seed={seed}" / "results.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    if not results.get("final"):
        return None
    return 100 * (results["final"]["knn_acc"] - results["baseline"]["knn_acc"])


def lift_summary(row: Path, lifts: list[float | None], sizes: list[int], big: list[int]) -> str:
    """The lines ``--lift`` prints for ``row`` over the seeds with a finished run."""
    have = [i for i, lift in enumerate(lifts) if lift is not None]
    lift = np.array([lifts[i] for i in have])
    count, size = np.array([big[i] for i in have]), np.array([sizes[i] for i in have])
    by_count = ", ".join(f"{k} class{'es' if k > 1 else ''}: {lift[count == k].mean():+.2f} ({(count == k).sum()} seeds)"
                         for k in sorted(set(count)))
    rho_count, rho_size = stats.spearmanr(lift, count), stats.spearmanr(lift, size)
    return (f"{row}: lift {lift.mean():+.2f}, sd {lift.std(ddof=1):.2f} over {len(lift)} seeds, below the floor in "
            f"{(lift < 0).sum()}; by classes >= 5%: {by_count}; Spearman against that count "
            f"{rho_count.statistic:.2f} (p {rho_count.pvalue:.2f}), against the size {rho_size.statistic:.2f} "
            f"(p {rho_size.pvalue:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/flesd_fmnist.yaml")
    parser.add_argument("--seeds", type=seed_range, required=True, help="FIRST-LAST, inclusive")
    parser.add_argument("--lift", type=Path, action="append", default=[], help="a row's folder of a v3 block")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE, as fedlight fit takes them")
    args = parser.parse_args()
    heads = "".join(f" {row.name} lift |" for row in args.lift)
    print(f"| seed | images | classes | classes >= 5% | largest classes | ESD steps an epoch |{heads}\n"
          f"|---|---|---|---|---|---|{'---|' * len(args.lift)}")
    sizes, present, big, lifts = [], [], [], [[] for _ in args.lift]
    for seed in args.seeds:
        recipe = load_recipe(args.recipe, [*args.overrides, f"seed={seed}"])
        if recipe.partition.public_client is None or recipe.partition.public_balanced:
            raise SystemExit(f"{args.recipe}: this counts client {recipe.partition.public_client}'s share as the "
                             "public set; it needs partition.public_client set and partition.public_balanced=false")
        data, parts = prepare_data(recipe)
        counts = np.bincount(data.train_y.numpy()[parts[recipe.partition.public_client]], minlength=data.num_classes)
        sizes.append(int(counts.sum()))
        present.append(int((counts > 0).sum()))
        big.append(int((counts >= 0.05 * sizes[-1]).sum()))
        top = ", ".join(str(c) for c in sorted(counts[counts > 0], reverse=True)[:4])
        steps = esd_steps_per_epoch(sizes[-1], int(recipe.server["batch_size"]), int(recipe.server["queue_size"]))
        for row, row_lifts in zip(args.lift, lifts):
            row_lifts.append(knn_lift(row, seed))
        cells = "".join(" - |" if row[-1] is None else f" {row[-1]:+.2f} |" for row in lifts)
        print(f"| {seed} | {sizes[-1]:,} | {present[-1]} | {big[-1]} | {top} | {steps} |{cells}")
    print(f"\nimages: median {np.median(sizes):,.0f}, {min(sizes):,}-{max(sizes):,}; classes present: median "
          f"{np.median(present):g}, {min(present)}-{max(present)} ({len(sizes)} seeds)")
    for row, row_lifts in zip(args.lift, lifts):
        print(lift_summary(row, row_lifts, sizes, big))


if __name__ == "__main__":
    main()
