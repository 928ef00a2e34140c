"""The v3 study's n and min_lift per block (REPRODUCTION.md, "Pre-registration v3"), from pilots.

    python benchmarks/power_v3.py            # every block whose pilot is on disk or quoted below

A claim's pilot is either a folder of finished runs of the same twin on seeds no verdict reads
(``<folder>/<row>/seed<k>/runs/seed=<k>/results.json``, as ``reproduce.py`` lays them out: v2's
archived confirmatory runs, or v3's pilots on seeds 900-999), or, for a v2 block whose runs were
not kept, its printed 95% interval over n seeds, from which the sd of the differences is exact:
sd = half-width x sqrt(n) / t(0.975, n - 1). n = ``fedlight.stats.seeds_from_pilot``'s rule: the
80% upper confidence bound of that sd, the half-width wanted max(1, paper's effect / 3), cap 24.
A block's ``min_lift`` on a metric is a third of its positive control's mean lift over its floor
(chance, for a metric the paper wants lowered) in the pilot, at least 2 points.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as dist

from fedlight import stats
from reproduce import at_round as at_round_of

CAP = 24
CONFIDENCE = 0.8


@dataclass(frozen=True)
class Claim:
    """One v3 claim and where its pilot is.

    Attributes:
        block: the claims.sh block (``v3_*``).
        text: the claim as the table names it.
        a, b: its sides, each a row or ``"X - Y"``.
        metric: the results.json ``final`` key.
        paper: the paper's effect in points (0 for an equivalence; None where our copy lost it,
            then the pilot's own effect stands in, for sizing n only).
        pilot: the folder of pilot runs, or None with ``printed``.
        printed: (low, high, n) of a v2 interval, when its runs were not kept.
    """

    block: str
    text: str
    a: str
    b: str
    metric: str
    paper: float | None
    pilot: str | None
    printed: tuple[float, float, int] | None = None
    at_round: int | None = None


def pilot_runs(folder: str, row: str, metric: str, at_round: int | None = None) -> dict[int, dict]:
    """A row's finished pilot results per seed, read at round ``at_round`` when given (reproduce.at_round)."""
    out = {}  # a folder not on disk yet: a pilot not started (main checks that the archives are back)
    for path in Path(folder, row).glob("seed*/runs/seed=*/results.json"):
        res = json.loads(path.read_text())
        if res.get("final") is not None:
            out[int(path.parent.name.split("=")[1])] = res if at_round is None else at_round_of(res, at_round, metric)
    return out


def values(folder: str, row: str, metric: str, at_round: int | None = None) -> dict[int, float]:
    """A row's final metric (points) per pilot seed."""
    return {s: res["final"][metric] * 100 for s, res in pilot_runs(folder, row, metric, at_round).items()}


def side(folder: str, spec: str, metric: str, at_round: int | None = None) -> dict[int, float]:
    """A side's per-seed value: a row, or ``X - Y`` over the seeds both have."""
    parts = [values(folder, row, metric, at_round) for row in spec.split(" - ")]
    if len(parts) == 1:
        return parts[0]
    return {s: parts[0][s] - parts[1][s] for s in parts[0].keys() & parts[1].keys()}


def lifts(folder: str, row: str, metric: str, at_round: int | None = None,
          chance: float | None = None) -> dict[int, float]:
    """A row's per-seed lift (points) in the pilot: its final value less the same seed's random-init value
    (or less ``chance``, for a metric the paper wants lowered), in seed order."""
    return {s: res["final"][metric] * 100 - (res["baseline"][metric] * 100 if chance is None else chance)
            for s, res in sorted(pilot_runs(folder, row, metric, at_round).items())}


def capped_n(upper: float, target: float) -> tuple[int | None, str]:
    """Rule v3's n for an sd bound ``upper`` and a half-width ``target`` (None past the cap), and how a table shows
    it: the number, or the cap with the half-width it reaches."""
    n = stats.seeds_needed(upper, target, cap=CAP)
    reach = float(dist.t.ppf(0.975, CAP - 1)) * upper / math.sqrt(CAP)
    return n, str(n) if n is not None else f"{CAP} (reaches +-{reach:.2f})"


class PilotUnfinished(Exception):
    """A pilot with fewer seeds on disk than rule v3 sizes n from: its rows say so and size nothing."""


def pilot_sd(c: Claim) -> tuple[float, int, float]:
    """(sd of A - B, pilot seeds, the pilot's mean A - B) for ``c``."""
    if c.printed is not None:
        low, high, n = c.printed
        return (high - low) / 2 * math.sqrt(n) / float(dist.t.ppf(0.975, n - 1)), n, (low + high) / 2
    a, b = side(c.pilot, c.a, c.metric, c.at_round), side(c.pilot, c.b, c.metric, c.at_round)
    d = np.array([a[s] - b[s] for s in sorted(a.keys() & b.keys())])
    if len(d) < stats.MIN_PILOT_SEEDS:
        raise PilotUnfinished(f"{len(d)} of its {stats.MIN_PILOT_SEEDS} pilot seeds in {c.pilot}")
    return float(d.std(ddof=1)), len(d), float(d.mean())


MOON_T5 = "runs/pilot_v3/moon_t5"  # claims.sh v3_pilot_moon: 60 rounds, read at R
FLESD_T1 = "runs/pilot_v3/flesd_t1"  # claims.sh v3_pilot_flesd: alpha0.01/ and alpha100/
FLESD_BLOCKS = (("0.01", "v3_flesd001"), ("100", "v3_flesd100"))  # FLESD Table 1: a block per alpha
V2 = "runs/confirm"  # v2's archived confirmatory runs (tar -xJf benchmarks/results/confirm-runs.tar.xz)
CLAIMS = [
    Claim("v3_lg", "local test: LG > FedAvg", "lg_fmnist", "lg_fedavg_fmnist", "local_test_acc", None, f"{V2}/lg"),
    Claim("v3_lg", "new test: LG ~ FedAvg (2)", "lg_fmnist", "lg_fedavg_fmnist", "new_test_acc", 0.0, f"{V2}/lg"),
    Claim("v3_lg", "new test: LG > local only", "lg_fmnist", "lg_local_fmnist", "new_test_acc", None, f"{V2}/lg"),
    # SOFed's v2 twin (sofed_long: kNN on every label, full test set, 48 rounds): v2's 8 archived seeds
    Claim("v3_sofed", "Table III: IS > RR", "sofed", "byol-rr", "knn_acc", 61.99 - 59.25, f"{V2}/sofed"),
    Claim("v3_sofed", "Table I: SOFed > FedU-IS", "sofed", "fedu-is", "knn_acc", 78.66 - 77.71, f"{V2}/sofed"),
    Claim("v3_sofed", "Table I: FedU-IS > FedSimCLR-IS", "fedu-is", "fedsimclr-is", "knn_acc", 77.71 - 73.39,
          f"{V2}/sofed"),
    Claim("v3_sofed", "Table VI: lazy T = 50 ~ full scoring (2)", "sofed-lazy50", "sofed", "knn_acc", 0.0, f"{V2}/sofed"),
    # LG Table 3's unchanged twin: v3's own 5-seed pilot (v2 ran 4 seeds and kept no runs)
    Claim("v3_lg_rotated", "Table 3: p = 0, LG > FedAvg on normal data", "lg-p0", "fedavg-p0", "normal_acc", None,
          "runs/pilot_v3/lg_rotated"),
    Claim("v3_lg_rotated", "Table 3: FedAvg p > 0 > FedAvg p = 0 on normal data", "fedavg-p", "fedavg-p0", "normal_acc",
          None, "runs/pilot_v3/lg_rotated"),
    Claim("v3_lg_rotated", "Table 3: p > 0, LG > FedAvg on rotated data", "lg-p", "fedavg-p", "rotated_acc", None,
          "runs/pilot_v3/lg_rotated"),
    # MOON Table 1 on twin T5 at the pilot's R = 30 (REPRODUCTION.md, "v3 MOON pilot"); paper: CIFAR-10 points
    *(Claim("v3_moon", f"Table 1: MOON > {name}", "moon_fmnist", row, "test_acc", 69.1 - paper, MOON_T5, at_round=30)
      for name, row, paper in (("FedAvg", "fedavg_fmnist", 66.3), ("FedProx", "fedprox_fmnist", 66.9),
                               ("SCAFFOLD", "scaffold_fmnist", 66.6))),
    Claim("v3_moon", "Table 1: FedAvg > SOLO", "fedavg_fmnist", "solo_fmnist", "test_acc", 66.3 - 46.3, MOON_T5,
          at_round=30),
    # MOON Table 5 at each term's pilot-best mu (claims.sh v3_pilot_moon_mu, _best): 30-round runs, final = R
    Claim("v3_moon", "Table 5: contrastive > l2 (each at its best mu)", "moon-mu5", "l2-mu1", "test_acc", 69.1 - 65.8,
          f"{MOON_T5}_mu"),
    # v2's confirm_lg_fair (n = 12) and confirm_flesd_sec3 (n = 6): runs not kept, intervals printed
    Claim("v3_lg_fair", "adversary AUC lower with the term", "lg_fair", "lg_fair_noadv", "adv_auc", None, None,
          (-47.43, -43.05, 12)),
    Claim("v3_lg_fair", "post-fit AUC lower with the term", "lg_fair", "lg_fair_noadv", "postfit_adv_auc", None, None,
          (-10.28, -5.38, 12)),
    Claim("v3_lg_fair", "accuracy kept (2)", "lg_fair", "lg_fair_noadv", "class_acc", 0.0, None, (0.10, 1.56, 12)),
    Claim("v3_flesd_sec3", "kNN: supervised drops more than SimCLR", "sup100 - sup001", "ssl100 - ssl001", "knn_acc",
          35 - 6, None, (3.73, 4.98, 6)),
    Claim("v3_flesd_sec3", "kNN: SimCLR > supervised at alpha 0.01", "ssl001", "sup001", "knn_acc", None, None,
          (3.87, 6.88, 6)),
    Claim("v3_flesd_sec3", "probe: supervised drops more than SimCLR", "sup100 - sup001", "ssl100 - ssl001",
          "linear_probe_acc", 35 - 6, None, (0.26, 1.28, 6)),
    Claim("v3_flesd_sec3", "probe: SimCLR > supervised at alpha 0.01", "ssl001", "sup001", "linear_probe_acc", None,
          None, (0.34, 1.35, 6)),
    # FLESD Table 1 at 20,000 images (claims.sh v3_pilot_flesd), v2's three claims at each alpha, a block each;
    # the paper's numbers are lost from our copy, and "within ~1-2 points" is an equivalence within 2
    *(Claim(block, text, a, b, "knn_acc", paper, f"{FLESD_T1}/alpha{alpha}")
      for alpha, block in FLESD_BLOCKS
      for text, a, b, paper in (("FLESD ~ FedAvg (2)", "flesd", "fedavg", 0.0),
                                ("FedAvg > Min-Local", "fedavg", "minlocal", None),
                                ("FLESD > Min-Local", "flesd", "minlocal", None))),
]

@dataclass(frozen=True)
class Control:
    """A block's positive control on one metric, and its lift in the pilot.

    Attributes:
        block, metric: where it applies.
        row: the row that must train.
        pilot: the folder of pilot runs, or None with ``printed``.
        printed: (row mean, reference) in points from a v2 table, when its runs were not kept.
        chance: the reference of a metric the paper wants lowered (points), instead of the floor.
    """

    block: str
    metric: str
    row: str
    pilot: str | None
    printed: tuple[float, float] | None = None
    chance: float | None = None
    at_round: int | None = None

    def lift(self) -> float:
        """The control's mean lift over its floor (or chance) in the pilot (raises PilotUnfinished)."""
        if self.printed is not None:
            return self.printed[0] - self.printed[1]
        each = lifts(self.pilot, self.row, self.metric, self.at_round, self.chance)
        if len(each) < stats.MIN_PILOT_SEEDS:
            raise PilotUnfinished(f"{len(each)} of its {stats.MIN_PILOT_SEEDS} pilot seeds in {self.pilot}")
        return float(np.mean(list(each.values())))

    def min_lift(self) -> float:
        """A third of the control's mean lift over its floor (or chance) in the pilot, at least 2 points."""
        return max(2.0, self.lift() / 3)


CONTROLS = [
    Control("v3_lg", "local_test_acc", "lg_fedavg_fmnist", f"{V2}/lg"),
    Control("v3_lg", "new_test_acc", "lg_fedavg_fmnist", f"{V2}/lg"),
    # the adversary without the term must find the attribute (AUC above chance) for a low AUC to mean anything
    Control("v3_lg_fair", "adv_auc", "lg_fair_noadv", None, (96.70, 50.0), chance=50.0),
    Control("v3_lg_fair", "postfit_adv_auc", "lg_fair_noadv", None, (97.07, 50.0), chance=50.0),
    Control("v3_lg_fair", "class_acc", "lg_fair_noadv", None, (68.09, 47.35)),
    Control("v3_flesd_sec3", "knn_acc", "ssl100", None, (65.05, 56.31)),
    Control("v3_sofed", "knn_acc", "fedsimclr-is", f"{V2}/sofed"),
    Control("v3_lg_rotated", "normal_acc", "fedavg-p", "runs/pilot_v3/lg_rotated"),
    Control("v3_lg_rotated", "rotated_acc", "fedavg-p", "runs/pilot_v3/lg_rotated"),
    Control("v3_flesd_sec3", "linear_probe_acc", "ssl100", None, (80.35, 78.61)),
    Control("v3_moon", "test_acc", "fedavg_fmnist", MOON_T5, at_round=30),
    *(Control(block, "knn_acc", "fedavg", f"{FLESD_T1}/alpha{alpha}") for alpha, block in FLESD_BLOCKS),
]


# rows each block expects to learn, for the design check (rule v3: each beats its floor by at least 5x the pilot's
# seed spread of its lift), and its beside row; printed for the blocks sized after this check was added
LEARNERS = [*((block, f"{FLESD_T1}/alpha{alpha}", ("fedavg", "minlocal", "flesd", "flesd-balanced"), "knn_acc")
              for alpha, block in FLESD_BLOCKS),
            ("v3_sofed", f"{V2}/sofed", ("fedsimclr-is", "byol-rr", "fedu-is", "sofed-lazy50", "sofed"), "knn_acc")]
# A row with no kept pilot runs: its per-seed lifts as this file's tables print them. SOFed's FIFO ran only in
# the exploratory sofed_long block (seeds 10-12; REPRODUCTION.md's SOFed section: kNN 65.7 / 67.0 / 63.5
# over random-init 62.9 / 62.7 / 61.4), so it has 3 seeds, under the 5 a pilot needs: shown, not sized from.
PRINTED_LIFTS = {("v3_sofed", "byol-fifo"): {10: 65.7 - 62.9, 11: 67.0 - 62.7, 12: 63.5 - 61.4}}


def equivalence_table(rows: list[tuple[Claim, float, float, int]]) -> None:
    """Each "~" claim's expected interval half-widths at its block's n: TOST's 90% one at the pilot's sd and at its
    80% upper bound (holds needs |mean| + this within the margin), and the 95% one at the pilot's sd (does not
    hold needs the 95% interval wholly outside the margin)."""
    print("\n| block | claim | n | 90% half-width (pilot sd) | 90% half-width (sd+) | 95% half-width (pilot sd) |"
          "\n|---|---|---|---|---|---|")
    for c, sd, upper, n in rows:
        half = {q: float(dist.t.ppf(q, n - 1)) / math.sqrt(n) for q in (0.95, 0.975)}
        print(f"| {c.block} | {c.text} | {n} | {half[0.95] * sd:.2f} | {half[0.95] * upper:.2f} | "
              f"{half[0.975] * sd:.2f} |")


def lift_table(n: dict[str, int], min_lift: dict[str, float]) -> None:
    """Each row's pilot lift over its floor (points) per seed, its mean, seed sd and their ratio (5 or more
    wanted), and what the pilot foresees at the block's ``n`` against its ``min_lift`` (knn_acc's, the
    metric of every block listed): the expected lower end of the lift's 95% interval, and the chance that
    it falls under ``min_lift`` (the row counts as not trained), the n-seed mean taken as normal around the
    pilot's with variance sd^2 (1/n + 1/k), the pilot's own error included (k pilot seeds)."""
    print("\n| block | row | pilot lift per seed | mean | sd | lift / sd | expected lower end at n "
          "| chance it is under min_lift |\n|---|---|---|---|---|---|---|---|")
    shown_rows = [(block, folder, row, metric) for block, folder, rows, metric in LEARNERS for row in rows]
    shown_rows += [(block, None, row, "knn_acc") for block, row in PRINTED_LIFTS]
    for block, folder, row, metric in shown_rows:
        each = PRINTED_LIFTS[block, row] if folder is None else lifts(folder, row, metric)
        if folder is not None and len(each) < stats.MIN_PILOT_SEEDS:
            print(f"| {block} | {row} | pilot unfinished ({len(each)} seeds) | | | | | |")
            continue
        x, seeds = np.array(list(each.values())), list(each)
        mean, sd = x.mean(), x.std(ddof=1)
        k = n[block]
        low = mean - float(dist.t.ppf(0.975, k - 1)) * sd / math.sqrt(k)
        under = float(dist.norm.cdf((min_lift[block] - low) / (sd * math.sqrt(1 / k + 1 / len(x)))))
        shown = " / ".join(f"{v:+.2f}" for v in x)
        print(f"| {block} | {row} | {shown} (seeds {seeds[0]}-{seeds[-1]}) | {mean:+.2f} | {sd:.2f} | "
              f"{mean / sd:.1f} | {low:.2f} (n {k}) | {under:.2f} (min_lift {min_lift[block]:.2f}) |")


def main() -> None:
    for archive, root in (("confirm-runs", V2), ("v3-pilot-runs", "runs/pilot_v3")):
        if not Path(root).is_dir():
            raise SystemExit(f"{root}: not on disk; put it back with tar -xJf benchmarks/results/{archive}.tar.xz "
                             "in the repository root")
    print("| block | claim | pilot seeds | pilot A - B | sd | sd+ (80%) | paper's effect | half-width wanted | n |")
    print("|---|---|---|---|---|---|---|---|---|")
    need: dict[str, int] = dict.fromkeys((c.block for c in CLAIMS), 0)
    unfinished: set[str] = set()  # blocks with a claim whose pilot is unfinished: no n yet
    equivalences = []  # (claim, pilot sd, sd+) of each "~" claim, for its expected intervals at the block's n
    for c in CLAIMS:
        try:
            sd, n_pilot, mean = pilot_sd(c)
        except PilotUnfinished as short:
            print(f"| {c.block} | {c.text} | pilot unfinished: {short} | | | | | | |")
            unfinished.add(c.block)
            continue
        effect = c.paper if c.paper is not None else abs(mean)
        target = max(1.0, effect / 3)
        upper = stats.sd_upper(sd, n_pilot, CONFIDENCE)
        n, shown = capped_n(upper, target)
        need[c.block] = max(need[c.block], n or CAP)
        if c.paper == 0.0:
            equivalences.append((c, sd, upper))
        paper = f"{c.paper:.2f}" if c.paper is not None else f"lost; pilot {abs(mean):.2f}"
        print(f"| {c.block} | {c.text} | {n_pilot} | {mean:+.2f} | {sd:.2f} | {upper:.2f} | {paper} | {target:.2f} | {shown} |")
    print("\n| block | n (seeds 1000 ...) |\n|---|---|")
    for block, n in need.items():
        print(f"| {block} | {n if block not in unfinished else 'pilot unfinished'} |")
    print("\n| block | metric | positive control | its pilot lift | min_lift (points) |\n|---|---|---|---|---|")
    for c in CONTROLS:
        try:
            shown = f"{c.lift():.2f} | {c.min_lift():.2f}"
        except PilotUnfinished as short:
            shown = f"pilot unfinished: {short} |"
        print(f"| {c.block} | {c.metric} | {c.row} | {shown} |")
    equivalence_table([(c, sd, upper, need[c.block]) for c, sd, upper in equivalences if c.block not in unfinished])
    lift_table(need, {c.block: c.min_lift() for c in CONTROLS if c.metric == "knn_acc" and c.block in need})
    moon_plateau()


def moon_plateau(rows: tuple[str, ...] = ("fedavg_fmnist", "moon_fmnist", "fedprox_fmnist", "scaffold_fmnist",
                                          "solo_per_round_fmnist")) -> None:
    """MOON's R (REPRODUCTION.md, "v3 MOON pilot"): FedAvg's mean test accuracy over the pilot seeds at each
    candidate R and its gain over the last fifth and the last 10 rounds, then each row's mean +- sd at R = 30."""
    def curves(row: str) -> np.ndarray:  # (seeds, 60) test accuracy in points, rounds 1..60
        runs = pilot_runs(MOON_T5, row, "test_acc").values()
        return np.array([[h["test_acc"] * 100 for h in res["history"] if h.get("test_acc") is not None] for res in runs])

    mean = curves("fedavg_fmnist").mean(axis=0)
    print("\n| R | FedAvg mean at R | gain over the last fifth (R/5 rounds) | gain over the last 10 rounds |\n|---|---|---|---|")
    for r in range(20, 61, 10):
        print(f"| {r} | {mean[r - 1]:.2f} | {mean[r - 1] - mean[r - 1 - r // 5]:+.2f} | {mean[r - 1] - mean[r - 11]:+.2f} |")
    print("\n| row | seeds | mean +- sd at R = 30 |\n|---|---|---|")
    for row in rows:
        at30 = curves(row)[:, 29]
        print(f"| {row} | {len(at30)} | {at30.mean():.2f} +- {at30.std(ddof=1):.2f} |")
    solo = pilot_runs(MOON_T5, "solo_fmnist", "test_acc").values()  # the authors' one-off budget
    print("\nSOLO (E = 2 epochs once), final / random-init test accuracy per seed: "
          + ", ".join(f"{res['final']['test_acc'] * 100:.2f} / {res['baseline']['test_acc'] * 100:.2f}" for res in solo))

if __name__ == "__main__":
    main()
