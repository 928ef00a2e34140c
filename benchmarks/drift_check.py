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


def check(block: Path, row_name: str, reference: str, seeds: set[int] | None = None) -> tuple[str, bool]:
    """The check's table and verdict line for ``row_name`` against ``reference`` over the seeds both ran (of
    ``seeds``, when given), and whether it passes."""
    row, ref = drift_by_seed(block, row_name), drift_by_seed(block, reference)
    both = sorted(set(row) & set(ref) & (set(row) if seeds is None else seeds))
    if not both:
        raise SystemExit(f"no seed with drift_cka in both {row_name} and {reference} under {block}")
    lines = [f"| seed | D({row_name}) | D({reference}) | ratio |", "|---|---|---|---|"]
    lines += [f"| {s} | {row[s]:.5f} | {ref[s]:.5f} | {row[s] / ref[s]:.2f} |" for s in both]
    mean_row, mean_ref = sum(row[s] for s in both) / len(both), sum(ref[s] for s in both) / len(both)
    further = sum(row[s] > ref[s] for s in both)
    passes = further == len(both) and mean_row >= RATIO * mean_ref
    lines.append(f"\nmean D: {row_name} {mean_row:.5f}, {reference} {mean_ref:.5f} ({mean_row / mean_ref:.2f}x); "
                 f"{row_name} drifts further in {further} of {len(both)} seeds: "
                 f"the drift check {'passes' if passes else 'fails'} (every seed and at least {RATIO}x)")
    return "\n".join(lines), passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("block", type=Path)
    parser.add_argument("row")
    parser.add_argument("reference")
    args = parser.parse_args()
    print(check(args.block, args.row, args.reference)[0])


if __name__ == "__main__":
    main()
