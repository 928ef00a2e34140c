"""The confirmatory study's power calculation (rule v2, REPRODUCTION.md "Pre-registration").

For each claim: the standard deviation of its per-seed differences A - B measured in the
exploratory 3-seed runs, the half-width wanted, max(1 point, a third of the paper's effect), and
the seeds that give it (``verdict.seeds_needed``, capped at 12). A block runs every claim's rows
at the largest n of its claims. Printed as the Markdown table the pre-registration quotes:

    python benchmarks/power.py

Where REPRODUCTION.md prints a claim's exploratory 95% interval over 3 seeds, the sd is read
back from it exactly: half-width = t(0.975, 2) * sd / sqrt(3). Where it prints only the rows'
mean +- std (FLESD sec. 3's probe), the sd of the difference is bounded by the rows' stds taken as
independent (sqrt of the sum of their variances), the larger, conservative value for paired
seeds. Where our copy of a paper has lost its number (LG-FedAvg's tables; FLESD's Fig. 2), the
exploratory effect stands in for the paper's, for sizing n only: it never enters a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from verdict import seeds_needed

T3 = float(stats.t.ppf(0.975, 2))  # the 3-seed interval's multiplier, 4.303


@dataclass(frozen=True)
class Claim:
    """One confirmatory claim and what the exploratory runs measured of it.

    Attributes:
        block: the ``claims.sh`` block whose runs judge it.
        text: the claim.
        low, high: its exploratory 95% interval over 3 seeds (points or rounds); None when
            ``sd`` is given instead.
        paper: the paper's effect (|A - B|); None when our copy lost it.
        explored: the exploratory effect, standing in for ``paper`` when that is None.
        sd: the sd of A - B when no interval was printed (the rows' independent bound).
    """

    block: str
    text: str
    low: float | None
    high: float | None
    paper: float | None
    explored: float
    sd: float | None = None

    @property
    def sd_diff(self) -> float:
        return self.sd if self.sd is not None else (self.high - self.low) / 2 * math.sqrt(3) / T3

    @property
    def target(self) -> float:
        effect = self.paper if self.paper is not None else abs(self.explored)
        return max(1.0, effect / 3)

    @property
    def n(self) -> int:
        return seeds_needed(self.sd_diff, self.target)


# The exploratory numbers, each from REPRODUCTION.md's section of the block it names.
CLAIMS = [
    Claim("confirm_moon", "MOON > FedAvg", -7.80, 3.32, 69.1 - 66.3, -2.24),
    Claim("confirm_moon", "MOON > FedProx", -7.92, 3.80, 69.1 - 66.9, -2.06),
    Claim("confirm_moon", "MOON > SCAFFOLD", -12.31, 1.24, 69.1 - 66.6, -5.53),
    Claim("confirm_moon", "FedAvg > SOLO", 55.06, 61.57, 66.3 - 46.3, 58.32),
    # Table 2 in rounds: per seed MOON 11, 10, 11 and FedAvg 11, 10, 10 (never = 11); the paper's
    # 27 of 100 rounds saves 73% of FedAvg's rounds, 7.3 of our 10
    Claim("confirm_moon", "Table 2: rounds(MOON) < rounds(FedAvg)", None, None, 7.3, -0.33, sd=math.sqrt(1 / 3)),
    Claim("confirm_moon_mu", "Table 5: contrastive > l2, both at mu = 0.01", -2.99, 2.85, 69.1 - 65.8, -0.07),
    Claim("confirm_flesd_sec3", "sec. 3 kNN: supervised drops more than SimCLR", 0.61, 9.01, 35 - 6, 4.81),
    Claim("confirm_flesd_sec3", "sec. 3 kNN: SimCLR > supervised at alpha 0.01", 2.83, 9.08, None, 5.95),
    Claim("confirm_flesd_sec3", "sec. 3 probe: supervised drops more than SimCLR", None, None, 35 - 6, 0.47,
          sd=math.sqrt(0.65**2 + 0.78**2 + 0.66**2 + 0.53**2)),
    Claim("confirm_flesd_sec3", "sec. 3 probe: SimCLR > supervised at alpha 0.01", None, None, None, 0.37,
          sd=math.sqrt(0.78**2 + 0.53**2)),
    Claim("confirm_flesd100", "Table 1 alpha 100: FLESD ~ FedAvg (2)", -2.91, 0.36, 0.0, -1.28),
    Claim("confirm_flesd100", "Table 1 alpha 100: FedAvg > Min-Local", -0.67, 2.60, 75.6 - 62.9, 0.96),
    Claim("confirm_flesd100", "Table 1 alpha 100: FLESD > Min-Local", -3.06, 2.43, 75.8 - 62.9, -0.31),
    Claim("confirm_flesd001", "Table 1 alpha 0.01: FLESD ~ FedAvg (2)", -23.74, -4.97, 0.0, -14.36),
    Claim("confirm_flesd001", "Table 1 alpha 0.01: FedAvg > Min-Local", 1.14, 5.96, 69.9 - 60.4, 3.55),
    Claim("confirm_flesd001", "Table 1 alpha 0.01: FLESD > Min-Local", -21.65, 0.04, 69.6 - 60.4, -10.81),
    Claim("confirm_sofed", "Table III: IS > RR", -3.46, -0.57, 61.99 - 59.25, -2.01),
    Claim("confirm_sofed", "Table I: FedU-IS > FedSimCLR-IS", -10.70, -2.34, 77.71 - 73.39, -6.52),
    Claim("confirm_sofed", "Table VI: lazy T = 50 ~ full scoring (2)", 0.41, 5.37, 0.0, 2.89),
    Claim("confirm_lg", "Table 1 local test: LG > FedAvg", 17.24, 42.50, None, 29.87),
    Claim("confirm_lg", "Table 1 new test: LG ~ FedAvg (2)", -8.63, 22.43, 0.0, 6.90),
    Claim("confirm_lg", "Table 1 new test: LG > local only", 3.85, 32.59, None, 18.22),
    Claim("confirm_lg_rotated", "Table 3: p = 0, LG > FedAvg on normal data", 53.58, 71.55, None, 62.56),
    Claim("confirm_lg_rotated", "Table 3: FedAvg p > 0 > FedAvg p = 0 on normal data", 65.48, 70.30, None, 67.89),
    Claim("confirm_lg_rotated", "Table 3: p > 0, LG > FedAvg on rotated data", -0.89, 2.09, None, 0.60),
    Claim("confirm_lg_fair", "Table 4: adversary AUC lower with the term", -55.68, -38.16, None, -46.92),
    Claim("confirm_lg_fair", "Table 4: post-fit AUC lower with the term", -19.68, 4.65, None, -7.51),
    Claim("confirm_lg_fair", "Table 4: accuracy kept (2)", -6.81, 6.81, 0.0, 0.00),
]

# Wall seconds of one seed of each block's rows at one thread, for planning only: REPRODUCTION.md's
# "wall s" columns (a busy machine), except moon_mu and lg_rotated, whose rows print none there
# and are guessed (300 and 100 s a row); SOLO's R x E row is guessed as 10 x SOLO's.
SECONDS_PER_SEED = {
    "confirm_moon": 466 + 266 + 353 + 249 + 80 + 10 * 80, "confirm_moon_mu": 2 * 300,
    "confirm_flesd_sec3": 261 + 250 + 203 + 188, "confirm_flesd100": 251 + 198 + 261,
    "confirm_flesd001": 192 + 154 + 250, "confirm_sofed": 548 + 409 + 820 + 559 + 503,
    "confirm_lg": 145 + 123 + 117, "confirm_lg_rotated": 4 * 100, "confirm_lg_fair": 81 + 73,
}


def block_seeds() -> dict[str, int]:
    """Each block's n: the largest n of its claims."""
    out: dict[str, int] = {}
    for c in CLAIMS:
        out[c.block] = max(out.get(c.block, 0), c.n)
    return out


def main() -> None:
    print("| block | claim | exploratory sd of A - B | paper's effect | half-width wanted | n |")
    print("|---|---|---|---|---|---|")
    for c in CLAIMS:
        paper = f"{c.paper:.2f}" if c.paper is not None else f"lost; exploratory {abs(c.explored):.2f}"
        print(f"| {c.block} | {c.text} | {c.sd_diff:.2f} | {paper} | {c.target:.2f} | {c.n} |")
    print("\n| block | n (seeds 100 ...) | CPU-hours, planning estimate |\n|---|---|---|")
    for block, n in block_seeds().items():
        print(f"| {block} | {n} | {SECONDS_PER_SEED[block] * n / 3600:.1f} |")


if __name__ == "__main__":
    main()
