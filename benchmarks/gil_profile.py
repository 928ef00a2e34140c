"""Where ``fabric.workers`` threads hold the GIL: a py-spy ``--gil`` raw profile summed by function.

With ``--gil``, py-spy samples only the thread that holds the GIL, so the samples whose stack
passes through ``ClientRunner.train_on_worker`` (the worker threads), divided by the sampling rate,
are the seconds the workers held it; a function's figure includes what it called::

    py-spy record --gil -r 200 -f raw -o gil.txt -- python -m fedlight fit \\
        --recipe benchmarks/workloads/cross_device_fmnist.yaml rounds=3 fabric.workers=2
    python benchmarks/gil_profile.py gil.txt --rate 200
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

WORKER_FRAME = "ClientRunner.train_on_worker"


def worker_gil_seconds(raw: Path, rate: float) -> tuple[float, Counter]:
    """Total GIL seconds of the worker threads and, per function, the seconds under it."""
    total, per_function = 0, Counter()
    for line in raw.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        functions = [frame.split(" (")[0] for frame in stack.split(";")]
        if WORKER_FRAME not in functions:
            continue
        total += int(count)
        for name in set(functions):
            per_function[name] += int(count)
    return total / rate, Counter({k: v / rate for k, v in per_function.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="py-spy record -f raw output")
    parser.add_argument("--rate", type=float, default=200, help="py-spy's -r (samples a second)")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    total, per_function = worker_gil_seconds(args.raw, args.rate)
    print(f"worker threads held the GIL {total:.2f} s")
    for name, seconds in per_function.most_common(args.top):
        print(f"{seconds:8.2f} s  {name}")


if __name__ == "__main__":
    main()
