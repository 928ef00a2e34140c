"""FedBuff vs synchronous FedAvg on the CPU twin recipes/fedbuff_fmnist.yaml (issue 58, item 5), by rule v3
(REPRODUCTION.md, "v3 FedBuff vs synchronous FedAvg"): the pilot's numbers, the seeds it sizes, and the verdicts.

    bash benchmarks/fedbuff_runs.sh verdict $(seq 2000 2023)   # the runs (pilot: ... pilot 100 101 102 103 104)
    python benchmarks/fedbuff_claim.py            # pilot (runs/fedbuff/pilot), then the verdict (runs/fedbuff/verdict)
    tar -xJf benchmarks/results/fedbuff-runs.tar.xz   # puts every run's results.json back under runs/fedbuff/

Arms, per seed (``<folder>/<arm>-<seed>/results.json``): ``fedbuff`` = the recipe as is (60 server steps of
K = 5, 10 in flight, kNN every 6 steps); ``sync`` = the same with ``asynchrony.mode=sync rounds=30
eval.every=3`` (10 clients a round). Metric: kNN at 10% labels, in points. Per seed: T_sync = the sync
run's last ``virtual_seconds``, target = its final kNN, T_buff = the ``virtual_seconds`` of FedBuff's first
evaluation with kNN >= target (never: censored at its last evaluation, counted as not first).

- Claim A, FedBuff reaches sync's final kNN in less virtual time: the exact two-sided sign test on which
  arm got there first (rule v3's test for a time to reach a target, so no number stands in for a
  censored seed); median T_buff / T_sync printed beside (a censored seed counts as infinite).
- Claim B, FedBuff's final kNN within 2 points of sync's: TOST, the 90% interval inside [-2, 2].
- Control ``sync``: trained if the lower end of the 95% interval of its lift over the random-init kNN is
  at least min_lift; else both claims are void. Holm over the two claims; the adjusted verdict stands.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as dist

from fedlight import stats

PILOT_SEEDS = list(range(100, 105))
MARGIN = 2.0  # claim B's equivalence margin, points
CAP = 24  # rule v3's cap on n
# Fixed by the registration (REPRODUCTION.md, "v3 FedBuff vs synchronous FedAvg"), from the pilot.
MIN_LIFT: float | None = 5.12  # a third of sync's pilot lift, 15.36
VERDICT_SEEDS: list[int] = list(range(2000, 2024))  # n = 24, rule v3's cap (claim A's sign test sized it)


@dataclass(frozen=True)
class Seed:
    """One seed's two runs, in points and virtual seconds.

    Attributes:
        seed: the run seed; floor: the random-init kNN (the same encoder in both arms).
        sync, buff: each arm's final kNN.
        t_sync: the sync run's last virtual second; t_buff: FedBuff's first evaluation at or above
            ``sync`` (inf: never); t_buff_end: FedBuff's last virtual second.
    """

    seed: int
    floor: float
    sync: float
    buff: float
    t_sync: float
    t_buff: float
    t_buff_end: float


def load(folder: Path, arm: str, seed: int) -> dict | None:
    """A finished run's results (None while it runs or before it starts)."""
    path = folder / f"{arm}-{seed}" / "results.json"
    if not path.exists():
        return None
    res = json.loads(path.read_text())
    return res if res.get("final") is not None and res["rounds_completed"] == res["recipe"]["rounds"] else None


def evals(res: dict) -> list[tuple[float, float]]:
    """(virtual seconds, kNN points) of every evaluation, in order."""
    return [(h["virtual_seconds"], h["knn_acc"] * 100) for h in res["history"] if h.get("knn_acc") is not None]


def pair(seed: int, sync: dict, buff: dict) -> Seed:
    target = sync["final"]["knn_acc"] * 100
    t_buff = next((t for t, knn in evals(buff) if knn >= target), math.inf)
    floors = {sync["baseline"]["knn_acc"], buff["baseline"]["knn_acc"]}
    if len(floors) != 1:
        raise SystemExit(f"seed {seed}: the two arms' random-init kNN differ ({floors}); the arms are not paired")
    return Seed(seed, floors.pop() * 100, target, buff["final"]["knn_acc"] * 100, sync["history"][-1]["virtual_seconds"],
                t_buff, buff["history"][-1]["virtual_seconds"])


def pairs(folder: Path, seeds: list[int]) -> list[Seed]:
    out = []
    for s in seeds:
        sync, buff = load(folder, "sync", s), load(folder, "fedbuff", s)
        if sync is not None and buff is not None:
            out.append(pair(s, sync, buff))
    return out


@dataclass(frozen=True)
class Verdicts:
    """The block's outcome: each claim's raw test (None: void), the Holm-adjusted verdicts, and what they read."""

    trained: bool  # the control's lift bound >= min_lift
    lift_low: float
    buff_lift_low: float
    sign: stats.SignTest
    a: stats.Test | None
    d: stats.Paired
    b: stats.Test | None
    adjusted: tuple[str, str]


def verdicts(seeds: list[Seed], min_lift: float, margin: float = MARGIN) -> Verdicts:
    """Rule v3 on the block's seeds: the control check, claim A's sign test, claim B's TOST, Holm over both."""
    sync, buff, floor = (np.array([getattr(s, k) for s in seeds]) for k in ("sync", "buff", "floor"))
    control, buff_lift = stats.lift(sync, floor), stats.lift(buff, floor)
    trained = control.low >= min_lift
    sign = stats.rounds_sign_test([s.t_buff for s in seeds], [s.t_sync for s in seeds])
    d = stats.paired(buff, sync)
    if not trained:
        void = f"void: control sync did not train (lift >= {control.low:.2f} < {min_lift:.2f})"
        return Verdicts(False, control.low, buff_lift.low, sign, None, d, None, (void, void))
    a, b = stats.sign_verdict(sign, 1), stats.equivalence(d, margin)
    adj = stats.adjusted_verdicts([a, b])
    return Verdicts(True, control.low, buff_lift.low, sign, a, d, b, (adj[0], adj[1]))


def sign_test_power(n: int, q: float, alpha: float) -> float:
    """P(the exact two-sided sign test on n untied seeds rejects at ``alpha``) when each seed goes A's way w.p. q."""
    reject = [k for k in range(n + 1) if dist.binomtest(k, n, 0.5).pvalue < alpha]
    return float(sum(dist.binom.pmf(k, n, q) for k in reject))


def seeds_for_sign_test(q: float, alpha: float = 0.025, power: float = 0.8, cap: int = CAP) -> int | None:
    """The fewest seeds (>= 3) at which the sign test reaches ``power`` at Holm's first rank (alpha / 2)."""
    return next((n for n in range(stats.MIN_SEEDS, cap + 1) if sign_test_power(n, q, alpha) >= power), None)


def table(seeds: list[Seed]) -> str:
    rows = ["| seed | floor | sync final | FedBuff final | FedBuff - sync | T_sync (s) | T_buff (s) | T_buff / T_sync "
            "| FedBuff's last second |", "|---|---|---|---|---|---|---|---|---|"]
    for s in seeds:
        reached = f"{s.t_buff:.0f}" if math.isfinite(s.t_buff) else "never"
        ratio = f"{s.t_buff / s.t_sync:.3f}" if math.isfinite(s.t_buff) else "-"
        rows.append(f"| {s.seed} | {s.floor:.2f} | {s.sync:.2f} | {s.buff:.2f} | {s.buff - s.sync:+.2f} | {s.t_sync:.0f} "
                    f"| {reached} | {ratio} | {s.t_buff_end:.0f} |")
    return "\n".join(rows)


def median_ratio(seeds: list[Seed]) -> float:
    return float(np.median([s.t_buff / s.t_sync for s in seeds]))  # a censored seed is inf, above every ratio


def mean_sd(x: np.ndarray) -> str:
    return f"{x.mean():.2f} +- {x.std(ddof=1):.2f}"


def horizon(folder: Path, seeds: list) -> None:
    """Rule v3's design check (lift / its sd, for >= 5) and the plateau reading (mean kNN at each evaluation,
    last minus third-to-last) of both rows over ``seeds``."""
    for arm in ("sync", "fedbuff"):
        lift = np.array([getattr(s, "sync" if arm == "sync" else "buff") - s.floor for s in seeds])
        print(f"design check, {arm}: lift / sd {lift.mean() / lift.std(ddof=1):.1f}")
    for arm in ("sync", "fedbuff"):
        curves = np.array([[knn for _, knn in evals(load(folder, arm, s.seed))] for s in seeds])
        times = np.array([[t for t, _ in evals(load(folder, arm, s.seed))] for s in seeds])
        print(f"{arm}: mean kNN at each evaluation "
              + ", ".join(f"{k:.2f}@{t:.0f}s" for k, t in zip(curves.mean(0), times.mean(0)))
              + f"; last minus third-to-last evaluation {curves[:, -1].mean() - curves[:, -3].mean():+.2f}")


def pilot(folder: Path) -> float | None:
    """Print the pilot's numbers and the n they size; min_lift (None while the pilot is short)."""
    seeds = pairs(folder, PILOT_SEEDS)
    print(f"## Pilot ({folder}, seeds {PILOT_SEEDS[0]}-{PILOT_SEEDS[-1]}: {len(seeds)} with both arms done)\n")
    if not seeds:
        return None
    print(table(seeds) + "\n")
    sync, buff, floor = (np.array([getattr(s, k) for s in seeds]) for k in ("sync", "buff", "floor"))
    print(f"floor (random-init kNN) {mean_sd(floor)}; lift: sync {mean_sd(sync - floor)}, FedBuff {mean_sd(buff - floor)}; "
          f"final: sync {mean_sd(sync)}, FedBuff {mean_sd(buff)}; FedBuff - sync {mean_sd(buff - sync)}")
    horizon(folder, seeds)
    first = sum(math.isfinite(s.t_buff) and s.t_buff < s.t_sync for s in seeds)
    print(f"FedBuff first in {first} of {len(seeds)}; median T_buff / T_sync {median_ratio(seeds):.3f}")
    if len(seeds) < stats.MIN_PILOT_SEEDS:
        print(f"(n is sized from {stats.MIN_PILOT_SEEDS} pilot seeds; {len(seeds)} so far)")
        return None
    min_lift = max(2.0, float((sync - floor).mean()) / 3)
    d = buff - sync
    sd_plus = stats.sd_upper(float(d.std(ddof=1)), len(d))
    n_b = stats.seeds_from_pilot(d, 1.0, cap=CAP)
    q = (first + 1) / (len(seeds) + 2)
    n_a = seeds_for_sign_test(q)
    n = min(CAP, max(n_a or CAP, n_b or CAP))
    print(f"min_lift = max(2, sync's mean lift / 3) = {min_lift:.2f}; "
          f"claim B: sd of FedBuff - sync {d.std(ddof=1):.2f}, sd+ (80%) {sd_plus:.2f}, half-width wanted 1.00 -> n "
          f"{n_b if n_b is not None else f'> {CAP}'}; claim A: P(FedBuff first) ~ (k + 1) / (m + 2) = {q:.3f}, "
          f"80% power of the sign test at 2.5% -> n {n_a if n_a is not None else f'> {CAP}'}; block n = {n}")
    return min_lift


def said(raw: stats.Test | None, adjusted: str, interim: bool) -> str:
    text = f"raw {raw.verdict if raw else adjusted}, Holm-adjusted {adjusted}"
    return "interim: no verdict" if interim else text.replace(f"adjusted {adjusted}", f"adjusted **{adjusted}**")


def verdict(folder: Path) -> None:
    seeds = pairs(folder, VERDICT_SEEDS)
    print(f"\n## Verdict ({folder}, seeds {VERDICT_SEEDS[0]}-{VERDICT_SEEDS[-1]}: {len(seeds)} of "
          f"{len(VERDICT_SEEDS)} with both arms done)\n")
    if not seeds:
        return
    print(table(seeds) + "\n")
    interim = len(seeds) < len(VERDICT_SEEDS)
    if interim:
        print(f"INTERIM: {len(seeds)} of {len(VERDICT_SEEDS)} seeds; the numbers below are no verdict until all "
              "have run")
        if len(seeds) < stats.MIN_SEEDS:
            return
    horizon(folder, seeds)
    v = verdicts(seeds, MIN_LIFT)
    sync, buff, floor = (np.array([getattr(s, k) for s in seeds]) for k in ("sync", "buff", "floor"))
    print(f"sync (control) {mean_sd(sync)}, floor {floor.mean():.2f}, lift >= {v.lift_low:.2f} against min_lift "
          f"{MIN_LIFT:.2f}: {'trained' if v.trained else 'NOT trained'}; FedBuff {mean_sd(buff)}, lift >= "
          f"{v.buff_lift_low:.2f}{'' if v.buff_lift_low >= MIN_LIFT else ' (not trained)'}")
    low90, high90 = v.d.at(0.90)
    s = v.sign
    print(f"A. FedBuff reaches sync's final kNN in less virtual time: FedBuff first in {s.a_first}, sync first in "
          f"{s.b_first}, tied {s.ties}; sign test p {s.p:.2g}; median T_buff / T_sync {median_ratio(seeds):.3f}; "
          + said(v.a, v.adjusted[0], interim))
    print(f"B. FedBuff final within +-{MARGIN:g} of sync: FedBuff - sync {v.d.mean:+.2f}, 95% [{v.d.low:+.2f}, "
          f"{v.d.high:+.2f}], 90% [{low90:+.2f}, {high90:+.2f}]; p {v.b.p if v.b else float('nan'):.2g}; "
          + said(v.b, v.adjusted[1], interim))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, default=Path("runs/fedbuff"), help="holds pilot/ and verdict/")
    args = p.parse_args()
    pilot(args.runs / "pilot")
    if VERDICT_SEEDS:
        verdict(args.runs / "verdict")


if __name__ == "__main__":
    main()
