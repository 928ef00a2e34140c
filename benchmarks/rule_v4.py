"""Rule v4 (REPRODUCTION.md, "Rule v4"): rule v3's claims, each also read against the rounds its verdict
runs trained, and each row against the design target.

Rule v4 keeps every record of ``rule_v3.py`` and adds three checks, all from the verdict runs:

- **Plateau.** At a round r, every row a claim reads (its sides, a rounds claim's reference, the block's
  controls) must move its mean over seeds by under ``PLATEAU_POINTS`` (up or down) against the latest
  evaluation at or before round r - max(1, r // 5), the last fifth of the r rounds (MOON's v3 rule). Where
  the judged round R is not a plateau, the claim is judged again at the first later evaluated round that
  is; where none is, the verdict at R stands, marked "no plateau by round L".
- **Horizon.** The raw verdict at every round from R to the last that every row the claim reads evaluated.
- **Design target.** Each row expected to learn and each control: mean lift over its floor / the seeds'
  sd of that lift, flagged under ``DESIGN_RATIO``.

A horizon is a round, or None for "each run at its own last round" (a block judged at its runs' end, whose
rows may train for different numbers of rounds, as FLESD's 2 rounds against FedAvg's 10).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

import rule_v3
from rule_v3 import Options, Record

PLATEAU_POINTS = 1.0
DESIGN_RATIO = 5.0

Table = dict[str, list[dict]]
Judge = Callable[[Table], Record]  # rule v3's record of one claim from a table of runs
Cut = Callable[[dict, int, str], dict]  # a run's results as if it had stopped after a round (reproduce.at_round)


def curve(runs: list[dict], metric: str) -> dict[int, float]:
    """A row's mean ``metric`` over seeds, in points, at each round every one of its runs evaluated."""
    per_run = [{h["round"]: h[metric] for h in res["history"] if h.get(metric) is not None} for res in runs]
    rounds = sorted(set.intersection(*(set(evals) for evals in per_run)))
    return {r: 100 * float(np.mean([evals[r] for evals in per_run])) for r in rounds}


def curves_line(rows: dict[str, list[dict]], metric: str) -> str:
    """Each row's ``curve`` as one printed line: its mean at every round all its runs evaluated (what the
    plateau check reads), so a block's script shows where its rows still moved."""
    return "; ".join(f"{name}: " + ", ".join(f"round {r} {v:.2f}" for r, v in curve(runs, metric).items())
                     for name, runs in rows.items())


def window_start(round_: int, evaluated: list[int]) -> int | None:
    """The evaluation a plateau at ``round_`` is read against: the latest at or before the start of the last
    fifth of the rounds, round_ - max(1, round_ // 5); None where the runs evaluated nothing that early."""
    earlier = [r for r in evaluated if r <= round_ - max(1, round_ // 5)]
    return earlier[-1] if earlier else None


@dataclass(frozen=True)
class Move:
    """How far one row's mean moved over the window a plateau reads (points; None: not checkable)."""

    row: str
    start: int | None
    end: int
    gain: float | None

    def text(self) -> str:
        if self.gain is None:
            return f"{self.row} not checkable (no evaluation at or before round {self.end - max(1, self.end // 5)})"
        return f"{self.row} {self.gain:+.2f} (rounds {self.start}-{self.end})"


def moves(table: Table, rows: tuple[str, ...], metric: str, horizon: int | None) -> list[Move]:
    """Each row's move over the last fifth of the rounds up to ``horizon`` (None: its own last evaluation)."""
    out = []
    for row in rows:
        means = curve(table[row], metric)
        end = max(means) if horizon is None else horizon
        start = window_start(end, sorted(means))
        out.append(Move(row, start, end, None if start is None else means[end] - means[start]))
    return out


def is_plateau(found: list[Move]) -> bool:
    """Every row moved by under ``PLATEAU_POINTS``; a row that cannot be checked does not pass."""
    return all(m.gain is not None and abs(m.gain) < PLATEAU_POINTS for m in found)


def horizons(table: Table, rows: tuple[str, ...], metric: str, judged: int | None) -> list[int | None]:
    """``judged`` and every later round that every run of every row evaluated ([None] for runs' own ends)."""
    if judged is None:
        return [None]
    common = set.intersection(*(set(curve(table[row], metric)) for row in rows))
    return [judged, *sorted(r for r in common if r > judged)]


def cut_table(table: Table, rows: tuple[str, ...], horizon: int | None, metric: str, cut: Cut) -> Table:
    """The ``rows`` of ``table`` as if every run had stopped after ``horizon`` (None: as they are)."""
    return {row: table[row] if horizon is None else [cut(res, horizon, metric) for res in table[row]] for row in rows}


@dataclass
class Reading:
    """One claim under rule v4.

    Attributes:
        at_judged: rule v3's record at the judged round (v3's verdict).
        judged_moves: each row's move at the judged round.
        note: the plateau's reading: the judged round's moves, and the later plateau's where it was needed.
        plateau: the round of the v4 verdict: the judged round or the first later plateau (None: none found).
        verdict: the record the v4 verdict stands on, its text prefixed with the plateau's reading.
        horizon: (round, rule v3's record there) from the judged round to the runs' last.
    """

    at_judged: Record
    judged_moves: list[Move]
    note: str
    plateau: int | None
    verdict: Record
    horizon: list[tuple[int | None, Record]]


def at_round_text(horizon: int | None) -> str:
    return "each row's last evaluation" if horizon is None else f"round {horizon}"


def read_claim(judge: Judge, rows: tuple[str, ...], table: Table, metric: str, judged: int | None, cut: Cut) -> Reading:
    """Judge one claim by rule v4 (module docstring) from the full, uncut runs in ``table``."""
    grid = horizons(table, rows, metric, judged)
    records = [(h, judge(cut_table(table, rows, h, metric, cut))) for h in grid]
    found = [moves(table, rows, metric, h) for h in grid]
    first = next((i for i, m in enumerate(found) if is_plateau(m)), None)
    said = "; ".join(m.text() for m in found[0])
    unchecked = any(m.gain is None for m in found[0])
    if first == 0:
        note = f"{at_round_text(grid[0])} is a plateau ({said})"
    elif first is None:
        why = "the plateau is not checkable" if unchecked else "not a plateau"
        note = f"no plateau by {at_round_text(grid[-1])}: at {at_round_text(grid[0])} {why} ({said})"
    else:
        later = "; ".join(m.text() for m in found[first])
        note = (f"{at_round_text(grid[0])} not a plateau ({said}), where v3 says {records[0][1].verdict}; "
                f"judged at round {grid[first]}, the first that is ({later})")
    base = records[0 if first is None else first][1]
    verdict = replace(base, text=f"rule v4: {note}; {base.text}")
    return Reading(records[0][1], found[0], note, None if first is None else grid[first], verdict, records)


def said_at(record: Record) -> str:
    """A record's raw verdict with its A - B interval (or its p, for a rounds claim)."""
    if record.diff is not None:
        mean, low, high = record.diff
        return f"{record.verdict} {mean:+.2f} [{low:+.2f}, {high:+.2f}]"
    return f"{record.verdict} (p {record.p:.2g})" if record.p is not None else record.verdict


def horizon_line(reading: Reading) -> str:
    """The claim's raw verdict from the judged round to the last: runs of equal verdicts, then each end's numbers."""
    if len(reading.horizon) == 1:
        return "horizon: the runs have no evaluation after the judged round"
    spans = [(verdict, [h for h, _ in group]) for verdict, group in
             itertools.groupby(reading.horizon, key=lambda item: item[1].verdict)]
    runs = "; ".join((f"rounds {hs[0]}-{hs[-1]}" if len(hs) > 1 else f"round {hs[0]}") + f" {verdict}"
                     for verdict, hs in spans)
    (first, a), (last, b) = reading.horizon[0], reading.horizon[-1]
    ends = f"at {at_round_text(first)} {said_at(a)}, at round {last} {said_at(b)}"
    return f"horizon: {runs} ({ends})"


@dataclass(frozen=True)
class Design:
    """One row's lift over its floor against the seeds' spread of that lift (points)."""

    row: str
    mean: float
    sd: float

    @property
    def ratio(self) -> float:
        return self.mean / self.sd if self.sd > 0 else float("inf") if self.mean > 0 else float("nan")

    def text(self) -> str:
        flag = "" if self.ratio >= DESIGN_RATIO else f", under {DESIGN_RATIO:g}x"
        return f"{self.row} {self.mean:.2f} / {self.sd:.2f} = {self.ratio:.1f}{flag}"


def design(table: Table, metric: str, o: Options) -> list[Design]:
    """Every row the block expects to learn, and every control: its lift / sd over the seeds in ``table``."""
    out = []
    for row in dict.fromkeys([*o.learns, *o.controls]):
        lift = rule_v3.per_seed(table[row], metric) - rule_v3.floors(row, table[row], metric, o.chance)
        out.append(Design(row, float(lift.mean()), float(lift.std(ddof=1))))
    return out


def reading_text(readings: list[Reading], rows: list[Design], judged: int | None) -> str:
    """The v4 lines of a block's metric: per claim its plateau, both verdicts where they differ, its horizon;
    then the design target per row."""
    lines = []
    for r in readings:
        claim = f"{r.at_judged.claim} ({r.at_judged.metric})"
        where = "" if r.plateau is None or r.plateau == r.horizon[0][0] else f" at round {r.plateau}"
        lines.append(f"- **{claim}**: {r.note}. v4 verdict {said_at(r.verdict)}{where}. {horizon_line(r)}.")
    under = sum(d.ratio < DESIGN_RATIO for d in rows)
    lines.append(f"- design target (lift / sd >= {DESIGN_RATIO:g}, at {at_round_text(judged)}; {under} of {len(rows)} "
                 "rows under it): " + "; ".join(d.text() for d in rows) + ".")
    return "\n".join(lines)
