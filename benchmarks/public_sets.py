"""FLESD's public set per seed, from the partition alone (no run read, nothing trained): its size and
classes, as the twin draws them (``fit.prepare_data``: the subset, then the Dirichlet split, whose
``partition.public_client`` share is the public set and trains no client).

    python benchmarks/public_sets.py --seeds 1000-1023 partition.alpha=0.01 data.subset=20000 \
        server.queue_size=1024 server.batch_size=64

Prints a row a seed (images, classes present, classes holding at least 5% of the set, the largest
class counts, and the ESD steps an epoch the recipe's ``server.queue_size`` and ``server.batch_size``
leave: 0 means fedlight refuses the run, as it did v3 FLESD seed 1019) and a summary line. The
paper's public set is client 0's share of CIFAR-10's 50,000 training images (FLESD section 4).
"""

from __future__ import annotations

import argparse

import numpy as np

from fedlight.config import load_recipe
from fedlight.engine.run.fit import prepare_data
from fedlight.server.esd import esd_steps_per_epoch


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/flesd_fmnist.yaml")
    parser.add_argument("--seeds", type=seed_range, required=True, help="FIRST-LAST, inclusive")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE, as fedlight fit takes them")
    args = parser.parse_args()
    print("| seed | images | classes | classes >= 5% | largest classes | ESD steps an epoch |\n"
          "|---|---|---|---|---|---|")
    sizes, present = [], []
    for seed in args.seeds:
        recipe = load_recipe(args.recipe, [*args.overrides, f"seed={seed}"])
        if recipe.partition.public_client is None or recipe.partition.public_balanced:
            raise SystemExit(f"{args.recipe}: this counts client {recipe.partition.public_client}'s share as the "
                             "public set; it needs partition.public_client set and partition.public_balanced=false")
        data, parts = prepare_data(recipe)
        counts = np.bincount(data.train_y.numpy()[parts[recipe.partition.public_client]], minlength=data.num_classes)
        sizes.append(int(counts.sum()))
        present.append(int((counts > 0).sum()))
        top = ", ".join(str(c) for c in sorted(counts[counts > 0], reverse=True)[:4])
        steps = esd_steps_per_epoch(sizes[-1], int(recipe.server["batch_size"]), int(recipe.server["queue_size"]))
        big = int((counts >= 0.05 * sizes[-1]).sum())
        print(f"| {seed} | {sizes[-1]:,} | {present[-1]} | {big} | {top} | {steps} |")
    print(f"\nimages: median {np.median(sizes):,.0f}, {min(sizes):,}-{max(sizes):,}; classes present: median "
          f"{np.median(present):g}, {min(present)}-{max(present)} ({len(sizes)} seeds)")


if __name__ == "__main__":
    main()
