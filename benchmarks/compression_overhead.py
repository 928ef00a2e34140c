"""Host cost of compressing the uploads (``server.compress``): CPU seconds of round training per client trained,
FedAvg without compression against the same with each kind, and the bytes each client uploads.

The cross-device workload (``workloads/cross_device_fmnist.yaml``: 1,000 clients of 20 images, 100 a round,
the cross-silo CNN of 0.1 M parameters). Sides, each built as a run builds it (``assemble.build_federation``)
and timed over whole rounds without evaluation (``round_training.train_rounds``: dealing, training,
compressing, aggregating, then the history, the logs and the checkpoint):

* ``none``: no ``server.compress`` (today's runs);
* ``fp16``, ``qsgd 4``, ``qsgd 4 rotated``, ``top-1%``, ``top-1% + EF``, ``random-1%``: ``server.compress``
  with that kind (EF: error feedback, whose residual goes through the client store).

Sides take turns within each repeat, in the process's CPU seconds (``time.process_time``: medians, and
ratios of medians), as ``clock_overhead.py`` does; since the load of a shared machine moves even those by
tens of percent, each side also reports the share of its own training time spent compressing and decoding
(``UpdateCompression.compress``), timed inside the same rounds.

    nice -n 10 python benchmarks/compression_overhead.py --clients 200 --repeats 3 --threads 1 --json compression.json
"""

from __future__ import annotations

import time

from fedlight.compression.update_compression import UpdateCompression

from round_training import (cross_device_federation, medians, restore, sides_parser, take_turns, timed,
                            train_rounds, write_summary)

SIDES = {
    "none": [],
    "fp16": ["server.compress.kind=fp16"],
    "qsgd 4": ["server.compress.kind=qsgd", "server.compress.bits=4"],
    "qsgd 4 rotated": ["server.compress.kind=qsgd", "server.compress.bits=4", "server.compress.rotate=true"],
    "top-1%": ["server.compress.kind=topk", "server.compress.fraction=0.01"],
    "top-1% + EF": ["server.compress.kind=topk", "server.compress.fraction=0.01", "server.compress.error_feedback=true"],
    "random-1%": ["server.compress.kind=randk", "server.compress.fraction=0.01"],
}


def seconds_per_client(overrides: list[str], clients: int, threads: int) -> tuple[float, float, float]:
    """(round training CPU seconds per client trained, over rounds of 100 clients that train about ``clients``;
    the share of them spent compressing; the bytes a client uploads)."""
    fed = cross_device_federation(overrides, threads)
    in_compression, patched = timed([(UpdateCompression, "compress", 1.0)])
    started = time.process_time()
    try:
        rounds = train_rounds(fed, max(1, clients // 100))
    finally:
        restore(patched)
    spent = time.process_time() - started
    trained = sum(rep["status"] == "ok" for _, reports in rounds for rep in reports)
    return spent / trained, in_compression[0] / spent, fed.run_state.ledger.totals()["bytes_up"] / trained


def say(repeat: int, side: str, measured: tuple[float, ...]) -> None:
    """One side's line of one repeat: ms a client and the share spent compressing."""
    print(f"repeat {repeat} {side}: {measured[0] * 1000:.2f} ms a client, {measured[1]:.2%} compressing", flush=True)


def main() -> None:
    args = sides_parser(__doc__.splitlines()[0], clients=200, threads=1).parse_args()
    measured = take_turns(list(SIDES), args.repeats, lambda side: seconds_per_client(SIDES[side], args.clients,
                                                                                      args.threads), say)
    summary = medians(measured, "none", ("ms_per_client", "compression_share", "bytes_up_per_client"))
    write_summary(summary, lambda side, s: f"{side:15s} {s['ms_per_client']:.2f} ms a client (median of "
                  f"{args.repeats}), {s['ratio_to_none']:.3f}x none, {s['compression_share']:.2%} compressing, "
                  f"{s['bytes_up_per_client'] / 1e3:.1f} kB up a client", args.json)


if __name__ == "__main__":
    main()
