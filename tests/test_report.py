"""`fedlight report` on hand-made results.json files: exact means, stds, bytes; plots written."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import matplotlib.image
import pytest

from fedlight.cli import main
from fedlight.report.arm_groups import group_label, group_runs, grouping_keys
from fedlight.report.runs import find_runs, varying_keys
from fedlight.report.write import mean_std

# (alpha, seed, final probe, final kNN, bytes up per round)
RUNS = [(0.1, 0, 0.50, 0.40, 250_000), (0.1, 1, 0.60, 0.40, 250_000), (0.1, 2, 0.70, 0.46, 250_000),
        (1.0, 0, 0.80, 0.70, 500_000), (1.0, 1, 0.90, 0.70, 750_000)]


def _write_run(folder: Path, alpha: float, seed: int, probe: float | None, knn: float | None, up: int,
               label_fraction: float = 1.0, **sections: object) -> None:
    """A finished run (unfinished without ``probe``); ``sections`` replace or add recipe sections."""
    folder.mkdir(parents=True)
    recipe = {"name": "tiny", "seed": seed, "rounds": 2, "partition": {"kind": "dirichlet", "alpha": alpha},
              "method": {"name": "simclr"}, "eval": {"label_fraction": label_fraction}, "run": {"dir": str(folder)},
              **sections}
    history = [{"round": r, "train_loss": 1.0, "linear_probe_acc": probe and probe - 0.1 * (2 - r),
                "knn_acc": knn, "test_acc": None, "bytes_up": up, "bytes_down": up, "bytes_d2d": 0,
                "seconds": 0.1, "clients": [0, 1]} for r in (1, 2)]
    final = None if probe is None else {"linear_probe_acc": probe, "knn_acc": knn, "test_acc": None}
    (folder / "results.json").write_text(json.dumps({
        "recipe": recipe, "rounds_completed": 2, "history": history, "final": final,
        "baseline": {"linear_probe_acc": 0.1, "knn_acc": 0.1, "test_acc": None},
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
    out = capsys.readouterr().out.splitlines()
    written = sorted(line.strip() for line in out[1:out.index("")])  # then the paired comparison
    assert out[0] == f"wrote {len(written)} files:" and out[1] == f"  {sweep / 'report.md'}"
    assert out[2] == f"  {sweep / 'compare.md'}" and out[len(written) + 2] == "# Paired comparison"
    assert written == sorted(str(p) for p in sweep.iterdir() if p.is_file())  # every file it wrote, and no other
    text = (sweep / "report.md").read_text()
    assert ("| partition.alpha | seeds | linear probe, 100% labels (%) | kNN, 100% labels (%) | MB communicated |"
            in text)
    # bytes per run: 2 rounds x (up + down); alpha 1.0 runs send 2 MB and 3 MB; every random init is 10%
    assert "| 0.1 | 3 | 60.00 ± 10.00 (init 10.00) | 42.00 ± 3.46 (init 10.00) | 1.00 |" in text
    assert "| 1.0 | 2 | 85.00 ± 7.07 (init 10.00) | 70.00 ± 0.00 (init 10.00) | 2.50 |" in text
    assert "shaded band is ± one sample standard deviation over seeds" in text
    assert "5 finished runs" in text and "seeds [0, 1, 2]" in text
    assert "Not finished (left out)" in text and "0099" in text
    assert "test (%)" not in text  # no run has a classifier
    for name in ("linear_probe_acc@1_vs_round.png", "linear_probe_acc@1_vs_bytes.png", "knn_acc@1_vs_round.png",
                 "knn_acc@1_vs_bytes.png"):
        assert f"]({name})" in text
        image = matplotlib.image.imread(sweep / name)
        assert image.shape[0] > 100 and image.shape[1] > 100 and image.std() > 0


def test_a_full_disk_keeps_the_last_report_whole(tmp_path: Path, capsys, monkeypatch) -> None:
    """Each table and picture is written aside and renamed: a failed write leaves the old file, not half of one."""
    import errno

    import fedlight.atomic_files

    sweep = _sweep(tmp_path)
    assert main(["report", str(sweep)]) == 0
    before = {p.name: p.read_bytes() for p in sweep.iterdir() if p.is_file()}
    capsys.readouterr()

    def full(path: Path, data: bytes) -> None:
        path.write_bytes(data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fedlight.atomic_files, "write_synced", full)
    assert main(["report", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "run fedlight report again" in err
    assert {p.name: p.read_bytes() for p in sweep.iterdir() if p.is_file()} == before  # no temporary file left


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path: Path, monkeypatch) -> None:
    """Two `fedlight report --out X` at once: a shared temporary name let one rename the other's half-written
    bytes into place."""
    import fedlight.atomic_files as atomic

    seen, real = [], atomic.write_synced

    def spy(path: Path, data: bytes) -> None:
        seen.append(path)
        real(path, data)

    monkeypatch.setattr(atomic, "write_synced", spy)
    target = tmp_path / "report.md"
    atomic.atomic_write_bytes(target, b"first")
    atomic.atomic_write_bytes(target, b"second")
    assert seen[0] != seen[1] and all(p.parent == tmp_path and p.name.startswith(".report.md.")
                                      and p.name.endswith(".tmp") for p in seen), seen
    assert target.read_bytes() == b"second" and [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_report_on_a_list_of_run_folders(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    out = tmp_path / "cmp"
    assert main(["report", str(sweep / "runs/0000"), str(sweep / "runs/0003"), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "| partition.alpha | seeds |" in text
    assert "| 0.1 | 1 | 50.00 (init 10.00) | 40.00 (init 10.00) | 1.00 |" in text


def test_each_run_shows_the_commits_its_code_was_at(tmp_path: Path) -> None:
    """A run resumed on other code shows both commits; a run that records none (no git checkout, an
    older fedlight, a hand-edited provenance) shows '-' and still reports."""
    sweep = _sweep(tmp_path)
    segments = [{"commit": "a" * 40, "dirty": False}, {"commit": "a" * 40, "dirty": False},
                {"commit": "b" * 40, "dirty": True}]
    for run, provenance in (("0000", {"commit": "b" * 40, "segments": segments}),
                            ("0001", {"commit": None, "segments": [{"commit": None, "dirty": None}]}),
                            ("0002", "a string"), ("0003", {"segments": {"commit": "c" * 40}})):
        path = sweep / f"runs/{run}/results.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "provenance": provenance}))
    assert [run.commits for run in find_runs([sweep])][:5] == [["a" * 12, "b" * 12 + "+dirty"], [], [], [], []]
    assert main(["report", str(sweep)]) == 0
    rows = [line for line in (sweep / "report.md").read_text().splitlines() if line.startswith("| `runs/")]
    assert rows[0].endswith(f"| 2 | {'a' * 12}, {'b' * 12}+dirty |") and rows[1].endswith("| 2 | - |")
    assert len(rows) == 5 and "| commit |" in (sweep / "report.md").read_text()


def test_report_without_runs_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "no results.json under" in err and err.count("\n") == 1
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_report_without_a_finished_run_is_one_line_naming_the_folder(tmp_path: Path, capsys) -> None:
    """Before, it wrote an empty report (no table, no plot) and exited 0."""
    _write_run(tmp_path / "runs/0000", 1.0, 0, None, None, 1)  # preempted and not yet resumed
    assert main(["report", str(tmp_path / "runs")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"fedlight: error: no finished run under '{tmp_path / 'runs'}' (1 not finished"), line
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["0000"]  # nothing written


def test_report_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """`fedlight report ... | head` whose reader has gone: no BrokenPipeError traceback, exit 141 as a shell
    reports SIGPIPE."""
    import os
    import subprocess
    import sys

    sweep = _sweep(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "fedlight", "report", str(sweep)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader goes before the report's first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err[-2000:]


def test_the_new_test_upload_counts_as_communication(tmp_path: Path) -> None:
    _write_run(tmp_path / "lg", 0.1, 0, 0.5, 0.4, 250_000)
    path = tmp_path / "lg/results.json"
    results = json.loads(path.read_text())
    results["comm"].update(bytes_new_test=100_000, params_new_test=25_000)
    path.write_text(json.dumps(results))
    assert find_runs([tmp_path / "lg"])[0].total_bytes == 4 * 250_000 + 100_000


# ---------------------------------------------------------------- damaged input

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


# ---------------------------------------------------------------- headers, formats, options, plots

def test_headers_name_the_label_fraction_and_never_mix_two(tmp_path: Path) -> None:
    """Today one 'linear probe' column averaged a 10%-label run with a 1%-label one."""
    _write_run(tmp_path / "runs/ten", 0.1, 0, 0.60, 0.50, 1000, label_fraction=0.1)
    _write_run(tmp_path / "runs/one", 0.1, 0, 0.40, 0.30, 1000, label_fraction=0.01)
    assert main(["report", str(tmp_path / "runs")]) == 0
    text = (tmp_path / "runs/report.md").read_text()
    assert ("| eval.label_fraction | seeds | linear probe, 10% labels (%) | linear probe, 1% labels (%) | "
            "kNN, 10% labels (%) | kNN, 1% labels (%) | MB communicated |") in text
    assert "| 0.1 | 1 | 60.00 (init 10.00) | - | 50.00 (init 10.00) | - | 0.00 |" in text
    assert "| 0.01 | 1 | - | 40.00 (init 10.00) | - | 30.00 (init 10.00) | 0.00 |" in text


def test_csv_and_latex_tables(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    assert main(["report", str(sweep)]) == 0
    rows = list(csv.reader((sweep / "report.csv").read_text().splitlines()))
    assert rows[0] == ["partition.alpha", "seeds", "linear probe, 100% labels mean (%)",
                       "linear probe, 100% labels std (%)", "linear probe, 100% labels random init (%)",
                       "kNN, 100% labels mean (%)", "kNN, 100% labels std (%)", "kNN, 100% labels random init (%)",
                       "MB communicated", "MB up", "below random init", "seeds without a value"]
    assert rows[1][:9] == ["0.1", "3", "60.0000", "10.0000", "10.0000", "42.0000", "3.4641", "10.0000", "1.0000"]
    assert rows[2][:9] == ["1.0", "2", "85.0000", "7.0711", "10.0000", "70.0000", "0.0000", "10.0000", "2.5000"]
    assert rows[1][10:] == rows[2][10:] == ["", ""]
    assert (rows[1][9], rows[2][9]) == ("0.5000", "1.2500")  # MB up: half of what went both ways
    tex = (sweep / "report.tex").read_text()
    assert tex.startswith("\\begin{tabular}{llrrrr}\n\\toprule\n") and tex.endswith("\\bottomrule\n\\end{tabular}\n")
    assert "partition.alpha & seeds & linear probe, 100\\% labels (\\%) & kNN, 100\\% labels (\\%)" in tex
    assert "0.1 & 3 & $60.00 \\pm 10.00$ (init 10.00) & $42.00 \\pm 3.46$ (init 10.00) & 1.00 & " in tex


def test_group_by_and_metric_options(tmp_path: Path, capsys) -> None:
    sweep = _sweep(tmp_path)
    out = tmp_path / "by-method"
    assert main(["report", str(sweep), "--group-by", "method.name", "--metric", "knn_acc", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    # all five finished runs in one group, three seeds; kNN only, a seed's runs averaged so that each seed counts
    # once: seed 0 (40 + 70) / 2 = 55, seed 1 55, seed 2 46: mean 52, sd sqrt((9 + 9 + 36) / 2) = 5.20
    assert "| method.name | seeds | kNN, 100% labels (%) | MB communicated |" in text
    assert "| simclr | 3 | 52.00 ± 5.20 (init 10.00) |" in text and "linear probe" not in text
    # the group holds two alphas: a reader is told its runs of one seed were averaged across them
    assert ("- `name = simclr` mixes partition.alpha = 0.1, 1.0: its runs of one seed are averaged as if they were "
            "repeats; --group-by these keys too to keep them apart") in text
    assert sorted(p.name for p in out.glob("*_vs_*")) == ["knn_acc@1_vs_bytes.png", "knn_acc@1_vs_bytes.svg",
                                                          "knn_acc@1_vs_round.png", "knn_acc@1_vs_round.svg",
                                                          "knn_acc@1_vs_upload.png", "knn_acc@1_vs_upload.svg"]
    for bad, fragment in ((["--group-by", "partition.alpah"], "--group-by partition.alpah: not a recipe key"),
                          (["--metric", "f1"], "--metric f1: no finished run measured it; choose from")):
        capsys.readouterr()
        assert main(["report", str(sweep), *bad, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err
        assert fragment in err and err.count("\n") == 1, err
        assert not (tmp_path / "bad").exists()


def test_plots_start_at_random_init_with_integer_rounds_and_the_legend_outside(tmp_path: Path, monkeypatch) -> None:
    from fedlight.report import plots

    runs = find_runs([_sweep(tmp_path)])
    rounds, sent, acc, _ = plots.curve([r for r in runs if r.finished][:3], "knn_acc@1")
    assert rounds.tolist() == [0, 1, 2] and sent[0] == 0 and acc[0] == pytest.approx(0.1)  # baseline, nothing sent
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    (tmp_path / "plots").mkdir()
    done = [r for r in runs if r.finished]
    files = plots.write_plots([((0.1,), done[:3]), ((1.0,), done[3:])], ["partition.alpha"],
                              ["linear_probe_acc@1", "knn_acc@1"], tmp_path / "plots")
    assert len(files) == 2 * len(figures) == 12  # each plot as PNG and SVG: vs round, bytes and upload bytes
    assert all((tmp_path / "plots" / f).stat().st_size > 0 for f in files)
    assert (tmp_path / "plots/knn_acc@1_vs_round.svg").read_text().lstrip().startswith("<?xml")
    for fig in figures:
        ax = fig.axes[0]
        assert ax.get_lines()[0].get_xdata()[0] == 0  # the random-init point
        legend = ax.get_legend()
        assert [t.get_text() for t in legend.get_texts()] == ["alpha = 0.1", "alpha = 1.0"]  # as a reader says it
        assert legend.get_title().get_text() == "mean over seeds; band: ± 1 std over seeds"
        fig.canvas.draw()
        assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # right of the data
    round_axis = figures[0].axes[0]
    assert all(float(t).is_integer() for t in round_axis.get_xticks())


def test_a_group_that_ends_below_its_random_init_is_flagged(tmp_path: Path) -> None:
    """A run that trained its encoder into something worse than random must be visible in every table."""
    _write_run(tmp_path / "runs/0000", 0.1, 0, 0.05, 0.40, 1000)  # probe 5% against a random init of 10%
    _write_run(tmp_path / "runs/0001", 0.1, 1, 0.07, 0.40, 1000)
    assert main(["report", str(tmp_path / "runs")]) == 0
    text = (tmp_path / "runs/report.md").read_text()
    assert "| 2 | 6.00 ± 1.41 (init 10.00; below init) | 40.00 ± 0.00 (init 10.00) |" in text
    rows = list(csv.reader((tmp_path / "runs/report.csv").read_text().splitlines()))
    assert rows[1][-2] == "linear probe, 100% labels"
    assert "\\textbf{$6.00 \\pm 1.41$} (init 10.00; below init)" in (tmp_path / "runs/report.tex").read_text()


def test_legend_names_are_the_keys_last_part_unless_two_share_it() -> None:
    from fedlight.report.arm_groups import legend_names

    assert group_label(["partition.alpha", "method.name"], (0.1, "byol")) == "alpha = 0.1, name = byol"
    assert legend_names(["method.mu", "server.mu", "seed"]) == ["method.mu", "server.mu", "seed"]
    assert group_label([], ()) == "all runs"


@pytest.mark.parametrize("target", ["report.csv", "report.tex", "knn_acc@1_vs_round.png"])
def test_a_report_target_that_is_a_folder_is_one_line_before_any_file(tmp_path: Path, capsys, target: str) -> None:
    sweep = _sweep(tmp_path)
    (sweep / target).mkdir()
    assert main(["report", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and target in err and "Traceback" not in err, err
    assert sorted(p.name for p in sweep.iterdir()) == sorted(["runs", target])  # no plot, no table written


def test_a_metric_name_with_a_slash_gets_a_plot_file_of_its_own(tmp_path: Path) -> None:
    run = tmp_path / "runs/0000"
    _write_run(run, 0.1, 0, 0.5, 0.4, 1000)
    results = json.loads((run / "results.json").read_text())
    for row in [*results["history"], results["final"], results["baseline"]]:
        row["acc/top1"] = 0.3
    (run / "results.json").write_text(json.dumps(results))
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "acc_top1_vs_round.png").is_file()
    assert "](acc_top1_vs_round.png)" in (tmp_path / "out" / "report.md").read_text()


# ---------------------------------------------------------------- grouping: the experiment, arms

def test_runs_that_differ_only_in_how_they_ran_are_one_group(tmp_path: Path) -> None:
    """Today fabric.accelerator auto vs cpu (or another run.* or data.root) split one arm in two."""
    execution = [{"fabric": {"accelerator": "auto", "threads": 2}, "data": {"root": "/a"}},
                 {"fabric": {"accelerator": "cpu", "threads": None}, "data": {"root": "/b"}},
                 {"fabric": {"accelerator": "cpu", "workers": 2}, "data": {"root": "/a", "download": True},
                  "run": {"dir": "x", "client_state": "disk"}}]
    for seed, sections in enumerate(execution):
        _write_run(tmp_path / f"runs/{seed}", 0.1, seed, 0.5, 0.4, 1000, **sections)
    _write_run(tmp_path / "runs/3", 1.0, 0, 0.5, 0.4, 1000, fabric={"accelerator": "gpu"})
    runs = find_runs([tmp_path / "runs"])
    assert grouping_keys(runs, None) == ["partition.alpha"]
    assert grouping_keys(runs[:3], None) == []
    assert main(["report", str(tmp_path / "runs")]) == 0
    text = (tmp_path / "runs/report.md").read_text()
    assert "| partition.alpha | seeds |" in text and "| 0.1 | 3 |" in text and "| 1.0 | 1 |" in text


def test_runs_outside_a_sweeps_arms_are_grouped_by_what_varies(tmp_path: Path) -> None:
    """Every run records ``arm`` (None outside a sweep's arms) and ``loggers``: neither splits a group."""
    for seed, (alpha, loggers) in enumerate([(0.1, ["tensorboard"]), (0.1, ["csv"]), (1.0, ["tensorboard"])]):
        _write_run(tmp_path / f"runs/{seed}", alpha, seed, 0.5, 0.4, 1000, arm=None, loggers=loggers)
    runs = find_runs([tmp_path / "runs"])
    keys = grouping_keys(runs, None)
    assert keys == ["partition.alpha"]
    assert [group_label(keys, values) for values, _ in group_runs(runs, keys)] == ["alpha = 0.1", "alpha = 1.0"]


def test_a_key_a_group_does_not_define_is_never_shown_as_none(tmp_path: Path) -> None:
    """Today a BYOL group read 'name = byol, temperature = None' with a '-' cell."""
    _write_run(tmp_path / "runs/0", 0.1, 0, 0.5, 0.4, 1000, method={"name": "simclr", "temperature": 0.5})
    _write_run(tmp_path / "runs/1", 0.1, 0, 0.6, 0.4, 1000, method={"name": "byol", "momentum": 0.99})
    runs = find_runs([tmp_path / "runs"])
    keys = grouping_keys(runs, None)
    assert keys == ["method.name", "method.temperature", "method.momentum"]
    assert [group_label(keys, values) for values, _ in group_runs(runs, keys)] == [
        "name = simclr, temperature = 0.5", "name = byol, momentum = 0.99"]
    assert main(["report", str(tmp_path / "runs")]) == 0
    text = (tmp_path / "runs/report.md").read_text()
    assert "| simclr | 0.5 |  | 1 |" in text and "| byol |  | 0.99 | 1 |" in text
    assert list(csv.reader((tmp_path / "runs/report.csv").read_text().splitlines()))[2][:3] == ["byol", "", "0.99"]


def test_runs_that_name_their_arm_are_grouped_and_labelled_by_it(tmp_path: Path) -> None:
    for seed in range(2):
        _write_run(tmp_path / f"runs/s{seed}", 0.1, seed, 0.5, 0.4, 1000, arm="simclr",
                   method={"name": "simclr", "temperature": 0.5}, fabric={"accelerator": ("cpu", "auto")[seed]})
        _write_run(tmp_path / f"runs/b{seed}", 0.1, seed, 0.6, 0.4, 1000, arm="byol",
                   method={"name": "byol", "momentum": 0.99})
    runs = find_runs([tmp_path / "runs"])
    assert grouping_keys(runs, None) == ["arm"]
    groups = group_runs(runs, ["arm"])
    assert [(group_label(["arm"], v), len(members)) for v, members in groups] == [("byol", 2), ("simclr", 2)]
    # a key that still varies inside an arm also groups, named after the arm
    _write_run(tmp_path / "runs/s9", 1.0, 9, 0.5, 0.4, 1000, arm="simclr",
               method={"name": "simclr", "temperature": 0.5})
    runs = find_runs([tmp_path / "runs"])
    keys = grouping_keys(runs, None)
    assert keys == ["arm", "partition.alpha"]
    assert [group_label(keys, v) for v, _ in group_runs(runs, keys)] == [
        "byol, alpha = 0.1", "simclr, alpha = 0.1", "simclr, alpha = 1.0"]
    # a run without an arm: grouped by the experiment keys, arm among them
    _write_run(tmp_path / "runs/z", 0.1, 0, 0.5, 0.4, 1000, method={"name": "simclr", "temperature": 0.5})
    keys = grouping_keys(find_runs([tmp_path / "runs"]), None)
    assert keys == ["partition.alpha", "method.name", "method.momentum", "arm", "method.temperature"]  # recipe order


# ---------------------------------------------------------------- paired comparison (compare.md)

# arm -> {seed: final kNN}; against base, per seed: ahead +2, +3, +4 (mean 3, sd 1), behind -2, -3, -4,
# unsure +1, -1, +3 (mean 1, sd 2); short shares only seeds 0 and 1 with base
ARMS = {"base": {0: 0.40, 1: 0.42, 2: 0.44}, "ahead": {0: 0.42, 1: 0.45, 2: 0.48},
        "behind": {0: 0.38, 1: 0.39, 2: 0.40}, "unsure": {0: 0.41, 1: 0.41, 2: 0.47},
        "short": {0: 0.50, 1: 0.50, 7: 0.50}}
HALF = 4.302652729911275 / 3 ** 0.5  # t(0.975, 2 df) x sd 1 / sqrt(3) = 2.484: 3 +- 2.48 is [0.52, 5.48]


def _arms(tmp_path: Path) -> Path:
    for i, (arm, knn) in enumerate(ARMS.items()):
        for seed, value in knn.items():
            _write_run(tmp_path / f"runs/{i}_{arm}_{seed}", 0.1, seed, 0.5, value, 1000, arm=arm)
    # ahead's seed 0 once more, on another device: 0.41 and 0.43 count once, as their mean 0.42
    shutil.rmtree(tmp_path / "runs/1_ahead_0")
    for device, value in (("cpu", 0.41), ("auto", 0.43)):
        _write_run(tmp_path / f"runs/1_ahead_0_{device}", 0.1, 0, 0.5, value, 1000, arm="ahead",
                   fabric={"accelerator": device})
    return tmp_path / "runs"


def test_paired_comparison_by_hand(tmp_path: Path, capsys) -> None:
    runs = _arms(tmp_path)
    assert main(["report", str(runs), "--metric", "knn_acc", "--margin", "5"]) == 0
    text = (runs / "compare.md").read_text()
    assert text in capsys.readouterr().out  # printed too
    assert ("| arm | seeds | mean ± sd over seeds (%) | MB up / down | pairs | difference (points) | 95% interval | "
            "verdict | after Holm | within ±5 | after Holm | seeds to decide |") in text
    assert "| base | 3 | 42.00 ± 2.00 (init 10.00) | 0.00 / 0.00 | reference |  |  |  |  |  |  |  |" in text
    assert (f"| ahead | 3 | 45.00 ± 3.00 (init 10.00) | 0.00 / 0.00 | 3 | +3.00 | [+{3 - HALF:.2f}, +{3 + HALF:.2f}] "
            "| ahead") in text
    # 6 tests in the file (3 arms x directional and TOST), the smallest p 0.035 (below): Holm keeps none
    assert ("| ahead | 3 | 45.00 ± 3.00 (init 10.00) | 0.00 / 0.00 | 3 | +3.00 | [+0.52, +5.48] | ahead | can't tell | "
            "within ±5 | can't tell |  |") in text
    assert ("| behind | 3 | 39.00 ± 1.00 (init 10.00) | 0.00 / 0.00 | 3 | -3.00 | [-5.48, -0.52] | behind | can't tell | "
            "within ±5 | can't tell |  |") in text
    # mean 1, sd 2: 1 +- 2 x 2.484; the 90% interval 1 +- 2 x 2.920 / sqrt(3) = [-2.37, 4.37] is inside +-5.
    # Seeds to decide: the first n with t(0.975, n - 1) x 2 / sqrt(n) <= 1: t(16 df) = 2.120 > sqrt(17) / 2 = 2.062,
    # t(17 df) = 2.110 <= sqrt(18) / 2 = 2.121, so 18, 15 more than the 3 pairs
    assert ("| unsure | 3 | 43.00 ± 3.46 (init 10.00) | 0.00 / 0.00 | 3 | +1.00 | [-3.97, +5.97] | can't tell | "
            "can't tell | within ±5 | can't tell | about 18 (15 more) |") in text
    assert "| short | 3 | 50.00 ± 0.00 (init 10.00) | 0.00 / 0.00 | 2 |  |  | too few pairs |  |  |  |  |" in text
    assert "- `short`: left out of the pairing: seed 7 only in `short`; seed 2 only in `base`" in text
    assert "- `short`: 2 pairs with `base`, fewer than the 3 a paired interval needs: run more seeds of both" in text
    assert "- `ahead`: seed 0 ran more than once; each counts once, as the mean of its runs" in text
    report = (runs / "report.md").read_text()
    assert "compare.md" in report and "| ahead | 3 | 45.00 ± 3.00 (init 10.00) |" in report  # seeds, not runs


def test_a_margin_the_interval_lies_outside_and_another_reference(tmp_path: Path) -> None:
    runs = _arms(tmp_path)
    assert main(["report", str(runs), "--metric", "knn_acc", "--margin", "0.2", "--reference", "ahead"]) == 0
    text = (runs / "compare.md").read_text()
    assert "| ahead | 3 | 45.00 ± 3.00 (init 10.00) | 0.00 / 0.00 | reference |" in text
    # base - ahead: -2, -3, -4; its 95% interval [-5.48, -0.52] lies wholly outside +-0.2
    assert ("| base | 3 | 42.00 ± 2.00 (init 10.00) | 0.00 / 0.00 | 3 | -3.00 | [-5.48, -0.52] | behind | "
            "can't tell | not within ±0.2 | can't tell |  |") in text
    # unsure - ahead: -1, -4, -1 (mean -2, sd sqrt(3)): -2 +- t(0.975, 2 df) x sqrt(3) / sqrt(3) = [-6.30, +2.30];
    # TOST at 0.2 cannot tell either. Seeds to decide: t(4 df) x sqrt(3) / sqrt(5) = 2.150 > 2, t(5 df) x sqrt(3) /
    # sqrt(6) = 1.818 <= 2: 6
    assert ("| unsure | 3 | 43.00 ± 3.46 (init 10.00) | 0.00 / 0.00 | 3 | -2.00 | [-6.30, +2.30] | can't tell | "
            "can't tell | can't tell | can't tell | about 6 (3 more) |") in text


def test_holm_over_the_file_keeps_only_the_strong_verdicts(tmp_path: Path) -> None:
    """Three arms against `base`, paired differences (points) far +10/+11/+12, ahead +2/+3/+4, unsure -2/+1/+4.
    With 2 df the two-sided p of t is 1 - t / sqrt(2 + t^2): far t = 11 / (1 / sqrt 3) = 19.05, p 0.0027; ahead
    t = 5.20, p 0.035; unsure t = 1 / (3 / sqrt 3) = 0.58, p 0.62. Holm over the 3: 3 x 0.0027 = 0.008 keeps far,
    2 x 0.035 = 0.070 does not keep ahead, unsure stays open."""
    for arm, knn in (("base", (0.40, 0.42, 0.44)), ("far", (0.50, 0.53, 0.56)), ("ahead", (0.42, 0.45, 0.48)),
                     ("unsure", (0.38, 0.43, 0.48))):
        for seed, value in enumerate(knn):
            _write_run(tmp_path / f"runs/{arm}{seed}", 0.1, seed, 0.5, value, 1000, arm=arm)
    assert main(["report", str(tmp_path / "runs"), "--metric", "knn_acc", "--reference", "base"]) == 0
    rows = {r.split(" | ")[0].strip("| "): r.split(" | ")[7:9] for r in
            (tmp_path / "runs/compare.md").read_text().splitlines() if r.startswith("| ") and "---" not in r}
    assert rows["far"] == ["ahead", "ahead"] and rows["ahead"] == ["ahead", "can't tell"]
    assert rows["unsure"] == ["can't tell", "can't tell"]
    assert "all 3 tests of this file" in (tmp_path / "runs/compare.md").read_text()


@pytest.mark.parametrize("flags, fragment", [
    (["--reference", "nope"], "--reference nope: no such arm among these runs; choose one of: base; ahead; behind; "
                              "unsure; short"),
    (["--margin", "0"], "--margin 0: an equivalence margin is a number of percentage points above 0"),
    (["--margin", "nan"], "--margin nan: an equivalence margin")])
def test_a_bad_reference_or_margin_is_one_line_and_no_report(tmp_path: Path, capsys, flags, fragment) -> None:
    runs = _arms(tmp_path)
    assert main(["report", str(runs), "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_one_group_has_nothing_to_compare(tmp_path: Path) -> None:
    _write_run(tmp_path / "runs/0", 0.1, 0, 0.5, 0.4, 1000)
    assert main(["report", str(tmp_path / "runs")]) == 0
    assert "One group (all runs): nothing to compare" in (tmp_path / "runs/compare.md").read_text()


def _set_final(folder: Path, **final: float) -> None:
    """Give the run in ``folder`` these final metrics (beside its probe and kNN)."""
    results = json.loads((folder / "results.json").read_text())
    results["final"].update(final)
    (folder / "results.json").write_text(json.dumps(results))


def test_lower_is_better_on_an_adversarys_auc_and_spreads_are_no_metric(tmp_path: Path) -> None:
    """LG-FedAvg's adversarial term lowers the adversary's AUC: lower is the better side, and ending below the
    random init is its aim, not a failure; a spread over clients (``*_std``) gets no column or verdict."""
    for arm, aucs in (("noadv", (0.95, 0.96, 0.97)), ("fair", (0.52, 0.50, 0.54))):
        for seed, auc in enumerate(aucs):
            folder = tmp_path / f"runs/{arm}{seed}"
            _write_run(folder, 0.1, seed, 0.5, 0.4, 1000, arm=arm)
            _set_final(folder, adv_auc=auc, local_test_acc_std=0.05)
            results = json.loads((folder / "results.json").read_text())
            results["baseline"]["adv_auc"] = 0.6
            (folder / "results.json").write_text(json.dumps(results))
    assert main(["report", str(tmp_path / "runs"), "--reference", "noadv"]) == 0
    text = (tmp_path / "runs/compare.md").read_text()
    # fair - noadv: -43, -46, -43 points, all on the better side
    assert "| fair | 3 | 52.00 ± 2.00 (init 60.00) | 0.00 / 0.00 | 3 | -44.00 |" in text and "| ahead |" in text
    assert "- Lower is better on adv_auc: `ahead` is a difference below 0." in text
    assert "`after Holm` keeps it only where its Holm-adjusted p over all 3 tests of this file" in text  # 3 metrics
    assert "; below init)" not in (tmp_path / "runs/report.md").read_text()
    assert "_std" not in (tmp_path / "runs/report.md").read_text() + text


def test_a_seed_without_a_value_is_named_not_hidden(tmp_path: Path) -> None:
    """A diverged seed (NaN) is left out of its arm's mean, and the tables say so instead of counting it."""
    for arm, knn in (("base", (0.40, 0.42, 0.44)), ("arm", (0.42, 0.45, float("nan")))):
        for seed, value in enumerate(knn):
            _write_run(tmp_path / f"runs/{arm}{seed}", 0.1, seed, 0.5, value, 1000, arm=arm)
    assert main(["report", str(tmp_path / "runs"), "--metric", "knn_acc", "--reference", "base"]) == 0
    report = (tmp_path / "runs/report.md").read_text()
    assert "| arm | 3 | 43.50 ± 2.12 (init 10.00; 1 seed without a value) |" in report
    runs_table = report.split("## Runs")[1]  # the diverged run's own row: no "nan", as in the group's cell
    assert "| `arm2` | arm | 2 | - (1 seed without a value) |" in runs_table and "nan" not in runs_table
    text = (tmp_path / "runs/compare.md").read_text()
    assert "- `arm`: left out of the pairing: seed 2 ran in `arm` without a finite value (NaN, or not measured)" in text
    assert ("- `arm`: 2 pairs with `base`, fewer than the 3 a paired interval needs: seeds without a finite value "
            "cannot be paired; see why those runs have none") in text
    rows = list(csv.reader((tmp_path / "runs/report.csv").read_text().splitlines()))
    assert {row[0]: row[-1] for row in rows[1:]} == {"arm": "kNN, 100% labels: 1", "base": ""}


def test_a_metric_an_arm_never_measures_is_not_a_missing_value(tmp_path: Path) -> None:
    """FedAvg has no adversary's AUC: its cell is empty, not "3 seeds without a value", and compare.md gives it
    no row; an arm whose every seed diverged (NaN) says how many seeds have no value; a diverged seed leaves the
    plot's line on the other seeds."""
    from fedlight.report.plots import curve
    nan = float("nan")
    for arm, knn in (("base", (0.40, 0.42, 0.44)), ("diverged", (nan, nan, nan)), ("fedavg", (0.41, 0.43, 0.45)),
                     ("partly", (0.40, 0.46, nan))):
        for seed, value in enumerate(knn):
            _write_run(tmp_path / f"runs/{arm}{seed}", 0.1, seed, 0.5, value, 1000, arm=arm)
            if arm != "fedavg":
                _set_final(tmp_path / f"runs/{arm}{seed}", adv_auc=0.5 + seed / 100)
    assert main(["report", str(tmp_path / "runs"), "--reference", "base"]) == 0
    report = (tmp_path / "runs/report.md").read_text()
    assert "| - (3 seeds without a value) |" in report
    rows = list(csv.reader((tmp_path / "runs/report.csv").read_text().splitlines()))
    assert {row[0]: row[-1] for row in rows[1:]} == {
        "base": "", "diverged": "kNN, 100% labels: 3", "fedavg": "", "partly": "kNN, 100% labels: 1"}
    auc = (tmp_path / "runs/compare.md").read_text().split("## adv_auc")[1]
    assert "- No run of `fedavg` measures adv_auc: no row." in auc and "| fedavg |" not in auc
    assert "seeds 0, 1, 2 ran in" not in auc
    partly = [r for r in find_runs([tmp_path / "runs"]) if r.keys["arm"] == "partly"]
    assert curve(partly, "knn_acc@1")[2][-1] == pytest.approx(0.43)  # seeds 0 and 1; seed 2 diverged


def test_a_seed_run_twice_counts_once_in_the_plots_too(tmp_path: Path) -> None:
    from fedlight.report.plots import curve
    runs = find_runs([_arms(tmp_path)])
    ahead = [r for r in runs if r.keys["arm"] == "ahead"]  # seed 0 twice (0.41, 0.43), seeds 1 and 2 once
    rounds, _, acc, std = curve(ahead, "knn_acc@1")
    assert list(rounds) == [0, 1, 2]
    assert acc[-1] == pytest.approx(0.45) and std[-1] == pytest.approx(0.03)  # as the table: 45.00 ± 3.00


def test_latex_escapes_a_value_not_its_markdown_cell(tmp_path: Path) -> None:
    for seed in (0, 1):
        _write_run(tmp_path / f"runs/{seed}", 0.1, seed, 0.5, 0.4, 1000, arm="a|b")
    assert main(["report", str(tmp_path / "runs")]) == 0
    tex = (tmp_path / "runs/report.tex").read_text()
    assert "a|b & 2 &" in tex and "textbackslash" not in tex
    assert "| a\\|b | 2 |" in (tmp_path / "runs/report.md").read_text()


def test_an_arm_as_reference_over_a_grid_is_compared_cell_by_cell(tmp_path: Path) -> None:
    """Arms x --grid: `--reference base` pairs each arm with base at the same alpha, never across alphas."""
    knn = {("base", 0.1): 0.40, ("new", 0.1): 0.43, ("base", 1.0): 0.70, ("new", 1.0): 0.69, ("new", 0.5): 0.5}
    for (arm, alpha), value in knn.items():
        for seed, step in enumerate((0.0, 0.01, 0.03)):  # new - base: +3, +3, +3 at 0.1; -1, -1, -1 at 1.0
            _write_run(tmp_path / f"runs/{arm}_{alpha}_{seed}", alpha, seed, 0.5, value + step, 1000, arm=arm)
    assert main(["report", str(tmp_path / "runs"), "--metric", "knn_acc", "--reference", "base"]) == 0
    text = (tmp_path / "runs/compare.md").read_text()
    assert "Each arm against `base` at the same `partition.alpha`, a table per value (`--reference` chooses)" in text
    at_01 = text.split("## kNN, 100% labels: alpha = 0.1")[1].split("##")[0]
    assert "| base, alpha = 0.1 | 3 |" in at_01
    assert "| new, alpha = 0.1 | 3 | 44.33 ± 1.53 (init 10.00) | 0.00 / 0.00 | 3 | +3.00 |" in at_01
    assert "alpha = 1.0" not in at_01
    at_1 = text.split("## kNN, 100% labels: alpha = 1.0")[1]
    assert "| new, alpha = 1.0 | 3 | 70.33 ± 1.53 (init 10.00) | 0.00 / 0.00 | 3 | -1.00 |" in at_1
    assert "- no `base` runs at alpha = 0.5: its groups are not compared" in text
    assert "## kNN, 100% labels: alpha = 0.5" not in text
    # the arm need not be the first key to group by
    assert main(["report", str(tmp_path / "runs"), "--metric", "knn_acc", "--reference", "base",
                 "--group-by", "partition.alpha,arm"]) == 0
    text = (tmp_path / "runs/compare.md").read_text()
    assert "| alpha = 0.1, new | 3 | 44.33 ± 1.53 (init 10.00) | 0.00 / 0.00 | 3 | +3.00 |" in text
    assert "| alpha = 1.0, new | 3 | 70.33 ± 1.53 (init 10.00) | 0.00 / 0.00 | 3 | -1.00 |" in text


def test_an_arm_reference_over_a_grid_one_arm_lacks_is_refused_not_empty(tmp_path: Path) -> None:
    """FedProx's mu gridded beside FedAvg (which has no mu): no cell pairs them, so the refusal stays."""
    for seed, alpha in ((s, a) for s in range(3) for a in (0.1, 1.0)):
        _write_run(tmp_path / f"runs/fedavg{alpha}_{seed}", alpha, seed, 0.5, 0.4, 1000, arm="fedavg")
        for mu in (0.01, 0.1):
            _write_run(tmp_path / f"runs/fedprox{mu}_{alpha}_{seed}", alpha, seed, 0.5, 0.4, 1000, arm="fedprox",
                       method={"name": "fedprox", "mu": mu})
    assert main(["report", str(tmp_path / "runs"), "--reference", "fedavg"]) == 2


def test_readings_are_compared_in_their_own_units_and_plotted_when_named(tmp_path: Path) -> None:
    """A label-free reading (RankMe) is no percentage: shown only where --metric names it, its numbers as they
    are, its differences in its own units; the client kNN columns are accuracies, shown by default."""
    for arm, ranks in (("base", (10.0, 12.0, 14.0)), ("wide", (20.0, 21.0, 25.0))):
        for seed, rank in enumerate(ranks):
            folder = tmp_path / f"runs/{arm}{seed}"
            _write_run(folder, 0.1, seed, 0.5, 0.4, 1000, arm=arm)
            results = json.loads((folder / "results.json").read_text())
            for row in results["history"]:
                row.update(rankme=rank - 2 + row["round"], client_knn_acc=0.3, client_knn_acc_worst10=0.2)
            results["final"].update(rankme=rank, client_knn_acc=0.3, client_knn_acc_worst10=0.2,
                                    client_knn_acc_std=0.05)
            results["baseline"].update(rankme=3.0, client_knn_acc=0.1, client_knn_acc_worst10=0.05)
            (folder / "results.json").write_text(json.dumps(results))
    out = tmp_path / "runs"
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "kNN, worst 10% of clients (%)" in report and "RankMe" not in report
    assert main(["report", str(out), "--metric", "rankme", "--metric", "client_knn_acc_worst10"]) == 0
    text = (out / "compare.md").read_text()
    # wide - base: +10, +9, +11: mean +10 (not +1000: a count, not a fraction)
    assert "| base | 3 | 12.0000 ± 2.0000 (init 3.0000) | 0.00 / 0.00 | reference |" in text
    assert "| wide | 3 | 22.0000 ± 2.6458 (init 3.0000) | 0.00 / 0.00 | 3 | +10.0000 |" in text
    assert "| arm | seeds | mean ± sd over seeds | MB up / down | pairs | difference |" in text
    assert (out / "rankme_vs_round.png").is_file() and (out / "client_knn_acc_worst10_vs_round.png").is_file()
