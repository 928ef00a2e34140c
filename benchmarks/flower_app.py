"""Flower's side of ``vs_flower.py``: the same FedAvg + SimCLR workload as a Flower app.

Written with Flower's current Message API (``ClientApp`` / ``ServerApp``, ``strategy.FedAvg``,
``run_simulation`` on the Ray backend). Everything a fair comparison needs is shared with
fedlight: the recipe (data subset, partition, model, views, batch, seed), the model's
initialisation and the local arithmetic (``plain_loop.local_train``), and the evaluation
(fedlight's ``Evaluator``: kNN and linear probe before training and after the last round).
What differs is only the engine: Flower samples its own clients, ships weights as
``ArrayRecord`` messages to Ray actors and averages them in its strategy.

The client follows Flower's idiom - data loaded once per worker process (as their
``FederatedDataset`` cache does), the model built inside the client function - so it pays
Flower's usual per-client costs, no more.

Run through ``vs_flower.py``; by hand (``benchmarks`` on ``PYTHONPATH``)::

    python -c "import flower_app, sys; flower_app.main(sys.argv[1:])" RECIPE OUT.json [--workers 2]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from typing import Any

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

from fedlight.config import load_recipe
from fedlight.engine.loop.evaluator import Evaluator
from fedlight.engine.loop.sampling import clients_per_round
from fedlight.engine.run.assemble import build_views
from fedlight.engine.run.fit import build_module, make_fabric, prepare_data
from fedlight.engine.run.part_options import eval_options
from plain_loop import local_train, shared_state

RECIPE_ENV = "FEDLIGHT_FLOWER_RECIPE"  # the recipe's path reaches the Ray workers through their environment
RESULT: dict[str, Any] = {}


@functools.lru_cache(maxsize=1)
def workload(path: str) -> tuple[Any, Any, list, Any]:
    """Recipe, data, partition and views, built once per process (driver or Ray worker)."""
    recipe = load_recipe(path, ["fabric.accelerator=cpu"])
    data, parts = prepare_data(recipe)
    return recipe, data, parts, build_views(recipe, data)


def client_train(msg: Message, context: Context) -> Message:
    """One client's local epochs from the global weights in ``msg``; replies weights + sample count."""
    recipe, data, parts, views = workload(os.environ[RECIPE_ENV])
    client = int(context.node_config["partition-id"])
    round_ = int(msg.content["config"]["server-round"]) - 1
    model = build_module(recipe, data)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict(), strict=False)
    n = local_train(model, views, data.train_x, data.train_y, torch.as_tensor(parts[client]), recipe, round_, client)
    content = RecordDict({"arrays": ArrayRecord(shared_state(model)), "metrics": MetricRecord({"num-examples": n})})
    return Message(content=content, reply_to=msg)


def server_main(grid: Grid, context: Context) -> None:
    """Baseline evaluation, ``recipe.rounds`` FedAvg rounds over Flower's sampled clients, final evaluation."""
    recipe, data, _, views = workload(os.environ[RECIPE_ENV])
    model = build_module(recipe, data)
    fabric = make_fabric(recipe)
    evaluator = Evaluator(fabric, fabric.to_device(model), data, views, eval_options(recipe), recipe.seed)
    baseline = evaluator.model_metrics()
    k, n = clients_per_round(recipe.clients.num, recipe.clients.fraction), recipe.clients.num
    strategy = FedAvg(fraction_train=k / n, fraction_evaluate=0.0, min_train_nodes=k, min_available_nodes=n)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(shared_state(model)), num_rounds=recipe.rounds)
    final = result.arrays.to_torch_state_dict()
    if all(torch.equal(final[k], t) for k, t in shared_state(model).items()):
        raise RuntimeError("no Flower client trained (see the ClientApp errors above): the comparison would be void")
    model.load_state_dict(final, strict=False)
    RESULT.update(baseline=baseline, final=evaluator.model_metrics())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("out", help="JSON file for wall time and the final metrics")
    parser.add_argument("--workers", type=int, default=2, help="Ray actors (one CPU each)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    os.environ[RECIPE_ENV] = args.recipe
    recipe = workload(args.recipe)[0]
    client_app = ClientApp()
    client_app.train()(client_train)
    server_app = ServerApp()
    server_app.main()(server_main)
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=recipe.clients.num,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": args.workers}})
    with open(args.out, "w") as f:
        json.dump({**RESULT, "seconds": time.perf_counter() - start}, f, indent=1)
