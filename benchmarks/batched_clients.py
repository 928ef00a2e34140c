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
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
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


def compare(method: str, clients: int, samples: int, batch: int, repeats: int) -> None:
    """Alternate the two sides ``repeats`` times (after one warm-up each); print ms a client."""
    module, schedule = setup(method, clients, samples, batch)
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
    print(f"{method:10s} batch {batch}: {clients} clients x {schedule.planned_steps(0)} steps; ms a client (median): "
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
    args = parser.parse_args()
    os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # as fit drops Lightning's per-step NVML probe
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} intra-op thread(s)")
    for method in args.method:
        for batch in args.batch:
            compare(method, args.clients, args.samples, batch, args.repeats)
            if args.profile:
                profile(method, args.clients, args.samples, batch)


if __name__ == "__main__":
    main()
