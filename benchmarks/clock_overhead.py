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
    python benchmarks/clock_overhead.py --profile "fedbuff K=100, ckpt/10" --clients 1000 --threads 1
        # cProfile of that side and of sync: the functions whose own time a client differs most
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

from fedlight.clock.devices import TripCost
from fedlight.clock.events import EventSchedule
from fedlight.engine.loop.async_rounds import InFlight
from fedlight.engine.loop.run_checkpoint import RunCheckpoint
from fedlight.engine.parts.clock.round_clock import RoundClock
from fedlight.server import asynchronous

from round_training import (cross_device_federation, medians, restore, sides_parser, take_turns, timed,
                            train_rounds, write_summary)

CLOCK = ["clock.devices=lognormal", "clock.seconds_per_sample=0.01"]
SIDES = {
    "sync": [],
    "sync+clock": CLOCK,
    "fedbuff K=100": [*CLOCK, "asynchrony.mode=fedbuff", "asynchrony.concurrency=100", "asynchrony.buffer=100"],
    "fedbuff K=10": [*CLOCK, "asynchrony.mode=fedbuff", "asynchrony.concurrency=100", "asynchrony.buffer=10"],
}
SIDES |= {f"{side}, ckpt/10": [*SIDES[side], "run.checkpoint_every=10"] for side in ("fedbuff K=100", "fedbuff K=10")}
SIDES["fedbuff K=10, ckpt/100"] = [*SIDES["fedbuff K=10"], "run.checkpoint_every=100"]  # one per 1,000 clients


CLOCK_CODE = [(EventSchedule, "plan"), (EventSchedule, "commit"), (InFlight, "land"), (InFlight, "columns"),
              (RoundClock, "participants"), (RoundClock, "columns"), (TripCost, "__call__")]
INSIDE = [(asynchronous, "apply_buffer")]  # the buffer's aggregation, which a synchronous round does too
CLOCK_TIMED = [(owner, name, 1.0) for owner, name in CLOCK_CODE] + [(owner, name, -1.0) for owner, name in INSIDE]
CHECKPOINT_TIMED = [(RunCheckpoint, "save", 1.0)]


def seconds_per_client(overrides: list[str], clients: int, threads: int) -> tuple[float, float, float, float]:
    """CPU seconds of whole rounds (no evaluation) per client trained, over rounds that train about ``clients``
    clients, the shares of them spent in the clock's code and in writing checkpoints, and the process's minor
    page faults per client (memory the rounds allocate afresh: each is a page the kernel zeroes)."""
    fed = cross_device_federation(overrides, threads)
    per_round = 10 if "asynchrony.buffer=10" in overrides else 100  # clients a step lands
    (in_clock, clock_patched), (in_checkpoint, checkpoint_patched) = timed(CLOCK_TIMED), timed(CHECKPOINT_TIMED)
    faults, started = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
    try:
        rounds = train_rounds(fed, max(1, clients // per_round))
    finally:
        restore(clock_patched + checkpoint_patched)
    spent = time.process_time() - started
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    trained = sum(rep["status"] == "ok" for _, reports in rounds for rep in reports)
    return spent / trained, in_clock[0] / spent, in_checkpoint[0] / spent, faults / trained


def profiled(side: str, clients: int, threads: int) -> dict[str, float]:
    """Per function (``file:line:name``), its own seconds (cProfile's tottime) per client trained over rounds
    of ``side`` that train about ``clients`` clients, after one warm-up round."""
    import cProfile
    import pstats

    fed = cross_device_federation(SIDES[side], threads)
    train_rounds(fed, 1)
    profiler = cProfile.Profile()
    profiler.enable()
    rounds = train_rounds(fed, max(1, clients // (10 if "asynchrony.buffer=10" in SIDES[side] else 100)))
    profiler.disable()
    trained = sum(rep["status"] == "ok" for _, reports in rounds for rep in reports)
    return {f"{Path(file).name}:{line}:{name}": stats[2] / trained
            for (file, line, name), stats in pstats.Stats(profiler).stats.items()}


def profile_against_sync(side: str, clients: int, threads: int, top: int = 25) -> None:
    """cProfile of ``side`` and of ``sync`` over as many clients: the functions whose own time per client
    differs most between them (ms), the total first: where a side's extra cost goes."""
    mine, base = profiled(side, clients, threads), profiled("sync", clients, threads)
    print(f"own time, ms a client: sync {sum(base.values()) * 1000:.2f}, {side} {sum(mine.values()) * 1000:.2f}")
    rows = sorted(((mine.get(k, 0.0) - base.get(k, 0.0)) * 1000, k) for k in set(mine) | set(base))
    for diff, name in rows[::-1][:top]:
        print(f"{diff:+.3f}  sync {base.get(name, 0.0) * 1000:.3f} -> {mine.get(name, 0.0) * 1000:.3f}  {name}")


def say(repeat: int, side: str, measured: tuple[float, ...]) -> None:
    """One side's line of one repeat: ms a client, the clock's share, the checkpoints' share, page faults."""
    print(f"repeat {repeat} {side}: {measured[0] * 1000:.2f} ms a client, {measured[1]:.3%} in the clock's code, "
          f"{measured[2]:.2%} in checkpoints, {measured[3]:.1f} minor page faults a client", flush=True)


def main() -> None:
    parser = sides_parser(__doc__.splitlines()[0], clients=300, threads=1)  # a 20-image client is one thread's work
    parser.add_argument("--profile", nargs="?", const="fedbuff K=10", choices=list(SIDES),
                        help="profile one side (default: fedbuff K=10) and sync over --clients clients instead, "
                             "and print where their own times per client differ most")
    parser.add_argument("--sides", nargs="+", choices=list(SIDES), default=list(SIDES),
                        help="the sides to time (sync, the reference, is always one)")
    args = parser.parse_args()
    if args.profile:
        profile_against_sync(args.profile, args.clients, args.threads)
        return
    sides = ["sync", *(side for side in args.sides if side != "sync")]
    measured = take_turns(sides, args.repeats, lambda side: seconds_per_client(SIDES[side], args.clients,
                                                                                args.threads), say)
    summary = medians(measured, "sync", ("ms_per_client", "clock_share", "checkpoint_share", "minor_faults"))
    write_summary(summary, lambda side, s: f"{side:23s} {s['ms_per_client']:.2f} ms a client (median of "
                  f"{args.repeats}), {s['ratio_to_sync']:.3f}x sync, {s['clock_share']:.3%} of it in the clock's "
                  f"code, {s['checkpoint_share']:.2%} in checkpoints, {s['minor_faults']:.1f} minor page faults a "
                  "client", args.json)


if __name__ == "__main__":
    main()
