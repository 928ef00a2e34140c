"""The package's own checks in `fedlight report`: an arm that did not train gets no verdict and
leaves the Holm family, a rising arm is flagged, bytes up / down stand beside each arm; hand-made results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedlight import stats
from fedlight.cli import main

BASE = [0.10] * 5  # every seed's random-init test accuracy
# arm -> per seed, test accuracy at rounds 1..5. `flat` and `peer` gain under 1 point from round 4 to 5 (the last
# fifth of 5 rounds); `floor` stays at chance (lift +0.1, -0.1, +0.2 points over a 10.00 floor); `rising` gains 8
FLAT = {0: [0.50, 0.60, 0.65, 0.700, 0.705], 1: [0.50, 0.60, 0.65, 0.710, 0.715], 2: [0.50, 0.60, 0.65, 0.720, 0.725]}
PEER = {s: [v + 0.01 * (s + 2) for v in c] for s, c in FLAT.items()}  # +2, +3, +4 points over flat
FLOOR = {0: [0.10, 0.11, 0.09, 0.10, 0.101], 1: [0.10, 0.11, 0.09, 0.10, 0.099], 2: [0.10, 0.11, 0.09, 0.10, 0.102]}
RISING = {0: [0.20, 0.30, 0.40, 0.50, 0.58], 1: [0.20, 0.30, 0.40, 0.50, 0.57], 2: [0.20, 0.30, 0.40, 0.50, 0.59]}


def _run(folder: Path, arm: str, seed: int, curve: list[float], up: int = 500_000, hours: bool = False,
         **results: object) -> None:
    """A finished run of ``arm`` evaluated every round (``curve``: test accuracy, fractions), ``up`` bytes up and
    500,000 down a round; ``hours``: a virtual clock, round r ending at r hours; ``results``: results.json's
    entries to set otherwise (a fine-tune in ``final``, a ``collapse`` record, an unfinished run's)."""
    folder.mkdir(parents=True)
    history = [{"round": r, "test_acc": v, "bytes_up": up, "bytes_down": 500_000, "bytes_d2d": 0,
                **({"virtual_seconds": 3600 * r, "idle_share": 0.0} if hours else {})} for r, v in enumerate(curve, 1)]
    (folder / "results.json").write_text(json.dumps({
        "recipe": {"seed": seed, "arm": arm, "rounds": len(curve), "run": {"dir": str(folder)}},
        "rounds_completed": len(curve), "history": history, "final": {"test_acc": curve[-1]},
        "baseline": {"test_acc": BASE[seed]},
        "comm": {"bytes_up": up * len(curve), "bytes_down": 500_000 * len(curve), "bytes_d2d": 0}, **results}))


def _sweep(tmp_path: Path, arms: dict[str, dict[int, list[float]]], hours: bool = False) -> Path:
    for arm, curves in arms.items():
        for seed, curve in curves.items():
            _run(tmp_path / f"runs/{arm}{seed}", arm, seed, curve, 1_000_000 if arm == "peer" else 500_000, hours)
    return tmp_path / "runs"


def _rows(text: str) -> dict[str, list[str]]:
    """The table's rows by arm, the cells after the arm's name."""
    return {cells[0]: cells[1:] for line in text.splitlines() if line.startswith("| ") and "---" not in line
            for cells in [[c.strip() for c in line.strip("|").split(" | ")]]}


def test_the_plateau_rule_by_hand() -> None:
    # 5 rounds: the last fifth is round 4 to 5; 10 rounds: 8 to 10; 3 rounds: at least one round, 2 to 3
    assert stats.plateau_gain({0: 10, 1: 40, 2: 50, 3: 55, 4: 60, 5: 60.5}) == (4, 5, 0.5)
    assert stats.plateau_gain({r: 10 + r for r in range(0, 11, 2)}) == (8, 10, 2)
    assert stats.plateau_gain({0: 10, 3: 30}) == (0, 3, 20)  # no evaluation in between: from the random init
    assert stats.plateau_gain({3: 30}) is None and stats.plateau_gain({}) is None
    assert stats.at_plateau(0.99) and not stats.at_plateau(1.0)
    assert stats.at_plateau(-3.0) and not stats.at_plateau(-1.0, sign=-1)  # lower is better: falling is rising
    # rule v3's trained check with its least min_lift, 2 points: lifts 2.1, 2.5, 2.9 (sd 0.4): 2.5 - 0.99 < 2
    assert not stats.trained([12.1, 12.5, 12.9], 10.0) and stats.trained([13.1, 13.5, 13.9], 10.0)


def test_an_arm_at_its_floor_did_not_train_and_gets_no_verdict(tmp_path: Path) -> None:
    runs = _sweep(tmp_path, {"flat": FLAT, "peer": PEER, "floor": FLOOR})
    assert main(["report", str(runs), "--reference", "flat", "--margin", "2"]) == 0
    text = (runs / "compare.md").read_text()
    rows = _rows(text.split("## test")[1])
    assert rows["arm"][-1] == "checks"
    # floor - flat: -60.4, -61.6, -62.3 points (sd 0.96; half-width 4.303 x 0.96 / sqrt 3 = 2.39): a confident
    # "behind", were the floor not checked
    assert rows["floor"][4:] == ["-61.43", "[-63.82, -59.05]", "did not train", "did not train", "did not train",
                                 "did not train", "", "did not train"]
    assert rows["peer"][6:] == ["ahead", "can't tell", "can't tell", "can't tell", "", ""]  # +3 [+0.52, +5.48]
    assert rows["flat"][-1] == ""
    # floor's lift: +0.1, -0.1, +0.2 (mean 0.067, sd 0.153): 0.067 +- 4.303 x 0.153 / sqrt(3) = [-0.31, +0.45]
    assert ("- `floor` did not train on test: its lift over its random-init value is +0.07 [-0.31, +0.45] points "
            "over 3 seeds, the interval's lower end under the 2 a group must gain: no verdict on it, and out of "
            "the Holm family") in text
    assert "all 2 tests of this file" in text  # peer's two readings; floor's left the family
    report = (runs / "report.md").read_text()
    assert "- `floor` did not train on test" in report and "is not at a plateau" not in report


def test_an_arm_that_did_not_train_gets_no_verdict_on_a_metric_without_a_random_init_value(tmp_path: Path) -> None:
    """A fine-tune has no random-init value (the random init is not fine-tuned): `floor`, at chance on test,
    fine-tunes 20 points above `flat` and was reported `ahead` there."""
    for arm, curves, tuned in (("flat", FLAT, 0.60), ("floor", FLOOR, 0.80)):
        for seed, curve in curves.items():
            _run(tmp_path / f"runs/{arm}{seed}", arm, seed, curve,
                 final={"test_acc": curve[-1], "finetune_acc@0.1": tuned + 0.01 * seed})
    runs = tmp_path / "runs"
    assert main(["report", str(runs), "--reference", "flat"]) == 0
    text = (runs / "compare.md").read_text()
    rows = _rows(text.split("## fine-tune")[1])
    assert rows["floor"][4:] == ["+20.00", "[+20.00, +20.00]", "did not train", "did not train", "", "did not train"]
    assert ("- `floor` did not train on fine-tune, 10% labels (fine-tune, 10% labels has no random-init value; read "
            "on test): its "
            "lift over its random-init value is +0.07 [-0.31, +0.45] points") in text
    assert "all 0 tests of this file" in text


def test_runs_that_collapsed_or_did_not_finish_are_named_beside_the_comparison(tmp_path: Path) -> None:
    """`peer` lost seeds 3 and 4 (the collapse alarm stopped one; the other has 2 of 5 rounds) and seed 0 read as
    collapsed but went on: its `ahead` rests on the seeds that finished, which compare.md must say."""
    runs = _sweep(tmp_path, {"flat": {**FLAT, 3: FLAT[0], 4: FLAT[1]}, "peer": PEER})
    alarm = {"round": 2, "reading": "rankme", "value": 1.1, "threshold": 2.0, "evaluations": 2}
    (runs / "peer0/results.json").write_text((runs / "peer0/results.json").read_text()[:-1] + ', "collapse": '
                                             + json.dumps(alarm) + "}")
    _run(runs / "peer3", "peer", 3, FLAT[0][:2], final=None, collapse=alarm)
    _run(runs / "peer4", "peer", 4, FLAT[0][:2], final=None, collapse=None)
    for seed in (3, 4):  # what a stopped run's results.json holds: its recipe's rounds, fewer done
        record = json.loads((runs / f"peer{seed}/results.json").read_text())
        record["recipe"]["rounds"] = 5
        (runs / f"peer{seed}/results.json").write_text(json.dumps(record))
    assert main(["report", str(runs), "--reference", "flat"]) == 0
    text = (runs / "compare.md").read_text()
    assert ("- `peer`: seed 0 (the alarm fired at round 2) read as collapsed (in its mean; eval.collapse_stop=true "
            "stops such a run)") in text
    assert ("- `peer`: seeds 3 (the collapse alarm stopped it at round 2), 4 (2 of 5 rounds) did not finish (left "
            "out: its comparisons read only the seeds that did)") in text


def test_a_reference_that_did_not_train_leaves_every_comparison_without_a_verdict(tmp_path: Path) -> None:
    runs = _sweep(tmp_path, {"flat": FLAT, "floor": FLOOR})
    assert main(["report", str(runs), "--reference", "floor"]) == 0
    text = (runs / "compare.md").read_text()
    rows = _rows(text.split("## test")[1])
    assert rows["floor"][-1] == "did not train"
    assert rows["flat"][6:] == ["reference did not train", "reference did not train", "", ""]
    assert "all 0 tests of this file" in text


def test_a_rising_arm_is_flagged_not_at_a_plateau(tmp_path: Path) -> None:
    runs = _sweep(tmp_path, {"flat": FLAT, "rising": RISING})
    assert main(["report", str(runs), "--reference", "flat"]) == 0
    text = (runs / "compare.md").read_text()
    rows = _rows(text.split("## test")[1])
    assert rows["rising"][6:] == ["behind", "behind", "", "not at a plateau"] and rows["flat"][-1] == ""
    # rising's mean: 50.00 at round 4, 58.00 at round 5; flat's gains 0.5 (under 1)
    assert ("- `rising` is not at a plateau on test: its mean moved +8.00 points from round 4 to round 5 (the last "
            "fifth of its rounds; a plateau moves under 1): the verdict may change with more rounds") in text
    assert "`not at a plateau`: its verdict may change with more rounds" in text
    assert "- `rising` is not at a plateau on test" in (runs / "report.md").read_text()


def test_where_no_check_fires_there_is_no_checks_column_or_note(tmp_path: Path) -> None:
    runs = _sweep(tmp_path, {"flat": FLAT, "peer": PEER})
    assert main(["report", str(runs), "--reference", "flat"]) == 0
    text, report = (runs / "compare.md").read_text(), (runs / "report.md").read_text()
    assert "checks" not in text.lower() and "plateau" not in text + report and "did not train" not in text + report


def test_bytes_up_and_down_stand_beside_each_arm(tmp_path: Path) -> None:
    """`peer` uploads 1,000,000 bytes a round, `flat` 500,000; both download 500,000: 5 rounds."""
    runs = _sweep(tmp_path, {"flat": FLAT, "peer": PEER})
    assert main(["report", str(runs), "--reference", "flat"]) == 0
    text = (runs / "compare.md").read_text()
    assert "| arm | seeds | mean ± sd over seeds (%) | MB up / down | pairs |" in text
    rows = _rows(text.split("## test")[1])
    assert rows["flat"][2] == "2.50 / 2.50" and rows["peer"][2] == "5.00 / 2.50"


def test_an_arm_that_did_not_train_gets_no_time_verdict_either(tmp_path: Path) -> None:
    runs = _sweep(tmp_path, {"flat": FLAT, "peer": PEER, "floor": FLOOR}, hours=True)
    assert main(["report", str(runs), "--reference", "flat", "--target", "test_acc=60"]) == 0
    text = (runs / "compare.md").read_text()
    rows = _rows(text.split("virtual hours to reach 60.00%")[1])
    assert rows["floor"][4:7] == ["", "did not train", "did not train"]
    assert rows["peer"][3:6] == ["0 / 0 / 3 / 0", "1", "can't tell"]  # every seed reaches 60% at round 2: tied
    assert "all 2 tests of this file" in text  # peer's accuracy and time tests; none of floor's


def test_fewer_than_three_seeds_are_not_checked_for_training(tmp_path: Path) -> None:
    runs = _sweep(tmp_path, {"flat": FLAT, "floor": {s: FLOOR[s] for s in (0, 1)}})
    assert main(["report", str(runs), "--reference", "flat"]) == 0
    assert "did not train" not in (runs / "compare.md").read_text()


@pytest.mark.parametrize("arm", ["floor", "rising"])
def test_the_report_md_group_table_is_unchanged_by_a_check(tmp_path: Path, arm: str) -> None:
    runs = _sweep(tmp_path, {"flat": FLAT, arm: {"floor": FLOOR, "rising": RISING}[arm]})
    assert main(["report", str(runs), "--reference", "flat"]) == 0
    report = (runs / "report.md").read_text()
    assert "| arm | seeds | test (%) | MB communicated |" in report


def _grid_run(folder: Path, arm: str, alpha: float, seed: int, value: float, **recipe: object) -> None:
    """A finished 1-round run of ``arm`` at ``alpha`` whose test accuracy is ``value``."""
    _run(folder, arm, seed, [value], recipe={"seed": seed, "arm": arm, "rounds": 1, "partition": {"alpha": alpha},
                                             "run": {"dir": str(folder)}, **recipe})


def test_arms_on_a_grid_are_compared_cell_by_cell_without_a_reference(tmp_path: Path) -> None:
    """Without --reference, `b` at alpha 1.0 was compared with `a` at alpha 0.1: the arm and alpha in one
    difference (+32.20 points); in each cell `b` is 2.10 points over `a` (2, 2.1, 2.2 over the seeds)."""
    for seed in range(3):
        for alpha, base in ((0.1, 0.40), (1.0, 0.70)):
            _grid_run(tmp_path / f"runs/a{alpha}-{seed}", "a", alpha, seed, base + 0.001 * seed)
            _grid_run(tmp_path / f"runs/b{alpha}-{seed}", "b", alpha, seed, base + 0.02 + 0.002 * seed)
    assert main(["report", str(tmp_path / "runs")]) == 0
    text = (tmp_path / "runs/compare.md").read_text()
    assert "Each arm against `a` at the same `partition.alpha`, a table per value" in text
    tables = [_rows(part) for part in text.split("\n## ")[1:]]
    assert [row[4] for rows in tables for name, row in rows.items() if name.startswith("b,")] == ["+2.10", "+2.10"]


def test_a_group_evaluated_otherwise_is_named_and_16_bit_runs_are_not_repeats(tmp_path: Path) -> None:
    """`b` votes its kNN with 20 neighbours, `a` with 200; and `a`'s 16-bit runs are a group of their own."""
    for seed in range(3):
        for arm, k, precision, value in (("a", 200, "32-true", 0.50), ("b", 20, "32-true", 0.60),
                                         ("a", 200, "16-mixed", 0.55)):
            _grid_run(tmp_path / f"runs/{arm}{precision}{seed}", arm, 0.1, seed, value + 0.01 * seed,
                      eval={"knn_k": k}, fabric={"precision": precision, "threads": 1 + seed})
    assert main(["report", str(tmp_path / "runs")]) == 0
    text = (tmp_path / "runs/compare.md").read_text()
    assert ("- `b, precision = 32-true` was evaluated otherwise than `a, precision = 32-true`: eval.knn_k 20 "
            "(`a, precision = 32-true`: 200); its differences mix the method with how it was measured") in text
    assert "`a, precision = 16-mixed` was evaluated otherwise" not in text  # the same eval settings
    assert "| a | 16-mixed | 3 |" in (tmp_path / "runs/report.md").read_text()  # a group, not 32-bit's repeats
