"""Per-client engine overhead: one round in which 1,000 clients of SimCLR + FedAvg train.

Times a round's training (``Federation.run_round``'s ``TRAINING_STEPS``) and every ``training_step`` of the fedlight on
``PYTHONPATH``; the round's time outside the optimizer steps, divided by the number of
clients, is what the engine spends per client (state swaps, optimizer set-up, fault draw,
NaN/Inf check, aggregation, ledger). Run it against two checkouts to compare them:

    PYTHONPATH=. python benchmarks/client_overhead.py [--clients 1000] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import fedlight
from fedlight.config import load_recipe
from fedlight.engine.loop import federation as orchestrator, local_loop
from fedlight.engine.run.fit import fit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from kill_resume import RECIPE  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    args, overrides = parser.parse_known_args()
    spent = {"round": 0.0, "steps": 0.0, "n": 0}
    step = local_loop.training_step

    def timed_round(train_step):
        def timed(self, *a, **k):
            t = time.perf_counter()
            out = train_step(self, *a, **k)
            spent["round"] += time.perf_counter() - t
            return out
        return timed

    def timed_step(*a, **k):
        t = time.perf_counter()
        out = step(*a, **k)
        spent["steps"] += time.perf_counter() - t
        spent["n"] += 1
        return out

    for name in orchestrator.TRAINING_STEPS:
        setattr(orchestrator.Federation, name, timed_round(getattr(orchestrator.Federation, name)))
    local_loop.training_step = timed_step
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "recipe.yaml"
        recipe.write_text(RECIPE.format(repo=REPO))
        fit(load_recipe(recipe, ["rounds=1", "partition.kind=iid", f"clients.num={args.clients}",
                                 "eval.probe_epochs=1", "eval.knn_k=5", *overrides, f"run.dir={tmp}/run"]))
    print(json.dumps({"fedlight": str(Path(fedlight.__file__).parent), "clients": args.clients,
                      "round_s": round(spent["round"], 2), "steps": spent["n"], "steps_s": round(spent["steps"], 2),
                      "overhead_ms_per_client": round(1000 * (spent["round"] - spent["steps"]) / args.clients, 2)}))


if __name__ == "__main__":
    main()
