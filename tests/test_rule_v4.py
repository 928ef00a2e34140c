"""benchmarks/rule_v4.py: rule v4's plateau, horizon and design checks on hand-made run tables."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import family_table  # noqa: E402
import reproduce  # noqa: E402
import rule_v3  # noqa: E402
import rule_v4  # noqa: E402
from rule_v3 import Options  # noqa: E402

T_975_2 = 4.302652729911275
SEED_SHIFT = (-0.5, 0.0, 0.5)  # points: the three seeds' A - B around the mean, sd 0.5


def run(curve: list[float], floor: float = 10.0, every: int = 1) -> dict:
    """One run's results.json: test accuracy (points) after each round, evaluated every ``every`` rounds."""
    history = [{"round": r, "test_acc": acc / 100 if r % every == 0 else None} for r, acc in enumerate(curve, 1)]
    return {"history": history, "final": {"test_acc": curve[-1] / 100}, "baseline": {"test_acc": floor / 100},
            "rounds_completed": len(curve)}


def table(gap: list[float], every: int = 1) -> dict[str, list[dict]]:
    """Rows ``a`` and ``b`` over three seeds: ``b`` flat at 60, 61, 62; ``a`` = ``b`` + gap[round] + the seed's
    shift, the shift only where the gap is not 0 (so A - B has sd 0.5 there)."""
    b = [[60.0 + s] * len(gap) for s in range(3)]
    a = [[b[s][r] + g + (SEED_SHIFT[s] if g or r >= 5 else 0.0) for r, g in enumerate(gap)] for s in range(3)]
    return {"a": [run(c, every=every) for c in a], "b": [run(c, every=every) for c in b]}


def judge(t: dict[str, list[dict]]) -> rule_v3.Record:
    return rule_v3.mean_claim("blk", ["a", ">", "b", "paper"], [["a"], ["b"]], t, "test_acc",
                              Options(min_lift=5, learns=("a", "b"), controls=("b",)))


def read(t: dict[str, list[dict]], judged: int | None = 5) -> rule_v4.Reading:
    return rule_v4.read_claim(judge, ("a", "b"), t, "test_acc", judged, reproduce.at_round)


def test_the_window_is_the_last_fifth_of_the_rounds_or_the_evaluation_before_it() -> None:
    assert rule_v4.window_start(30, list(range(1, 61))) == 24  # MOON's v3 rule: round 30 against round 24
    assert rule_v4.window_start(48, [16, 32, 48]) == 32  # SOFed evaluates every 16: the span is longer
    assert rule_v4.window_start(2, [1, 2]) == 1  # under 5 rounds, the round before
    assert rule_v4.window_start(1, [1]) is None and rule_v4.window_start(40, [40]) is None  # not checkable


def test_a_judged_round_that_is_a_plateau_keeps_v3s_verdict() -> None:
    r = read(table([0, 0, 3, 3, 3, 3, 3, 3, 3, 3]))  # a moved at round 3, flat from round 4
    assert r.plateau == 5 and r.verdict.verdict == r.at_judged.verdict == "holds"
    assert "round 5 is a plateau (a +0.00 (rounds 4-5); b +0.00 (rounds 4-5))" in r.verdict.text
    assert rule_v4.horizon_line(r) == ("horizon: rounds 5-10 holds (at round 5 holds +3.00 "
                                       f"[{3 - T_975_2 * 0.5 / math.sqrt(3):+.2f}, {3 + T_975_2 * 0.5 / math.sqrt(3):+.2f}], "
                                       f"at round 10 holds +3.00 [+1.76, +4.24])")


def test_a_judged_round_still_moving_is_judged_again_at_the_first_later_plateau() -> None:
    """a jumps 3 points at round 5 (v3 judges it there: holds) and falls back at round 6; round 6 moves -3 too,
    round 7 is the first plateau, where A - B is 0 +- the seed shift: inconclusive."""
    r = read(table([0, 0, 0, 0, 3, 0, 0, 0, 0, 0]))
    assert r.at_judged.verdict == "holds" and r.plateau == 7
    assert r.verdict.verdict == "inconclusive" and r.verdict.diff[0] == pytest.approx(0.0)
    assert r.verdict.diff[2] == pytest.approx(T_975_2 * 0.5 / math.sqrt(3))
    assert [m.gain for m in r.judged_moves] == pytest.approx([3.0, 0.0])
    assert r.note.startswith("round 5 not a plateau (a +3.00 (rounds 4-5); b +0.00 (rounds 4-5)), where v3 says holds; "
                             "judged at round 7, the first that is (a +0.00 (rounds 6-7)")
    assert r.verdict.text.startswith(f"rule v4: {r.note}; n 3;")
    assert rule_v4.horizon_line(r).startswith("horizon: round 5 holds; rounds 6-10 inconclusive (at round 5 holds +3.00")


def test_a_curve_that_never_settles_keeps_the_verdict_at_r_marked() -> None:
    r = read(table([2.0 * k for k in range(10)]))  # a gains 2 points every round
    assert r.plateau is None and r.verdict.verdict == r.at_judged.verdict == "holds"
    assert r.note.startswith("no plateau by round 10: at round 5 not a plateau (a +2.00 (rounds 4-5)")


def test_a_single_evaluation_cannot_show_a_plateau() -> None:
    t = table([0, 0, 0, 0, 3, 3, 3, 3, 3, 3], every=10)  # evaluated at round 10 only, judged at the runs' end
    r = read(t, judged=None)
    assert r.plateau is None and r.verdict.verdict == "holds"
    assert r.note == ("no plateau by each row's last evaluation: at each row's last evaluation the plateau is not "
                      "checkable (a not checkable (no evaluation at or before round 8); b not checkable (no evaluation "
                      "at or before round 8))")
    assert rule_v4.horizon_line(r) == "horizon: the runs have no evaluation after the judged round"


def test_the_design_target_is_lift_over_its_sd_flagged_under_5x() -> None:
    t = {"weak": [run([f]) for f in (11.0, 12.0, 13.0)], "strong": [run([f]) for f in (20.0, 21.0, 22.0)]}
    found = rule_v4.design(t, "test_acc", Options(learns=("weak",), controls=("strong",)))
    assert [(d.row, d.ratio) for d in found] == [("weak", pytest.approx(2.0)), ("strong", pytest.approx(11.0))]
    assert [d.text() for d in found] == ["weak 2.00 / 1.00 = 2.0, under 5x", "strong 11.00 / 1.00 = 11.0"]


def test_reproduce_rule_v4_writes_the_v4_records_and_the_family_table_reads_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    made = {row: [res | {"comm": {"bytes_up": 1, "bytes_down": 1}, "wall_seconds": 1.0} for res in runs]
            for row, runs in table([0, 0, 0, 0, 3, 0, 0, 0, 0, 0]).items()}
    monkeypatch.setattr(reproduce, "run", lambda label, recipe, seed, out, overrides: made[label][seed])
    monkeypatch.setattr(sys, "argv", ["reproduce.py", "--rule", "v4", "--out", str(tmp_path / "blk"), "--seeds", "0",
                                      "1", "2", "--row", "a", "a.yaml", "--row", "b", "b.yaml", "--at-round", "5",
                                      "--block", "blk", "--control", "b", "--learns", "a", "--min-lift", "5",
                                      "--claim", "a", ">", "b", "paper"])
    (tmp_path / "blk").mkdir()
    reproduce.main()
    [record] = rule_v3.read(tmp_path / "blk" / "claims-v4-test_acc.jsonl")
    assert record.verdict == "inconclusive" and "judged at round 7" in record.text
    reading = (tmp_path / "blk" / "v4-reading-test_acc.md").read_text()
    assert "v4 verdict inconclusive +0.00" in reading and "at round 7. horizon: round 5 holds;" in reading
    assert "design target (lift / sd >= 5, at round 5; 0 of 2 rows under it): a " in reading
    assert "| holds | holds |" not in family_table.table(tmp_path, rule="v4")
    assert family_table.table(tmp_path, rule="v4").splitlines()[2].endswith("| inconclusive | inconclusive | `blk` |")
    assert "v4 verdict" in capsys.readouterr().out
