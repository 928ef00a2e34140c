"""The drift check of REPRODUCTION.md's "v4 MOON under drift": does a row's clients' encoder drift further
from the global one than a reference row's, seed by seed?

Per run, D = the mean over its rounds of 1 - ``drift_cka`` (linear CKA between each client's encoder after its
local training and the round's global encoder, mean over clients; ``eval.readings=[drift]``). The check
passes when D(row) > D(reference) in every seed both rows ran and mean D(row) >= 1.5 x mean D(reference).

    python benchmarks/drift_check.py runs/pilot_v4/moon_e10 fedavg fedavg-e2
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

RATIO = 1.5


def drift_by_seed(block: Path, row: str) -> dict[int, float]:
    """Per seed, the mean over rounds of 1 - drift_cka of ``row``'s run under ``block`` (reproduce.py's layout)."""
    out = {}
    for path in sorted((block / row).glob("seed*/runs/*/results.json")):
        history = json.loads(path.read_text())["history"]
        drift = [1 - h["drift_cka"] for h in history if h.get("drift_cka") is not None]
        if drift:
            out[int(re.search(r"seed(\d+)", str(path.relative_to(block))).group(1))] = sum(drift) / len(drift)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("block", type=Path)
    parser.add_argument("row")
    parser.add_argument("reference")
    args = parser.parse_args()
    row, ref = drift_by_seed(args.block, args.row), drift_by_seed(args.block, args.reference)
    seeds = sorted(set(row) & set(ref))
    if not seeds:
        raise SystemExit(f"no seed with drift_cka in both {args.row} and {args.reference} under {args.block}")
    print(f"| seed | D({args.row}) | D({args.reference}) | ratio |\n|---|---|---|---|")
    for s in seeds:
        print(f"| {s} | {row[s]:.5f} | {ref[s]:.5f} | {row[s] / ref[s]:.2f} |")
    mean_row, mean_ref = sum(row[s] for s in seeds) / len(seeds), sum(ref[s] for s in seeds) / len(seeds)
    every = all(row[s] > ref[s] for s in seeds)
    passes = every and mean_row >= RATIO * mean_ref
    print(f"\nmean D: {args.row} {mean_row:.5f}, {args.reference} {mean_ref:.5f} ({mean_row / mean_ref:.2f}x); "
          f"{args.row} drifts further in {sum(row[s] > ref[s] for s in seeds)} of {len(seeds)} seeds: "
          f"the drift check {'passes' if passes else 'fails'} (every seed and at least {RATIO}x)")


if __name__ == "__main__":
    main()
