"""Rule v3 (REPRODUCTION.md, "Pre-registration v3"): one claim's record from a block's runs, with
the statistics of ``fedlight.stats``; ``family_table.py`` adjusts the study's family by Holm.

A claim reads two sides over paired seeds (a row, ``X - Y`` or ``best(GLOB)``, as rule v2):

- ``A > B`` / ``A < B``: the two-sided paired t-test of mean(A - B) = 0 at 5% (its 95% interval
  excludes 0): holds with the paper's sign, does not hold with the other.
- ``A ~ B``: TOST with the block's margin fixed in advance (the 90% interval inside it); does not
  hold where the 95% interval lies wholly outside it.
- ``rounds(A) < rounds(B)``: rounds to reach the reference row's mean final metric; a seed that
  never reaches it is censored, and an exact sign test on which arm got there first decides.
- **Trained** (``--learns ROW``, ``--control ROW``): the lower end of the 95% interval of the row's
  per-seed lift over its own random-init value is at least the block's ``--min-lift`` points.
  Only rows the paper expects to learn are checked. A block whose control did not train is
  **void**; so is a claim whose comparator B (a row the paper expects to learn) did not: beating
  a baseline that never trained shows nothing. A paper's method A that did not train is judged
  as measured and named.
- A metric the paper wants lowered (an adversary's AUC) is read against chance (``--chance``), not
  its random-init value; any other row without a measured floor is an error.
- Counted facts (``--count``: an upload ratio) are stated as counts, not tested over seeds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from fedlight import stats

VOID = "void"
BESIDE = "none: reported beside the verdict rows"


@dataclass
class Options:
    """A block's v3 settings, all fixed in the pre-registration.

    Attributes:
        min_lift: the points a row must gain over its floor to count as trained.
        learns: rows the paper expects to learn.
        controls: the block's positive controls (rows that must train, or the block is void).
        chance: the reference of a metric the paper wants lowered (points), else None.
        margin: the equivalence margin of ``~`` claims (points).
    """

    min_lift: float = 5.0
    learns: tuple[str, ...] = ()
    controls: tuple[str, ...] = ()
    chance: float | None = None
    margin: float = 2.0


@dataclass
class Record:
    """One claim's outcome, as ``family_table.py`` reads it back (one JSON line each)."""

    block: str
    claim: str
    paper: str
    metric: str
    kind: str  # "mean" (a t-test or TOST), "rounds" (a sign test), "count" or "beside" (no test)
    n: int
    text: str  # fedlight's numbers, as printed in the table
    verdict: str  # the raw verdict: holds / does not hold / inconclusive / void (why) / counted
    p: float | None = None
    rows: dict[str, dict] = field(default_factory=dict)
    diff: list[float] | None = None  # A - B: mean, 95% low, 95% high (points), for a "mean" claim


def per_seed(runs: list[dict], metric: str) -> np.ndarray:
    """A row's final ``metric`` per seed, in points (shape (S,))."""
    return np.array([res["final"][metric] for res in runs], dtype=float) * 100


def floors(label: str, runs: list[dict], metric: str, chance: float | None) -> np.ndarray:
    """A row's reference per seed in points: chance for a metric the paper wants lowered, else each
    seed's random-init value; a row without one is an error (rule v3 has no silent default)."""
    if chance is not None:
        return np.full(len(runs), chance)
    values = [(res.get("baseline") or {}).get(metric) for res in runs]
    if None in values:
        raise SystemExit(f"row {label}: {metric} has no random-init value in a run's results.json baseline; "
                         "rule v3 judges no claim without a floor (give --chance for a metric to be lowered)")
    return np.array(values, dtype=float) * 100


def row_summary(label: str, runs: list[dict], metric: str, o: Options) -> dict:
    """A row's mean, sd, mean floor and (for a row expected to learn) whether it trained."""
    values, floor = per_seed(runs, metric), floors(label, runs, metric, o.chance)
    out = {"mean": float(values.mean()), "sd": float(values.std(ddof=1)), "floor": float(floor.mean())}
    if label in o.learns or label in o.controls:
        gain = stats.lift(values, floor)
        out |= {"lift_low": gain.low, "trained": gain.low >= o.min_lift}
    return out


def void_reason(rows: dict[str, dict], comparator: list[str], o: Options) -> str | None:
    """Why a claim is void: a control that did not train, or a comparator expected to learn that did not."""
    failed = [k for k in o.controls if not rows[k]["trained"]]
    if failed:
        return f"{VOID}: control {', '.join(failed)} did not train"
    failed = [k for k in comparator if k in o.learns and not rows[k]["trained"]]
    return f"{VOID}: comparator {', '.join(failed)} did not train" if failed else None


def rows_text(rows: dict[str, dict], o: Options) -> str:
    ref = "chance" if o.chance is not None else "floor"
    return "; ".join(f"{k} {r['mean']:.2f} +- {r['sd']:.2f} ({ref} {r['floor']:.2f}"
                     + ("" if "trained" not in r else f", lift >= {r['lift_low']:.2f}"
                        + ("" if r["trained"] else ", not trained")) + (", the control" if k in o.controls else "")
                     + ")" for k, r in rows.items())


def mean_claim(block: str, claim: list[str], sides: list[list[str]], table: dict[str, list[dict]],
               metric: str, o: Options, judged: bool = True) -> Record:
    """``A op B`` on the final metric, each side a row or a per-seed difference of two rows;
    ``judged`` False reports A - B beside the claims with no verdict (``BESIDE``)."""
    a, op, b, *paper = claim
    labels = list(dict.fromkeys(k for side in sides for k in side))
    rows = {k: row_summary(k, table[k], metric, o) for k in [*labels, *(c for c in o.controls if c not in labels)]}
    values = [per_seed(table[s[0]], metric) - (per_seed(table[s[1]], metric) if len(s) == 2 else 0) for s in sides]
    d = stats.paired(*values)
    test = stats.equivalence(d, o.margin) if op == "~" else stats.directional(d, 1 if op == ">" else -1)
    low90, high90 = d.at(0.90)
    text = (f"n {d.n}; {rows_text(rows, o)}; A - B {d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}]"
            + (f", 90% [{low90:+.2f}, {high90:+.2f}] against +-{o.margin:g}" if op == "~" else "")
            + f"; p {test.p:.2g}")
    if not judged:
        return Record(block, f"{a} vs {b}", paper[0] if paper else "-", metric, "beside", d.n, text, BESIDE, None, rows,
                      [d.mean, d.low, d.high])
    void = void_reason(rows, sides[1], o)
    said = f"{a} {op} {b}" + (f" (within {o.margin:g})" if op == "~" else "")
    return Record(block, said, paper[0] if paper else "-", metric, "mean", d.n, text, void or test.verdict,
                  None if void else test.p, rows, [d.mean, d.low, d.high])


def rounds_to_reach(runs: list[dict], metric: str, target: float, never: float | None = None) -> np.ndarray:
    """Per seed, the first round whose ``metric`` is at least ``target`` (shape (S,)); for a run that
    never reaches it, ``never`` (rule v3: inf, censored), or one past its last round (rule v2)."""
    return np.array([next((h["round"] for h in res["history"] if h.get(metric) is not None and h[metric] >= target),
                          res["rounds_completed"] + 1 if never is None else never) for res in runs], dtype=float)


def rounds_claim(block: str, claim: list[str], table: dict[str, list[dict]], metric: str, target: float,
                 o: Options) -> Record:
    """``rounds(A) < rounds(B)``: the rounds each seed takes to reach ``target``, censored where never."""
    a, op, b, *paper = claim
    labels = [a[7:-1], b[7:-1]]
    ra, rb = (rounds_to_reach(table[k], metric, target, never=np.inf) for k in labels)
    s = stats.rounds_sign_test(ra, rb)
    test = stats.sign_verdict(s, 1 if op == "<" else -1)
    shown = "; ".join(f"{k} " + ", ".join("never" if np.isinf(v) else str(int(v)) for v in r)
                      for k, r in zip(labels, (ra, rb)))
    text = (f"n {len(ra)}; target {target * 100:.2f}; {shown}; {labels[0]} first in {s.a_first}, "
            f"{labels[1]} first in {s.b_first}, tied {s.ties} (never = censored at the last round); "
            f"sign test p {s.p:.2g}")
    rows = {k: row_summary(k, table[k], metric, o) for k in dict.fromkeys([*labels, *o.controls])}
    void = void_reason(rows, [labels[1]], o)
    return Record(block, f"{a} {op} {b}", paper[0] if paper else "-", metric, "rounds", len(ra), text,
                  void or test.verdict, None if void else test.p, rows)


def count_claim(block: str, spec: list[str], table: dict[str, list[dict]]) -> Record:
    """``--count A B KEYS CONVENTION [PAPER]``: A's summed ``comm`` KEYS over B's, a counted fact."""
    a, b, keys, convention, *paper = spec
    def total(res: dict) -> float:
        return sum(res["comm"][k] for k in keys.split("+"))
    ratios = sorted({round(total(ra) / total(rb), 6) for ra, rb in zip(table[a], table[b])})
    value = f"{ratios[0]:.4g}" if len(ratios) == 1 else "varies by seed: " + ", ".join(f"{r:.4g}" for r in ratios)
    text = f"{keys} of {a} / {b} = {value} (counted: {convention})"
    return Record(block, f"{a} / {b} ({keys})", paper[0] if paper else "-", "comm", "count", len(table[a]), text,
                  "counted, no test")


def markdown(r: Record, adjusted: str | None = None) -> str:
    """A table row: claim | paper | fedlight | raw verdict | Holm-adjusted verdict | block."""
    return (f"| {r.claim} ({r.metric}) | {r.paper} | {r.text} | {r.verdict} | "
            f"{adjusted if adjusted is not None else '-'} | `{r.block}` |")


def write(records: list[Record], path: Path) -> None:
    """One JSON line a claim, read back by ``family_table.py``."""
    path.write_text("".join(json.dumps(asdict(r)) + "\n" for r in records))


def read(path: Path) -> list[Record]:
    return [Record(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def adjust(records: list[Record], family: int | None = None) -> list[str]:
    """Every record's verdict after Holm over the tested ones (void, counted and beside rows keep
    theirs). ``family``: the number of claims registered; a void one leaves the family, and those
    not run yet count as p = 1, which can only make an interim adjusted verdict more cautious than
    the final one (Holm's adjusted p-values never fall as an input p-value rises)."""
    tested = [i for i, r in enumerate(records) if r.p is not None]
    void = sum(r.verdict.startswith(VOID) for r in records)
    missing = (family or len(tested) + void) - len(tested) - void
    if missing < 0:
        raise SystemExit(f"{len(tested) + void} claims on disk, more than the family of {family} registered")
    tests = [stats.Test(records[i].verdict, records[i].p) for i in tested] + [stats.Test(stats.OPEN, 1.0)] * missing
    kept = stats.adjusted_verdicts(tests)
    out = [r.verdict for r in records]
    for i, verdict in zip(tested, kept):
        out[i] = verdict
    return out
