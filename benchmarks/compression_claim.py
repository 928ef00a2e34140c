"""Top-1% uploads with and without error feedback against plain FedAvg on a CPU twin, by rule v3
(REPRODUCTION.md, "v3 compressed uploads"): the pilot's numbers, the seeds it sizes, and the verdicts.

    nice -n 10 bash benchmarks/compression_runs.sh pilot $(seq 3000 3004)   # the pilot's runs
    python benchmarks/compression_claim.py                                  # pilot, then verdict if registered

Arms, per seed (``runs/compression/<folder>/<arm>-<seed>/results.json``): ``plain`` (float32 uploads),
``topk_ef`` (top 1% with error feedback), ``topk`` (top 1% without). Metric: final kNN at 10% labels, in
points; floor: the seed's random-init kNN.

- Claim A, ``topk_ef`` ~ ``plain`` within 2 points: TOST (``fedlight.stats.equivalence``).
- Claim B, ``topk`` more than 2 points short of ``plain``: holds when the 95% interval of ``plain - topk``
  lies wholly above 2, does not hold when its 90% interval lies inside [-2, 2].
- Counted: ``topk_ef``'s upload bytes over ``plain``'s (``comm.bytes_up``), no test.
- Control ``plain``: trained if its lift's 95% lower bound is at least min_lift; else both claims are void.
  Holm over the two claims; the adjusted verdict stands.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy import stats as dist

from fedlight import stats
from rule_v4 import curves_line

ROOT = Path(__file__).resolve().parents[1] / "runs" / "compression"
ARMS = ("plain", "topk_ef", "topk")
PILOT_SEEDS = list(range(3000, 3005))
MARGIN = 2.0  # points, both claims
CAP = 24  # rule v3's cap on n
# Fixed from the pilot in REPRODUCTION.md ("v3 compressed uploads: the pilot"), before any verdict run.
MIN_LIFT: float | None = 6.61  # a third of plain's pilot lift, 19.83
VERDICT_SEEDS: list[int] = list(range(3100, 3124))  # n = 24, rule v3's cap (both claims would need more)


def load(folder: Path, arm: str, seed: int) -> dict | None:
    """A finished run's results.json, or None."""
    path = folder / f"{arm}-{seed}" / "results.json"
    if not path.is_file():
        return None
    res = json.loads(path.read_text())
    return res if res.get("final") and res["rounds_completed"] == res["recipe"]["rounds"] else None


def rows(folder: Path, seeds: list[int]) -> dict[int, dict[str, dict]]:
    """Every seed whose three arms finished: seed -> arm -> results."""
    out = {}
    for seed in seeds:
        runs = {arm: load(folder, arm, seed) for arm in ARMS}
        if all(runs.values()):
            out[seed] = runs
    return out


def knn(res: dict) -> float:
    return 100 * res["final"]["knn_acc"]


def floor(runs: dict[str, dict]) -> float:
    """The seed's random-init kNN, the same encoder in every arm (checked)."""
    floors = {round(100 * r["baseline"]["knn_acc"], 6) for r in runs.values()}
    assert len(floors) == 1, f"arms start from different encoders: {floors}"
    return floors.pop()


def shortfall(d: stats.Paired, margin: float = MARGIN, alpha: float = 0.05) -> stats.Test:
    """Claim B on ``d = paired(plain, topk)``: holds when the 95% interval lies wholly above ``margin``, does not
    hold when the 90% interval lies inside [-margin, margin]."""
    p_beyond = min(1.0, 2 * d.p_above(margin))
    p_inside = max(d.p_above(-margin), d.p_below(margin))
    if p_beyond < alpha:
        return stats.Test(stats.HOLDS, p_beyond)
    if p_inside < alpha:
        return stats.Test(stats.FAILS, p_inside)
    return stats.Test(stats.OPEN, min(p_beyond, p_inside))


def table(by_seed: dict[int, dict[str, dict]]) -> None:
    print("| seed | floor | plain | topk_ef | topk | topk_ef - plain | plain - topk | upload topk_ef / plain |")
    print("|---|---|---|---|---|---|---|---|")
    for seed, runs in by_seed.items():
        p, e, t = (knn(runs[a]) for a in ARMS)
        ratio = runs["topk_ef"]["comm"]["bytes_up"] / runs["plain"]["comm"]["bytes_up"]
        print(f"| {seed} | {floor(runs):.2f} | {p:.2f} | {e:.2f} | {t:.2f} | {e - p:+.2f} | {p - t:+.2f} | {ratio:.4f} |")


def summary(by_seed: dict[int, dict[str, dict]]) -> tuple[np.ndarray, ...]:
    """(floors, plain, topk_ef, topk) finals, and the printed means, lifts and spreads."""
    floors = np.array([floor(r) for r in by_seed.values()])
    finals = [np.array([knn(r[arm]) for r in by_seed.values()]) for arm in ARMS]
    for arm, x in zip(ARMS, finals):
        print(f"{arm}: final {x.mean():.2f} +- {x.std(ddof=1):.2f}, lift {np.mean(x - floors):.2f} "
              f"+- {np.std(x - floors, ddof=1):.2f}")
    return floors, *finals


def pilot() -> None:
    by_seed = rows(ROOT / "pilot", PILOT_SEEDS)
    print(f"## Pilot (runs/compression/pilot, seeds {PILOT_SEEDS[0]}-{PILOT_SEEDS[-1]}: {len(by_seed)} of "
          f"{len(PILOT_SEEDS)} with all three arms done)\n")
    if not by_seed:
        return
    table(by_seed)
    if len(by_seed) < stats.MIN_SEEDS:
        return
    floors, plain, ef, topk = summary(by_seed)
    print(f"min_lift = max(2, plain's mean lift / 3) = {max(2.0, float(np.mean(plain - floors)) / 3):.2f}")
    for name, d in (("A topk_ef - plain", ef - plain), ("B plain - topk", plain - topk)):
        sd_plus = stats.sd_upper(float(d.std(ddof=1)), len(d))
        if len(d) < stats.MIN_PILOT_SEEDS:
            print(f"{name}: {d.mean():+.2f} (n is sized from {stats.MIN_PILOT_SEEDS} pilot seeds)")
            continue
        n = stats.seeds_from_pilot(d, 1.0, cap=CAP)
        reach = float(dist.t.ppf(0.975, CAP - 1)) * sd_plus / np.sqrt(CAP)
        print(f"{name}: {d.mean():+.2f}, sd {d.std(ddof=1):.2f}, sd+ (80%) {sd_plus:.2f}, n for +-1 point: "
              + (str(n) if n is not None else f"more than {CAP}; at {CAP} the half-width is {reach:.2f}"))


def verdict() -> None:
    if MIN_LIFT is None or not VERDICT_SEEDS:
        print("\n(no verdict: min_lift and the verdict seeds are not registered yet)")
        return
    by_seed = rows(ROOT / "verdict", VERDICT_SEEDS)
    print(f"\n## Verdict (runs/compression/verdict: {len(by_seed)} of {len(VERDICT_SEEDS)} seeds done)\n")
    table(by_seed)
    if len(by_seed) < len(VERDICT_SEEDS):
        print("(no verdict until every registered seed has run)")
        return
    floors, plain, ef, topk = summary(by_seed)
    print("means by round: " + curves_line({arm: [r[arm] for r in by_seed.values()] for arm in ARMS}, "knn_acc"))
    control = stats.lift(plain, floors)
    if control.low < MIN_LIFT:
        print(f"plain (control) lift >= {control.low:.2f} < min_lift {MIN_LIFT}: both claims void")
        return
    a, b = stats.paired(ef, plain), stats.paired(plain, topk)
    tests = [stats.equivalence(a, MARGIN), shortfall(b)]
    for name, d, test, adjusted in zip(("A. topk_ef ~ plain", "B. topk short of plain by > 2"), (a, b), tests,
                                       stats.adjusted_verdicts(tests)):
        print(f"{name}: {d.mean:+.2f}, 95% [{d.low:+.2f}, {d.high:+.2f}], 90% [{d.at(0.9)[0]:+.2f}, "
              f"{d.at(0.9)[1]:+.2f}]; p {test.p:.2g}; raw {test.verdict}, Holm-adjusted **{adjusted}**")


if __name__ == "__main__":
    pilot()
    verdict()
