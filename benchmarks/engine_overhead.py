"""Engine overhead: the quickstart's local training through fedlight vs. a minimal PyTorch loop.

Both sides train the same clients from the same initial model, with the same views (same
seeded generators), batches and optimizer steps, and aggregate by sample-weighted
averaging. fedlight's side is the engine's real round (sampling, state swaps, Fabric loop,
ledger, aggregator); the plain side is the shortest hand-written loop that does the same
arithmetic. They run alternately, side by side in one process, and the script checks that
both end with the same global model, so the timing compares equal work.

    python benchmarks/engine_overhead.py [--rounds 2] [--repeats 3] [key=value ...]
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
from fedlight.engine.loop.sampling import sample_clients
from fedlight.engine.run.assemble import build_federation, build_views
from fedlight.engine.run.fit import build_module, make_fabric, prepare_data

from plain_loop import local_train, shared_state
from round_training import train_rounds

REPO = Path(__file__).resolve().parents[1]


def run_fedlight(recipe, data, parts, rounds: int) -> tuple[float, dict]:
    fabric = make_fabric(recipe)
    fed = build_federation(fabric, recipe, data, parts, build_module(recipe, data),
                           registry.build_server(recipe.server, recipe.clients.num), Path(tempfile.mkdtemp()))
    seconds = sum(spent for spent, _ in train_rounds(fed, rounds))
    return seconds, fed.run_state.global_state


def run_plain(recipe, data, parts, rounds: int) -> tuple[float, dict]:
    model = build_module(recipe, data)
    views = build_views(recipe, data)
    global_state = shared_state(model)
    start = time.perf_counter()
    for r in range(rounds):
        total, weight = {k: torch.zeros_like(t, dtype=torch.float64) for k, t in global_state.items()}, 0.0
        for c in sample_clients(recipe.seed, r, recipe.clients.num, recipe.clients.fraction):
            model.load_state_dict(global_state, strict=False)
            n = local_train(model, views, data.train_x, data.train_y, torch.as_tensor(parts[c]), recipe, r, c)
            for k, t in shared_state(model).items():
                total[k] += n * t.double()
            weight += n
        global_state = {k: (total[k] / weight).to(t.dtype) if t.is_floating_point() else (total[k] / weight).round().to(t.dtype)
                        for k, t in global_state.items()}
    return time.perf_counter() - start, global_state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default=str(REPO / "recipes/quickstart_fmnist.yaml"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    recipe = load_recipe(args.recipe, ["fabric.accelerator=cpu", *args.overrides])
    data, parts = prepare_data(recipe)
    times = {"fedlight": [], "plain": []}
    for rep in range(args.repeats):
        order = [("fedlight", run_fedlight), ("plain", run_plain)]
        for name, fn in order if rep % 2 == 0 else order[::-1]:
            seconds, state = fn(recipe, data, parts, args.rounds)
            times[name].append(seconds)
            if name == "fedlight":
                fed_state = state
            else:
                plain_state = state
        same = all(torch.allclose(fed_state[k].double(), plain_state[k].double(), atol=1e-5) for k in fed_state)
        print(f"repeat {rep + 1}: fedlight {times['fedlight'][-1]:.2f} s, plain {times['plain'][-1]:.2f} s, "
              f"same global model: {same}")
        assert same, "fedlight and the plain loop diverged: the comparison would be void"
    fed, plain = statistics.median(times["fedlight"]), statistics.median(times["plain"])
    print(f"median over {args.repeats} repeats of {args.rounds} rounds: fedlight {fed:.2f} s, plain {plain:.2f} s, "
          f"ratio {fed / plain:.3f} (threads: {torch.get_num_threads()})")


if __name__ == "__main__":
    main()
