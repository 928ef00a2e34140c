"""The micro-measurements behind BENCHMARKS.md's "What changed" table, in one command.

Each compares the two sides of one change alternately in this process (medians over
``--repeats``), on the cross-device workload's model and data:

* one SimCLR step (views, forward, backward, Adam) of the 3-layer CNN, contiguous vs
  channels-last (``fabric.channels_last``), at batch 20 and 128, with 1 and 2 threads;
* the evaluator's features of the 5,000 test images in chunks of 1,024 vs 256;
* one Adam step over the CNN's parameters, torch's default on the CPU (tensor by tensor)
  vs fused (``OptimizerSpec.build``), and ``torch.cuda.is_available()`` with and without
  Lightning's ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (torch.optim asks it at every step);
* the engine's time per client outside local training (a round's training, ``round_training.py``,
  minus the clients' ``seconds``), over a few rounds of 100 clients;
* the interpreter's teardown after ``import fedlight.engine.run.fit`` (what ``cli.run`` skips),
  timed from a child's last statement to its exit.

    python benchmarks/micro.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable
from unittest.mock import patch

import torch

from fedlight import registry
from fedlight.config import load_recipe
from fedlight.engine.loop.evaluator import Evaluator
from fedlight.engine.run.assemble import build_federation, build_views
from fedlight.engine.run.fit import build_module, make_fabric, prepare_data
from fedlight.engine.run.part_options import eval_options

from round_training import train_rounds

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = str(REPO / "benchmarks/workloads/cross_device_fmnist.yaml")


def median_ms(fn: Callable[[], object], n: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean milliseconds of ``n`` calls (after 2 warm-up calls)."""
    fn(), fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append(1000 * (time.perf_counter() - start) / n)
    return statistics.median(times)


def step_times(data, repeats: int) -> None:
    """One SimCLR optimizer step, contiguous vs channels-last."""
    g = torch.Generator().manual_seed(0)
    for threads in (2, 1):
        torch.set_num_threads(threads)
        for batch in (20, 128):
            ms = {}
            for channels_last in (False, True):
                recipe = load_recipe(WORKLOAD, [f"fabric.channels_last={channels_last}"])
                module, views = build_module(recipe, data), build_views(recipe, data)
                opt = module.configure_optimizers()
                module.train()
                x, y = data.train_x[:batch], data.train_y[:batch]

                def step() -> None:
                    loss = module.training_step((views.views(x, 2, g), y), 0)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                ms[channels_last] = median_ms(step, 30 if batch == 20 else 8, repeats)
            print(f"SimCLR step, batch {batch:>3}, {threads} thread(s): contiguous {ms[False]:.1f} ms, "
                  f"channels-last {ms[True]:.1f} ms ({ms[False] / ms[True]:.2f}x)")
    torch.set_num_threads(2)


def feature_times(data, repeats: int) -> None:
    """The evaluator's features of the test split, in chunks of 1,024 and 256."""
    recipe = load_recipe(WORKLOAD, [])
    module = build_module(recipe, data)
    evaluator = Evaluator(make_fabric(recipe), module, data, build_views(recipe, data), eval_options(recipe),
                          recipe.seed)
    ms = {c: median_ms(lambda: evaluator.apply(module.features, data.test_x, chunk=c), 1, repeats) for c in (1024, 256)}
    print(f"features of {len(data.test_x):,} test images: chunks of 1,024 {ms[1024] / 1000:.2f} s, "
          f"of 256 {ms[256] / 1000:.2f} s ({ms[1024] / ms[256]:.1f}x)")


def optimizer_times(data, repeats: int) -> None:
    """An Adam step tensor by tensor vs fused; the CUDA check with and without the NVML variable."""
    params = list(build_module(load_recipe(WORKLOAD, []), data).parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    ms = {}
    for fused in (None, True):
        opt = torch.optim.Adam(params, lr=1e-3, weight_decay=1e-6, fused=fused)
        ms[fused] = median_ms(opt.step, 100, repeats)
    print(f"Adam step over {len(params)} tensors: tensor by tensor {ms[None]:.2f} ms, fused {ms[True]:.2f} ms "
          f"({ms[None] / ms[True]:.1f}x)")
    var, us = "PYTORCH_NVML_BASED_CUDA_CHECK", {}
    with patch.dict(os.environ):  # the environment as it was afterwards
        for value in ("1", None):
            os.environ.pop(var, None)
            os.environ.update({var: value} if value else {})
            us[value] = 1000 * median_ms(torch.cuda.is_available, 200, repeats)
    print(f"torch.cuda.is_available(): {var}=1 {us['1']:.0f} us, unset {us[None]:.0f} us")


def engine_per_client(data, parts, rounds: int = 4) -> None:
    """Round time outside the clients' local training, per client (rounds 2..)."""
    recipe = load_recipe(WORKLOAD, ["fabric.accelerator=cpu"])
    fed = build_federation(make_fabric(recipe), recipe, data, parts, build_module(recipe, data),
                           registry.build_server(recipe.server, recipe.clients.num), Path(tempfile.mkdtemp()))
    per_client = []
    for seconds, reports in train_rounds(fed, rounds):
        outside = seconds - sum(rep["seconds"] for rep in reports)
        per_client.append(1000 * outside / len(reports))
    print(f"engine time per client outside local training: {statistics.median(per_client[1:]):.2f} ms "
          f"(median of rounds 2-{rounds}, {len(reports)} clients a round)")


def teardown_seconds(repeats: int) -> None:
    """From a child's last statement (after importing the engine) to its exit."""
    code = "import time, fedlight.engine.run.fit; print(time.time(), flush=True)"
    times = []
    for _ in range(repeats):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        times.append(time.time() - float(proc.stdout.split()[-1]))
    print(f"interpreter teardown after importing the engine: {statistics.median(times):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data, parts = prepare_data(load_recipe(WORKLOAD, []))
    step_times(data, args.repeats)
    feature_times(data, args.repeats)
    optimizer_times(data, args.repeats)
    engine_per_client(data, parts)
    teardown_seconds(args.repeats)


if __name__ == "__main__":
    main()
