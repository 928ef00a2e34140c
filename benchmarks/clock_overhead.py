"""Host cost of the virtual clock and the asynchronous loop: CPU seconds of round training per client trained,
synchronous FedAvg without a clock against the same with the clock, and FedBuff with 100 clients in flight.

The cross-device workload (``workloads/cross_device_fmnist.yaml``: 1,000 clients of 20 images, 100 a round)
with lognormal devices. Sides, each built as a run builds it (``assemble.build_federation``) and timed over
whole rounds without evaluation (``round_training.train_rounds``: planning, dealing, training, landing,
aggregating, then the history, the logs and the checkpoint):

* ``sync``: synchronous FedAvg, no clock (today's runs);
* ``sync+clock``: the same with ``clock.devices=lognormal`` (trip lengths, columns);
* ``fedbuff K=100`` / ``fedbuff K=10``: ``asynchrony.mode=fedbuff``, 100 in flight, a buffer of 100 or 10
  (each step plans the events, holds the trained updates, rebases the stale ones and applies the buffer);
* ``fedbuff K=100, ckpt/10`` / ``fedbuff K=10, ckpt/10``: the same with ``run.checkpoint_every=10``: an
  asynchronous step's checkpoint holds every trained update in flight (about 100 models here), which a
  synchronous round's does not.

Sides take turns within each repeat; each is timed in the process's CPU seconds (``time.process_time``),
which another job on a shared machine inflates less than wall seconds (medians, and ratios of medians).
On a loaded machine even those move by tens of percent between identical sides, so each side also
reports the share of its own time spent in the clock's and the asynchronous server's code (planning the
events, the trips' lengths, holding and rebasing updates, the columns) and in writing checkpoints, timed
inside the same rounds: ratios that the load moves far less.

    python benchmarks/clock_overhead.py --clients 300 --repeats 3 --json clock_overhead.json
    python benchmarks/clock_overhead.py --profile   # cProfile of 10 whole FedBuff K=10 steps, checkpoints included
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from fedlight import registry
from fedlight.clock.devices import TripCost
from fedlight.clock.events import EventSchedule
from fedlight.config import load_recipe
from fedlight.engine.loop.async_rounds import InFlight
from fedlight.engine.loop.run_checkpoint import RunCheckpoint
from fedlight.engine.parts.clock.round_clock import RoundClock
from fedlight.server import asynchronous
from fedlight.engine.run.assemble import build_federation
from fedlight.engine.run.fit import build_module, make_fabric, prepare_data

from round_training import train_rounds

REPO = Path(__file__).resolve().parents[1]
CLOCK = ["clock.devices=lognormal", "clock.seconds_per_sample=0.01"]
SIDES = {
    "sync": [],
    "sync+clock": CLOCK,
    "fedbuff K=100": [*CLOCK, "asynchrony.mode=fedbuff", "asynchrony.concurrency=100", "asynchrony.buffer=100"],
    "fedbuff K=10": [*CLOCK, "asynchrony.mode=fedbuff", "asynchrony.concurrency=100", "asynchrony.buffer=10"],
}
SIDES |= {f"{side}, ckpt/10": [*SIDES[side], "run.checkpoint_every=10"] for side in ("fedbuff K=100", "fedbuff K=10")}


CLOCK_CODE = [(EventSchedule, "plan"), (EventSchedule, "commit"), (InFlight, "land"), (InFlight, "columns"),
              (RoundClock, "participants"), (RoundClock, "columns"), (TripCost, "__call__")]
INSIDE = [(asynchronous, "apply_buffer")]  # the buffer's aggregation, which a synchronous round does too
CLOCK_TIMED = [(owner, name, 1.0) for owner, name in CLOCK_CODE] + [(owner, name, -1.0) for owner, name in INSIDE]
CHECKPOINT_TIMED = [(RunCheckpoint, "save", 1.0)]


def timed(methods: list[tuple[object, str, float]]) -> tuple[list[float], list[tuple[object, str, object]]]:
    """Wrap each (owner, method, sign) to add sign x its CPU seconds to a counter; the counter and what to
    put back."""
    spent, patched = [0.0], []
    for owner, name, sign in methods:
        original = getattr(owner, name)

        def wrapper(*args, _original=original, _sign=sign, **kwargs):
            start = time.process_time()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[0] += _sign * (time.process_time() - start)
        setattr(owner, name, wrapper)
        patched.append((owner, name, original))
    return spent, patched


def seconds_per_client(overrides: list[str], clients: int, threads: int) -> tuple[float, float, float]:
    """CPU seconds of whole rounds (no evaluation) per client trained, over rounds that train about ``clients``
    clients, and the shares of them spent in the clock's code and in writing checkpoints."""
    recipe = load_recipe(REPO / "benchmarks/workloads/cross_device_fmnist.yaml",
                         ["fabric.accelerator=cpu", f"fabric.threads={threads}", "eval.projector_samples=0",
                          *overrides])
    data, parts = prepare_data(recipe)
    fabric = make_fabric(recipe)
    fed = build_federation(fabric, recipe, data, parts, build_module(recipe, data),
                           registry.build_server(recipe.server, recipe.clients.num), Path(tempfile.mkdtemp()))
    per_round = 10 if "asynchrony.buffer=10" in overrides else 100  # clients a step lands
    (in_clock, clock_patched), (in_checkpoint, checkpoint_patched) = timed(CLOCK_TIMED), timed(CHECKPOINT_TIMED)
    started = time.process_time()
    try:
        rounds = train_rounds(fed, max(1, clients // per_round))
    finally:
        for owner, name, original in clock_patched + checkpoint_patched:
            setattr(owner, name, original)
    spent = time.process_time() - started
    trained = sum(rep["status"] == "ok" for _, reports in rounds for rep in reports)
    return spent / trained, in_clock[0] / spent, in_checkpoint[0] / spent


def profile_steps(steps: int = 10, threads: int = 1) -> None:
    """cProfile of ``steps`` whole FedBuff K=10 steps (``run_round``: training, landing, the history, the
    checkpoint with the updates in flight), after two steps' warm-up; the top of the cumulative times."""
    import cProfile
    import pstats

    recipe = load_recipe(REPO / "benchmarks/workloads/cross_device_fmnist.yaml",
                         ["fabric.accelerator=cpu", f"fabric.threads={threads}", "eval.projector_samples=0",
                          *SIDES["fedbuff K=10"]])
    data, parts = prepare_data(recipe)
    fed = build_federation(make_fabric(recipe), recipe, data, parts, build_module(recipe, data),
                           registry.build_server(recipe.server, recipe.clients.num), Path(tempfile.mkdtemp()))
    train_rounds(fed, 2)
    profiler = cProfile.Profile()
    profiler.enable()
    train_rounds(fed, steps)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=300, help="clients trained per side and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", action="store_true", help="profile 10 whole FedBuff K=10 steps instead")
    args = parser.parse_args()
    if args.profile:
        profile_steps(threads=args.threads)
        return
    timings: dict[str, list[float]] = {side: [] for side in SIDES}
    shares: dict[str, list[float]] = {side: [] for side in SIDES}
    checkpoints: dict[str, list[float]] = {side: [] for side in SIDES}
    for repeat in range(args.repeats):
        order = list(SIDES) if repeat % 2 == 0 else list(SIDES)[::-1]
        for side in order:
            per_client, share, checkpoint = seconds_per_client(SIDES[side], args.clients, args.threads)
            timings[side].append(per_client)
            shares[side].append(share)
            checkpoints[side].append(checkpoint)
            print(f"repeat {repeat + 1} {side}: {per_client * 1000:.2f} ms a client, {share:.3%} in the clock's code, "
                  f"{checkpoint:.2%} in checkpoints", flush=True)
    base = statistics.median(timings["sync"])
    summary = {side: {"ms_per_client": statistics.median(t) * 1000, "ratio_to_sync": statistics.median(t) / base,
                      "clock_share": statistics.median(shares[side]),
                      "checkpoint_share": statistics.median(checkpoints[side]), "runs_ms": [x * 1000 for x in t]}
               for side, t in timings.items()}
    for side, s in summary.items():
        print(f"{side:23s} {s['ms_per_client']:.2f} ms a client (median of {args.repeats}), "
              f"{s['ratio_to_sync']:.3f}x sync, {s['clock_share']:.3%} of it in the clock's code, "
              f"{s['checkpoint_share']:.2%} in checkpoints")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
