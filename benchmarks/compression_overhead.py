"""Host cost of compressing the uploads (``server.compress``): CPU seconds of round training per client trained,
FedAvg without compression against the same with each kind, and the bytes each client uploads.

The cross-device workload (``workloads/cross_device_fmnist.yaml``: 1,000 clients of 20 images, 100 a round,
the cross-silo CNN of 0.1 M parameters). Sides, each built as a run builds it (``assemble.build_federation``)
and timed over its training steps only (``round_training.train_rounds``: dealing, training, compressing,
aggregating; no evaluation, checkpoint or log):

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

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from fedlight import registry
from fedlight.compression.update_compression import UpdateCompression
from fedlight.config import load_recipe
from fedlight.engine.run.assemble import build_federation
from fedlight.engine.run.fit import build_module, make_fabric, prepare_data

from round_training import train_rounds

REPO = Path(__file__).resolve().parents[1]
SIDES = {
    "none": [],
    "fp16": ["server.compress.kind=fp16"],
    "qsgd 4": ["server.compress.kind=qsgd", "server.compress.bits=4"],
    "qsgd 4 rotated": ["server.compress.kind=qsgd", "server.compress.bits=4", "server.compress.rotate=true"],
    "top-1%": ["server.compress.kind=topk", "server.compress.fraction=0.01"],
    "top-1% + EF": ["server.compress.kind=topk", "server.compress.fraction=0.01", "server.compress.error_feedback=true"],
    "random-1%": ["server.compress.kind=randk", "server.compress.fraction=0.01"],
}


def timed_compression() -> tuple[list[float], object]:
    """Wrap ``UpdateCompression.compress`` to add its CPU seconds to a counter; returns (counter, original)."""
    spent, original = [0.0], UpdateCompression.compress

    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.process_time() - start
    UpdateCompression.compress = wrapper
    return spent, original


def seconds_per_client(overrides: list[str], clients: int, threads: int) -> tuple[float, float, float]:
    """(round training CPU seconds per client trained, over rounds of 100 clients that train about ``clients``;
    the share of them spent compressing; the bytes a client uploads)."""
    recipe = load_recipe(REPO / "benchmarks/workloads/cross_device_fmnist.yaml",
                         ["fabric.accelerator=cpu", f"fabric.threads={threads}", "eval.projector_samples=0",
                          *overrides])
    data, parts = prepare_data(recipe)
    fed = build_federation(make_fabric(recipe), recipe, data, parts, build_module(recipe, data),
                           registry.build_server(recipe.server, recipe.clients.num), Path(tempfile.mkdtemp()))
    in_compression, original = timed_compression()
    started = time.process_time()
    try:
        rounds = train_rounds(fed, max(1, clients // 100))
    finally:
        UpdateCompression.compress = original
    spent = time.process_time() - started
    trained = sum(rep["status"] == "ok" for _, reports in rounds for rep in reports)
    return spent / trained, in_compression[0] / spent, fed.run_state.ledger.totals()["bytes_up"] / trained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200, help="clients trained per side and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    timings: dict[str, list[float]] = {side: [] for side in SIDES}
    shares: dict[str, list[float]] = {side: [] for side in SIDES}
    uploads: dict[str, float] = {}
    for repeat in range(args.repeats):
        order = list(SIDES) if repeat % 2 == 0 else list(SIDES)[::-1]
        for side in order:
            per_client, share, uploads[side] = seconds_per_client(SIDES[side], args.clients, args.threads)
            timings[side].append(per_client)
            shares[side].append(share)
            print(f"repeat {repeat + 1} {side}: {per_client * 1000:.2f} ms a client, {share:.2%} compressing",
                  flush=True)
    base = statistics.median(timings["none"])
    summary = {side: {"ms_per_client": statistics.median(t) * 1000, "ratio_to_none": statistics.median(t) / base,
                      "compression_share": statistics.median(shares[side]), "bytes_up_per_client": uploads[side],
                      "runs_ms": [x * 1000 for x in t]}
               for side, t in timings.items()}
    for side, s in summary.items():
        print(f"{side:15s} {s['ms_per_client']:.2f} ms a client (median of {args.repeats}), "
              f"{s['ratio_to_none']:.3f}x none, {s['compression_share']:.2%} compressing, "
              f"{s['bytes_up_per_client'] / 1e3:.1f} kB up a client")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
