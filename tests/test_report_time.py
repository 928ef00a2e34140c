"""Virtual time in `fedlight report`: hours, idle share, staleness and hours to reach a target, in
report.md and compare.md, on hand-made results.json files; reports of runs without a clock unchanged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fedlight import stats
from fedlight.cli import main
from fedlight.report.runs import find_runs
from fedlight.report.timing import Reach, hours_text, reach_cell, seed_reaches
from fedlight.report.write import write_report

UNCLOCKED = Path(__file__).parent / "data" / "report_unclocked"


def _run(folder: Path, arm: str, seed: int, knn: list[float], hours: list[float] | None, idle: float = 0.0,
         staleness: list[list[int]] | None = None) -> None:
    """A finished run of ``arm``: kNN evaluated every round (``knn``, fractions), the clock's cumulative
    ``hours`` at each round's end (None: no clock), its idle share and, asynchronous, each step's staleness."""
    folder.mkdir(parents=True)
    history = []
    for r, value in enumerate(knn, 1):
        row = {"round": r, "knn_acc": value, "bytes_up": 10, "bytes_down": 10, "bytes_d2d": 0}
        if hours is not None:
            row.update(virtual_seconds=3600 * hours[r - 1], idle_share=idle)
        if staleness is not None:
            row.update(staleness=staleness[r - 1], updates_applied=len(staleness[r - 1]))
        history.append(row)
    recipe = {"seed": seed, "arm": arm, "rounds": len(knn), "eval": {"label_fraction": 1.0},
              "clock": {"devices": "none" if hours is None else "lognormal"}, "run": {"dir": str(folder)}}
    (folder / "results.json").write_text(json.dumps({
        "recipe": recipe, "rounds_completed": len(knn), "history": history, "final": {"knn_acc": knn[-1]},
        "baseline": {"knn_acc": 0.1}, "comm": {"bytes_up": 10 * len(knn), "bytes_down": 10 * len(knn)}}))


# kNN per round. sync: rounds end at 1, 2, 3 virtual hours; 40% first reached at 2, 2, 1 hours; finals 45, 42, 44
# (mean 43.67). fast (FedBuff): steps end at 0.5, 1.0, 1.5 hours; 40% reached at 1.0 (seed 0: before sync's 2,
# first), never (seed 1: censored at 1.5, before sync's 2: unordered), 1.0 (seed 2: sync's 1.0 too, a tie)
SYNC = {0: [0.30, 0.40, 0.45], 1: [0.35, 0.41, 0.42], 2: [0.40, 0.42, 0.44]}
FAST = {0: [0.30, 0.45, 0.46], 1: [0.30, 0.35, 0.38], 2: [0.38, 0.40, 0.41]}
STALE = {0: [[0, 0], [1], [3]], 1: [[0], [2], [1]], 2: [[0, 0], [0], [0]]}  # means 1, 1, 0; largest 3


def _arms(tmp_path: Path, unclocked: bool = True) -> Path:
    for seed in SYNC:
        _run(tmp_path / f"runs/sync{seed}", "sync", seed, SYNC[seed], [1, 2, 3], idle=0.2 + 0.1 * seed)
        _run(tmp_path / f"runs/fast{seed}", "fast", seed, FAST[seed], [0.5, 1.0, 1.5], staleness=STALE[seed])
        if unclocked:
            _run(tmp_path / f"runs/old{seed}", "old", seed, SYNC[seed], None)
    return tmp_path / "runs"


def _rows(text: str, title: str) -> dict[str, list[str]]:
    """The rows of the table under the heading that starts with ``title``, by their first cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    start = next(i for i in range(start, len(lines)) if lines[i].startswith("|---"))
    rows = {}
    for line in lines[start + 1:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells[1:]
    return rows


def test_times_sign_test_orders_a_censored_seed_only_where_the_other_arm_came_first() -> None:
    # seed by seed: A first; B first; A reached at 5 after B stopped looking at 4 (unordered); A stopped at 9,
    # B reached at 3 (B first); tie at 3; neither reached (unordered); A reached at 4 when B stopped at 4 (A first)
    s = stats.times_sign_test([1, 2, 5, 9, 3, 7, 4], [2, 1, 4, 3, 3, 8, 4], [0, 0, 0, 1, 0, 1, 0],
                              [0, 0, 1, 0, 0, 1, 1])
    assert (s.a_first, s.b_first, s.ties, s.unordered) == (2, 2, 1, 2) and s.p == 1.0
    six = stats.times_sign_test([1] * 6, [2] * 6, [False] * 6, [False] * 6)
    assert six.p == pytest.approx(2 / 64) and stats.sign_verdict(six, +1).verdict == stats.HOLDS
    # one horizon for every run: rounds_sign_test's counts, a seed neither reached unordered, not tied
    rounds = stats.rounds_sign_test([3, math.inf, 5, math.inf], [4, 6, math.inf, math.inf])
    times = stats.times_sign_test([3, 6, 5, 6], [4, 6, 6, 6], [0, 1, 0, 1], [0, 0, 1, 1])
    assert (times.a_first, times.b_first, times.p) == (rounds.a_first, rounds.b_first, rounds.p)
    assert (rounds.ties, times.ties, times.unordered) == (1, 0, 1)
    with pytest.raises(ValueError, match="equal-length"):
        stats.times_sign_test([1, 2], [1, 2], [0], [0, 0])


def test_hours_and_cells_by_hand(tmp_path: Path) -> None:
    assert hours_text(1.2) == "1.20" and hours_text(0.00166) == "0.00166" and hours_text(0.5) == "0.500"
    assert hours_text(0.01, like=0.5) == "0.010"  # an sd shown as its mean is
    runs = find_runs([_arms(tmp_path, unclocked=False)])
    fast = [r for r in runs if r.keys["arm"] == "fast"]
    assert seed_reaches(fast, "knn_acc@1", 0.40) == {0: Reach(1.0, False), 1: Reach(1.5, True), 2: Reach(1.0, False)}
    assert reach_cell(seed_reaches(fast, "knn_acc@1", 0.40)) == "2 of 3: 1.00, > 1.50, 1.00"
    sync = [r for r in runs if r.keys["arm"] == "sync"]
    # 2, 2, 1 hours: mean 5/3, sd sqrt((1/9 + 1/9 + 4/9) / 2) = sqrt(1/3) = 0.577
    assert reach_cell(seed_reaches(sync, "knn_acc@1", 0.40)) == "1.67 ± 0.58"
    assert reach_cell({}) == "-"


def test_a_seed_run_twice_is_censored_where_one_run_is_at_the_mean_of_their_horizons(tmp_path: Path) -> None:
    _run(tmp_path / "runs/a", "x", 0, [0.30, 0.50], [1, 2])  # reached 0.5 at 2 hours
    _run(tmp_path / "runs/b", "x", 0, [0.30, 0.30], [1, 3])  # never: censored at 3 hours
    reaches = seed_reaches(find_runs([tmp_path / "runs"]), "knn_acc@1", 0.5)
    assert reaches == {0: Reach(2.5, True)}  # the mean of the two times is above (2 + 3) / 2


def test_report_md_gives_each_clocked_groups_virtual_time(tmp_path: Path) -> None:
    runs = _arms(tmp_path)
    assert main(["report", str(runs), "--reference", "sync", "--target", "knn_acc=40"]) == 0
    text = (runs / "report.md").read_text()
    assert "## Virtual time" in text
    assert ("Targets (`--target METRIC=PERCENT` sets one, else the reference's mean final value): kNN, 100% labels "
            "40.00% (`--target`).") in text
    rows = _rows(text, "| arm | seeds | virtual hours |")
    # idle 20%, 30%, 40% (sd 10); staleness: seed means 1, 1, 0 -> 0.67, the largest 3
    assert rows["sync"] == ["3", "3.00 ± 0.00", "30.00 ± 10.00", "-", "-", "1.67 ± 0.58"]
    assert rows["fast"] == ["3", "1.50 ± 0.00", "0.00 ± 0.00", "0.67", "3", "2 of 3: 1.00, > 1.50, 1.00"]
    assert "old" not in rows and "- `old`: no virtual clock in every run" in text
    for suffix in ("png", "svg"):
        assert (runs / f"knn_acc@1_vs_hours.{suffix}").is_file()
    assert "](knn_acc@1_vs_hours.png)" in text


def test_compare_md_pairs_times_by_seed_a_censored_seed_and_a_tie(tmp_path: Path) -> None:
    runs = _arms(tmp_path)
    assert main(["report", str(runs), "--reference", "sync", "--target", "knn_acc=40"]) == 0
    text = (runs / "compare.md").read_text()
    title = "### kNN, 100% labels: virtual hours to reach 40.00% (`--target`)"
    rows = _rows(text, title)
    assert rows["sync"][:3] == ["3", "1.67 ± 0.58", "reference"]
    # seed 0 first (1.0 < 2), seed 1 unordered (censored at 1.5 before sync's 2), seed 2 tied (1.0 = 1.0): the sign
    # test has 1 untied seed, p 1; ratios 1.0 / 2 and 1.0 / 1.0, median 0.75
    assert rows["fast"] == ["3", "2 of 3: 1.00, > 1.50, 1.00", "3", "1 / 0 / 1 / 1", "1", "can't tell", "can't tell",
                            "0.75 (2 seeds both reached)"]
    assert "old" not in rows and "- `old` has no virtual clock" in text
    # the family: the accuracy test of fast and of old, and fast's sign test
    assert "all 3 tests of this file (every arm, metric and reading, and each sign test on time)" in text


def test_the_default_target_is_the_references_mean_final(tmp_path: Path) -> None:
    runs = _arms(tmp_path, unclocked=False)
    assert main(["report", str(runs), "--reference", "sync"]) == 0
    text = (runs / "compare.md").read_text()
    # sync's finals 45, 42, 44: 43.67. sync reaches it at 3 (seed 0), never (1: censored at 3), 3 (2) hours;
    # fast at 1.0, never (1.5), never (1.5): seed 0 first, seed 1 both censored, seed 2 censored at 1.5 before 3
    rows = _rows(text, "### kNN, 100% labels: virtual hours to reach 43.67% (`sync`'s mean final)")
    assert rows["sync"][:3] == ["3", "2 of 3: 3.00, > 3.00, 3.00", "reference"]
    assert rows["fast"][:4] == ["3", "1 of 3: 1.00, > 1.50, > 1.50", "3", "1 / 0 / 0 / 2"]
    assert rows["fast"][-1] == "0.33 (1 seed both reached)"
    assert "kNN, 100% labels 43.67% (`sync`'s mean final)" in (runs / "report.md").read_text()


def test_a_sign_test_joins_the_holm_family(tmp_path: Path) -> None:
    """Six seeds, `quick` first on each: p = 2 / 2^6 = 0.031, `first`; the accuracies differ by +1, -1, ...
    (mean 0, p 1). Holm over the 2 tests: 2 x 0.031 = 0.0625 > 0.05, so `can't tell` after Holm."""
    for seed in range(6):
        _run(tmp_path / f"runs/base{seed}", "base", seed, [0.30, 0.50], [1, 2])
        _run(tmp_path / f"runs/quick{seed}", "quick", seed, [0.50, 0.50 + (0.01 if seed % 2 else -0.01)], [1, 2])
    assert main(["report", str(tmp_path / "runs"), "--target", "knn_acc=50"]) == 0
    text = (tmp_path / "runs/compare.md").read_text()
    rows = _rows(text, "### kNN, 100% labels: virtual hours to reach 50.00%")
    assert rows["quick"] == ["6", "1.00 ± 0.00", "6", "6 / 0 / 0 / 0", "0.031", "first", "can't tell",
                             "0.50 (6 seeds both reached)"]
    assert "all 2 tests of this file" in text


@pytest.mark.parametrize("fixture, margin", [("arms", 5.0), ("sweep", None)])
def test_runs_without_a_clock_give_the_same_report_byte_for_byte(tmp_path: Path, fixture: str, margin) -> None:
    """tests/data/report_unclocked holds report.md and compare.md of test_report.py's fixtures as written
    before the clock (the folder they were written in replaced by TMP), rewritten once since, on purpose, when
    compare.md gained its `MB up / down` column and both files the checks' notes (the fixtures' probe
    rises 10 points in their last round, so every group is `not at a plateau` on it), once more when
    report.md's table gained `MB up` and its plots those against upload bytes, and once when compare.md
    named the runs that did not finish (the sweep's preempted run)."""
    from test_report import _arms as arms, _sweep as sweep

    folder = {"arms": arms, "sweep": sweep}[fixture](tmp_path)
    write_report([str(folder)], folder, margin=margin)
    for name in ("report.md", "compare.md"):
        assert (folder / name).read_text().replace(str(tmp_path), "TMP") == (UNCLOCKED / f"{fixture}_{name}").read_text()
    assert not list(folder.glob("*_vs_hours.*"))


@pytest.mark.parametrize("flags, fragment", [
    (["--target", "knn_acc"], "--target knn_acc: a target is METRIC=PERCENT"),
    (["--target", "knn_acc=140"], "--target knn_acc=140: a target is METRIC=PERCENT, a number from 0 to 100"),
    (["--target", "test_acc=40"], "--target test_acc=40: no finished run measured test_acc; choose from knn_acc@1")])
def test_a_bad_target_is_one_line_and_no_report(tmp_path: Path, capsys, flags, fragment) -> None:
    runs = _arms(tmp_path)
    assert main(["report", str(runs), "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_a_target_without_a_clock_is_refused_with_the_fix(tmp_path: Path, capsys) -> None:
    for seed in range(2):
        _run(tmp_path / f"runs/old{seed}", "old", seed, [0.3, 0.4], None)
    assert main(["report", str(tmp_path / "runs"), "--target", "knn_acc=40"]) == 2
    err = capsys.readouterr().err
    assert "--target: no finished run has a virtual clock" in err and "leave --target out" in err


def test_a_hand_edited_clock_column_is_one_line(tmp_path: Path, capsys) -> None:
    _run(tmp_path / "runs/a", "x", 0, [0.3], [1])
    path = tmp_path / "runs/a/results.json"
    results = json.loads(path.read_text())
    results["history"][0]["virtual_seconds"] = "soon"
    path.write_text(json.dumps(results))
    assert main(["report", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "history[0]'s virtual_seconds is 'soon', not a number" in err and err.count("\n") == 1


def test_a_reference_without_a_clock_compares_no_time_and_says_so(tmp_path: Path) -> None:
    runs = _arms(tmp_path)
    assert main(["report", str(runs), "--reference", "old"]) == 0
    text = (runs / "compare.md").read_text()
    assert "virtual hours to reach" not in text
    assert ("- `old` has no virtual clock: no arm's time to reach is compared with it (`--reference` chooses a group "
            "whose runs have one)") in text
    # report.md still has the clocked groups' time, to the unclocked reference's mean final (43.67)
    assert "kNN, 100% labels 43.67% (`old`'s mean final)" in (runs / "report.md").read_text()
