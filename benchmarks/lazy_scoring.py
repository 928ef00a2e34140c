"""SOFed Table VI at CPU scale: time per arriving batch and re-scoring ratio vs. lazy interval T.

One streaming client of ``recipes/sofed_fmnist.yaml`` per interval, each with its own model
and buffer, receives its stream round after round through the engine's real streaming step
(buffer selection + one BYOL step per batch). The intervals take turns, round by round, in
one process, so the timings compare as ratios measured side by side.

    python benchmarks/lazy_scoring.py [--rounds 6] [--intervals 1 4 10 50] [key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from fedlight import registry
from fedlight.config import load_recipe
from fedlight.engine.run.assemble import build_federation
from fedlight.engine.run.fit import build_module, make_fabric, prepare_data
from fedlight.seeding import torch_generator

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--intervals", type=int, nargs="+", default=[1, 4, 10, 50])
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    torch.set_num_threads(1)
    feds, private = {}, {}
    for t in args.intervals:
        recipe = load_recipe(REPO / "recipes/sofed_fmnist.yaml", [*args.overrides, f"buffer.lazy_interval={t}"])
        data, parts = prepare_data(recipe)
        feds[t] = build_federation(make_fabric(recipe), recipe, data, parts, build_module(recipe, data),
                                   registry.build_server(recipe.server, recipe.clients.num), Path(tempfile.mkdtemp()))
        private[t] = {}
    ms = {t: [] for t in args.intervals}
    counts = {t: [0, 0] for t in args.intervals}  # re-scored, buffered
    for r in range(args.rounds):
        for t, fed in feds.items():
            start = time.perf_counter()
            work = fed.schedule.train(fed.module, 0, r, torch_generator(fed.options.seed, "local", r, 0), private[t], 1.0)
            ms[t].append(1000 * (time.perf_counter() - start) / work.report["buffer"]["batches"])
            private[t] = work.state
            counts[t][0] += work.report["buffer"]["rescored"]
            counts[t][1] += work.report["buffer"]["buffered"]
    base = statistics.median(ms[args.intervals[0]][1:])
    print(f"| lazy interval T | re-scoring ratio | ms per batch (median of rounds 2-{args.rounds}) | relative time |")
    print("|---|---|---|---|")
    for t in args.intervals:
        med = statistics.median(ms[t][1:])  # round 1 fills the buffer and warms up
        print(f"| {'disabled' if t == 1 else t} | {counts[t][0] / max(counts[t][1], 1) * 100:.2f}% | {med:.1f} | "
              f"{med / base:.2f} |")


if __name__ == "__main__":
    main()
