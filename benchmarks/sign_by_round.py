"""A claim's sign at every evaluated round of a block's runs (REPRODUCTION.md, "v4 SOFed at a longer horizon"):
each row's mean over the seeds both rows ran, A - B with its paired 95% interval, the seeds where A is ahead,
and each row's lift over its random-init value divided by the seeds' sd of that lift (rule v4's design target).
No verdict: the block's verdict is rule v4's (``reproduce.py --rule v4``); this prints the curve it reads.

    python benchmarks/sign_by_round.py runs/v4/sofed sofed byol-rr --metric knn_acc
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from fedlight import stats


def curves(block: Path, row: str, metric: str) -> dict[int, dict[int, float]]:
    """Seed -> round -> ``metric`` in points, round 0 the random init, of ``row``'s finished runs under ``block``
    (reproduce.py's layout)."""
    out = {}
    for path in sorted((block / row).glob("seed*/runs/*/results.json")):
        results = json.loads(path.read_text())
        if results.get("final") is None:
            continue
        seed = int(re.search(r"seed(\d+)", str(path.relative_to(block))).group(1))
        out[seed] = {0: 100 * results["baseline"][metric],
                     **{h["round"]: 100 * h[metric] for h in results["history"] if h.get(metric) is not None}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("block", type=Path)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--metric", default="knn_acc")
    args = parser.parse_args()
    a, b = curves(args.block, args.a, args.metric), curves(args.block, args.b, args.metric)
    seeds = sorted(set(a) & set(b))
    rounds = sorted(set.intersection(*(set(c[s]) for c in (a, b) for s in seeds)) - {0})
    print(f"{len(seeds)} seeds ({seeds[0]}-{seeds[-1]}), {args.metric}, points")
    print(f"| round | {args.a} | {args.b} | {args.a} - {args.b} [95%] | seeds {args.a} ahead | lift / sd: {args.a}, "
          f"{args.b} |")
    print("|---|---|---|---|---|---|")
    for r in rounds:
        x, y = [a[s][r] for s in seeds], [b[s][r] for s in seeds]
        d = stats.paired(x, y)
        ahead = sum(u > v for u, v in zip(x, y))
        design = ", ".join(f"{lift.mean:.2f} / {lift.sd:.2f} = {lift.mean / lift.sd:.1f}"
                           for lift in (stats.paired(x, [a[s][0] for s in seeds]),
                                        stats.paired(y, [b[s][0] for s in seeds])))
        print(f"| {r} | {sum(x) / len(x):.2f} | {sum(y) / len(y):.2f} | {d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}] | "
              f"{ahead} of {len(seeds)} | {design} |")


if __name__ == "__main__":
    main()
