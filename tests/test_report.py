"""`fedlight report` on hand-made results.json files: exact means, stds, bytes; plots written."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import pytest

from fedlight.cli import main
from fedlight.report.runs import find_runs, varying_keys
from fedlight.report.write import mean_std

# (alpha, seed, final probe, final kNN, bytes up per round)
RUNS = [(0.1, 0, 0.50, 0.40, 250_000), (0.1, 1, 0.60, 0.40, 250_000), (0.1, 2, 0.70, 0.46, 250_000),
        (1.0, 0, 0.80, 0.70, 500_000), (1.0, 1, 0.90, 0.70, 750_000)]


def _write_run(folder: Path, alpha: float, seed: int, probe: float | None, knn: float | None, up: int) -> None:
    folder.mkdir(parents=True)
    recipe = {"name": "tiny", "seed": seed, "rounds": 2, "partition": {"kind": "dirichlet", "alpha": alpha},
              "method": {"name": "simclr"}, "run": {"dir": str(folder)}}
    history = [{"round": r, "train_loss": 1.0, "linear_probe_acc": probe and probe - 0.1 * (2 - r),
                "knn_acc": knn, "test_acc": None, "bytes_up": up, "bytes_down": up, "bytes_d2d": 0,
                "seconds": 0.1, "clients": [0, 1]} for r in (1, 2)]
    final = None if probe is None else {"linear_probe_acc": probe, "knn_acc": knn, "test_acc": None}
    (folder / "results.json").write_text(json.dumps({
        "recipe": recipe, "rounds_completed": 2, "history": history, "final": final, "baseline": None,
        "comm": {"bytes_up": 2 * up, "bytes_down": 2 * up, "bytes_d2d": 0,
                 "params_up": up // 2, "params_down": up // 2, "params_d2d": 0}, "wall_seconds": 1.0}))


def _sweep(tmp_path: Path) -> Path:
    for i, run in enumerate(RUNS):
        _write_run(tmp_path / f"sweep/runs/{i:04d}", *run)
    _write_run(tmp_path / "sweep/runs/0099", 1.0, 2, None, None, 1)  # preempted and not yet resumed
    return tmp_path / "sweep"


def test_mean_std_by_hand() -> None:
    assert mean_std([0.5, 0.6, 0.7]) == "60.00 ± 10.00"
    assert mean_std([0.40, 0.40, 0.46]) == "42.00 ± 3.46"  # deviations -2, -2, 4: sqrt(24 / 2)
    assert mean_std([0.8]) == "80.00" and mean_std([]) == "-"


def test_varying_keys_ignore_the_run_folder(tmp_path: Path) -> None:
    runs = find_runs([_sweep(tmp_path)])
    assert len(runs) == 6
    assert varying_keys(runs) == ["seed", "partition.alpha"]


def test_report_tables_and_plots(tmp_path: Path, capsys) -> None:
    sweep = _sweep(tmp_path)
    assert main(["report", str(sweep)]) == 0
    assert str(sweep / "report.md") in capsys.readouterr().out
    text = (sweep / "report.md").read_text()
    assert "| partition.alpha | seeds | linear probe (%) | kNN (%) | MB communicated |" in text
    # bytes per run: 2 rounds x (up + down); alpha 1.0 runs send 2 MB and 3 MB
    assert "| 0.1 | 3 | 60.00 ± 10.00 | 42.00 ± 3.46 | 1.00 |" in text
    assert "| 1.0 | 2 | 85.00 ± 7.07 | 70.00 ± 0.00 | 2.50 |" in text
    assert "5 finished runs" in text and "seeds [0, 1, 2]" in text
    assert "Not finished (left out)" in text and "0099" in text
    assert "test (%)" not in text  # no run has a classifier
    for name in ("accuracy_vs_round.png", "accuracy_vs_bytes.png"):
        assert f"]({name})" in text
        image = matplotlib.image.imread(sweep / name)
        assert image.shape[0] > 100 and image.shape[1] > 100 and image.std() > 0


def test_report_on_a_list_of_run_folders(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    out = tmp_path / "cmp"
    assert main(["report", str(sweep / "runs/0000"), str(sweep / "runs/0003"), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "| partition.alpha | seeds |" in text and "| 0.1 | 1 | 50.00 | 40.00 | 1.00 |" in text


def test_report_without_runs_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "no results.json under" in err and err.count("\n") == 1
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_new_test_upload_counts_as_communication(tmp_path: Path) -> None:
    _write_run(tmp_path / "lg", 0.1, 0, 0.5, 0.4, 250_000)
    path = tmp_path / "lg/results.json"
    results = json.loads(path.read_text())
    results["comm"].update(bytes_new_test=100_000, params_new_test=25_000)
    path.write_text(json.dumps(results))
    assert find_runs([tmp_path / "lg"])[0].total_bytes == 4 * 250_000 + 100_000


# ---------------------------------------------------------------- issue 19: damaged input

def _edit(results: dict, how: str) -> object:
    row = results["history"][0]
    edits = {
        "a list": lambda: [results],
        "no recipe": lambda: {k: v for k, v in results.items() if k != "recipe"},
        "recipe as text": lambda: {**results, "recipe": "tiny"},
        "seed as text": lambda: {**results, "recipe": {**results["recipe"], "seed": "one"}},
        "no rounds_completed": lambda: {k: v for k, v in results.items() if k != "rounds_completed"},
        "history as a mapping": lambda: {**results, "history": {"1": row}},
        "a row without bytes": lambda: {**results, "history": [{k: v for k, v in row.items() if k != "bytes_up"}]},
        "bytes as text": lambda: {**results, "history": [{**row, "bytes_down": "1 MB"}]},
        "an accuracy as text": lambda: {**results, "history": [{**row, "knn_acc": "high"}]},
        "final as a list": lambda: {**results, "final": [0.5]},
        "a final accuracy as text": lambda: {**results, "final": {**results["final"], "knn_acc": "40%"}},
        "comm as a list": lambda: {**results, "comm": [1, 2]},
    }
    return edits[how]()


EDITS = ["a list", "no recipe", "recipe as text", "seed as text", "no rounds_completed", "history as a mapping",
         "a row without bytes", "bytes as text", "an accuracy as text", "final as a list",
         "a final accuracy as text", "comm as a list", "binary", "truncated"]


@pytest.mark.parametrize("how", EDITS)
def test_a_hand_edited_results_json_is_one_line_and_no_report(tmp_path: Path, capsys, how: str) -> None:
    """Today these ended in KeyError, AttributeError, TypeError or UnicodeDecodeError, some after
    the plots were written."""
    sweep = _sweep(tmp_path)
    victim = sweep / "runs/0003/results.json"
    if how == "binary":
        victim.write_bytes(bytes(range(256)))
    elif how == "truncated":
        victim.write_bytes(victim.read_bytes()[:200])
    else:
        victim.write_text(json.dumps(_edit(json.loads(victim.read_text()), how)))
    out = tmp_path / "report"
    assert main(["report", str(sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and str(victim) in err, err
    assert "leave its folder out" in err
    assert not out.exists()


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_report_out_that_is_or_is_under_a_file(tmp_path: Path, capsys, where: str) -> None:
    sweep = _sweep(tmp_path)
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine")
    out = blocker if where == "a file" else blocker / "report"
    assert main(["report", str(sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(blocker) in err and "--out" in err, err
    assert blocker.read_text() == "mine" and not (sweep / "report.md").exists()
