"""FLESD's public set per seed, from the partition alone (no run read, nothing trained): its size and
classes, as the twin draws them (``fit.prepare_data``: the subset, then the Dirichlet split, whose
``partition.public_client`` share is the public set and trains no client).

    python benchmarks/public_sets.py --seeds 1000-1023 partition.alpha=0.01 data.subset=20000

Prints a row a seed (images, classes present, classes holding at least 5% of the set, the largest
class counts) and a summary line. The paper's public set is client 0's share of CIFAR-10's 50,000
training images (FLESD section 4).
"""

from __future__ import annotations

import argparse

import numpy as np

from fedlight.config import load_recipe
from fedlight.engine.run.fit import prepare_data


def seed_range(text: str) -> list[int]:
    """``1000-1023`` or ``1000``: the seeds, inclusive."""
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/flesd_fmnist.yaml")
    parser.add_argument("--seeds", type=seed_range, required=True, help="FIRST-LAST, inclusive")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE, as fedlight fit takes them")
    args = parser.parse_args()
    print("| seed | images | classes | classes >= 5% | largest classes |\n|---|---|---|---|---|")
    sizes, present = [], []
    for seed in args.seeds:
        recipe = load_recipe(args.recipe, [*args.overrides, f"seed={seed}"])
        if recipe.partition.public_client is None:
            raise SystemExit(f"{args.recipe}: partition.public_client is null, so there is no public set; "
                             "pass a FLESD recipe")
        data, parts = prepare_data(recipe)
        counts = np.bincount(data.train_y.numpy()[parts[recipe.partition.public_client]], minlength=data.num_classes)
        sizes.append(int(counts.sum()))
        present.append(int((counts > 0).sum()))
        top = ", ".join(str(c) for c in sorted(counts[counts > 0], reverse=True)[:4])
        print(f"| {seed} | {sizes[-1]:,} | {present[-1]} | {int((counts >= 0.05 * sizes[-1]).sum())} | {top} |")
    print(f"\nimages: median {np.median(sizes):,.0f}, {min(sizes):,}-{max(sizes):,}; classes present: median "
          f"{np.median(present):g}, {min(present)}-{max(present)} ({len(sizes)} seeds)")


if __name__ == "__main__":
    main()
