"""Batched clients (``local.batched_clients``) against one by one on a CPU dispatch-bound proxy.

A round's local training of ``--clients`` clients of ``--samples`` images each (3 x 16 x 16,
the synthetic data's shape), one epoch at batch ``--batch``, with the ``tiny_cnn`` backbone
(16-32-64 channels) and SimCLR's heads at 64 - 32: small enough that a one-by-one step is
mostly the dispatch of its small kernels. Both sides train the same clients from the same
starting model and generators through the engine's own entry points (``EpochSchedule.train``
one client after another; ``EpochSchedule.train_together`` on all of them); the two sides
alternate, the first of each repeat swapped every repeat, so a CPU shared with other work
slows both alike. Prints the median milliseconds a client over ``--repeats``, their ratio, and
the median and range of the ratio within each repeat (its two sides ran back to back); with
``--profile``, torch's profile of one batched round (where its time goes).

    python benchmarks/batched_clients.py [--batch 4 8] [--clients 32] [--samples 32] [--repeats 7]

With ``--recipe``, the same comparison on a real workload instead of the proxy: the recipe's data
(subset and partition as ``fit`` makes them), method, model, optimizer, views and local epochs,
the first ``--clients`` clients of its partition (``--samples`` and ``--method`` unused; key=value
arguments anywhere are recipe overrides). The cross-device workload's round, 100 clients of 20
Fashion-MNIST images, on 2 threads::

    python benchmarks/batched_clients.py --recipe benchmarks/workloads/cross_device_fmnist.yaml \
        --clients 100 --batch 4 20 --threads 2 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from lightning.fabric import Fabric

from fedlight.data.sources import synthetic
from fedlight.data.views import ViewMaker, ViewParams
from fedlight.engine.parts.fedavg.epoch_schedule import EpochSchedule
from fedlight.methods.byol import BYOL
from fedlight.methods.federated_module import FederatedModule, OptimizerSpec
from fedlight.methods.simclr import SimCLR
from fedlight.methods.supervised import Supervised
from fedlight.models.backbones import tiny_cnn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from command_line import parse_with_overrides  # noqa: E402

METHODS: dict[str, Callable[[], FederatedModule]] = {
    "simclr": lambda: SimCLR(tiny_cnn(3, 16), OptimizerSpec(), hidden_dim=64, output_dim=32),
    "byol": lambda: BYOL(tiny_cnn(3, 16), OptimizerSpec(), hidden_dim=64, output_dim=32),
    "supervised": lambda: Supervised(tiny_cnn(3, 16), 10, OptimizerSpec()),
}


def setup(method: str, clients: int, samples: int, batch: int) -> tuple[FederatedModule, EpochSchedule]:
    """The method's worker model (channels-last, as ``fit`` builds it) and an epoch schedule over
    ``clients`` disjoint slices of ``samples`` synthetic images."""
    torch.manual_seed(0)
    data = synthetic(0, train=clients * samples)
    module = METHODS[method]().to(memory_format=torch.channels_last)
    views = ViewMaker(ViewParams(), *data.mean_std(), channels_last=True)
    parts = list(torch.arange(clients * samples).view(clients, samples))
    return module, EpochSchedule(Fabric(accelerator="cpu", devices=1), data.train_x, data.train_y, parts, views,
                                 epochs=1, batch_size=batch)


def setup_recipe(recipe_path: str, overrides: list[str], clients: int, batch: int
                 ) -> tuple[FederatedModule, EpochSchedule, str]:
    """``setup`` for a real workload: the worker model, views, data and first ``clients`` clients of
    ``recipe_path`` (with ``overrides``) as ``fit`` builds them, an epoch schedule at batch ``batch``
    on the CPU, and the method's name."""
    from fedlight.config import load_recipe
    from fedlight.engine.run.assemble import build_views
    from fedlight.engine.run.fit import build_module, prepare_data

    recipe = load_recipe(recipe_path, overrides)
    data, parts = prepare_data(recipe)
    if len(parts) < clients:
        raise SystemExit(f"{recipe_path} has {len(parts)} clients, fewer than --clients {clients}")
    module = build_module(recipe, data)
    parts = [torch.as_tensor(p) for p in parts[:clients]]
    return module, EpochSchedule(Fabric(accelerator="cpu", devices=1), data.train_x, data.train_y, parts,
                                 build_views(recipe, data), epochs=recipe.local.epochs, batch_size=batch), \
        recipe.method["name"]


def sides(module: FederatedModule, schedule: EpochSchedule, clients: int) -> dict[str, Callable[[], None]]:
    """One round of every client's local training, one by one and together."""
    initial = {k: v.clone() for k, v in module.state_dict().items()}
    ids = list(range(clients))

    def start(client: int) -> None:
        module.load_state_dict(initial)
        module.reset_private_state()

    def generator(client: int) -> torch.Generator:
        return torch.Generator().manual_seed(client)

    def one_by_one() -> None:
        for c in ids:
            start(c)
            schedule.train(module, c, 0, generator(c), {}, 1.0)

    def together() -> None:
        schedule.train_together(module, ids, 0, [generator(c) for c in ids], [1.0] * clients, start)

    return {"one by one": one_by_one, "batched": together}


def compare(method: str, clients: int, samples: int, batch: int, repeats: int,
            recipe: tuple[str, list[str]] | None = None) -> None:
    """Alternate the two sides ``repeats`` times (after one warm-up each); print ms a client. With
    ``recipe`` (path, overrides), on that workload's model, views and clients (``setup_recipe``)."""
    if recipe is None:
        module, schedule = setup(method, clients, samples, batch)
    else:
        module, schedule, method = setup_recipe(*recipe, clients, batch)
    runs = sides(module, schedule, clients)
    for fn in runs.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(repeats):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for name in order:
            started = time.perf_counter()
            runs[name]()
            times[name].append(1000 * (time.perf_counter() - started) / clients)
    alone, together = (statistics.median(times[n]) for n in runs)
    paired = sorted(a / b for a, b in zip(times["one by one"], times["batched"]))  # a repeat's two sides ran back to back
    print(f"{method:10s} batch {batch}: {clients} clients x {schedule.planned_steps(0)} steps (client 0); "
          f"ms a client (median): "
          f"one by one {alone:6.1f}, batched {together:6.1f}, ratio {alone / together:.2f}x; "
          f"ratio within a repeat: median {statistics.median(paired):.2f}x, range {paired[0]:.2f}-{paired[-1]:.2f}x")


def profile(method: str, clients: int, samples: int, batch: int) -> None:
    """torch's profile of one batched round: the ops that take its time."""
    module, schedule = setup(method, clients, samples, batch)
    together = sides(module, schedule, clients)["batched"]
    together()
    with torch.profiler.profile() as prof:
        together()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", nargs="+", default=["simclr"], choices=sorted(METHODS))
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--recipe", help="a real workload's recipe (module docstring) in place of the proxy")
    args = parse_with_overrides(parser)
    if args.profile and args.recipe:
        parser.error("--profile runs on the proxy only")
    os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # as fit drops Lightning's per-step NVML probe
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} intra-op thread(s)")
    if args.recipe:
        for batch in args.batch:
            compare("", args.clients, args.samples, batch, args.repeats, (args.recipe, args.overrides))
        return
    for method in args.method:
        for batch in args.batch:
            compare(method, args.clients, args.samples, batch, args.repeats)
            if args.profile:
                profile(method, args.clients, args.samples, batch)


if __name__ == "__main__":
    main()
