"""A sweep refuses what `fit` refuses, before it writes anything; escaped interpolations survive
a sweep; `--recipe` finds the file it names; absurd values are refused or clamped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedlight.cli import main

REPO = Path(__file__).resolve().parents[1]
FMNIST = "/usr/share/datasets/fashion-mnist"  # where fit finds the data the sweep could not
LG = ["method.name=lg", "method.objective=supervised"]


def _errors(capsys) -> list[str]:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(line.startswith("fedlight: error: ") for line in lines), err
    return lines


@pytest.mark.parametrize(("args", "bad_task", "fragment"), [
    # the data check (the data is on this machine): fit's take_subset refuses it
    (["--grid", "data.subset=500,5000"], "data.subset=5000 seed=3", "'data.subset' is 5000 but the dataset has 1200"),
    # the method's constructor: LG's layer names
    ([*LG, "--grid", "method.global_layers=[classifier],[no_such_layer]"], "method.global_layers=[no_such_layer] seed=3",
     "method.global_layers entry 'no_such_layer'"),
    # data that is not on this machine: the constructor still runs, against the dataset's shape
    ([*LG, "data.name=fashion_mnist", "data.root=/no/such/root", "--grid",
      "method.global_layers=[classifier],[no_such_layer]"], "method.global_layers=[no_such_layer] seed=3",
     "method.global_layers entry 'no_such_layer'"),
    # the new device against the test split
    (["new_device.rotation=90", "new_device.train=10", "--grid", "new_device.test=10,301"], "new_device.test=301 seed=3",
     "'new_device.test' is 301 but the test split has 300"),
])
def test_a_sweep_refuses_each_task_fit_would_refuse(tmp_path: Path, tiny_recipe: Path, capsys, args: list[str],
                                                    bad_task: str, fragment: str) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), *args, "--out", str(out)]) == 2
    (line,) = _errors(capsys)
    assert f"({bad_task})" in line and fragment in line, line
    assert not out.exists()
    # fit refuses the same task with the same words (the same check, not a copy of it)
    task = [a.replace("/no/such/root", FMNIST) for a in args if a != "--grid" and "," not in a] + bad_task.split()
    assert main(["fit", "--recipe", str(tiny_recipe), *task]) == 2
    (fit_line,) = _errors(capsys)
    assert fragment in fit_line and not (tiny_recipe.parent / "run").exists()


def test_each_problem_is_one_line_naming_its_tasks(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(tiny_recipe), *LG, "--grid", "data.subset=500,5000",
                 "--grid", "method.global_layers=[classifier],[no_such_layer]", "--out", str(out)]) == 2
    lines = _errors(capsys)
    assert len(lines) == 2, lines
    layers = next(line for line in lines if "global_layers entry" in line)
    (subset,) = set(lines) - {layers}
    assert "tasks 2 (data.subset=5000 method.global_layers=[classifier] seed=3), 3 (" in subset, subset
    assert "'data.subset' is 5000" in subset
    assert "task 1 (data.subset=500 method.global_layers=[no_such_layer] seed=3): " in layers  # 3 fails on its data first
    assert not out.exists()


def test_an_escaped_interpolation_stays_literal_in_a_task_recipe(tmp_path: Path, tiny_recipe: Path) -> None:
    """fit reads '\\${seed}' as the text '${seed}'; the task recipe a sweep writes must too (not
    the seed, nor an error), and a re-run sees the same sweep."""
    from fedlight.config import load_recipe

    base = tmp_path / "base.yaml"
    base.write_text(tiny_recipe.read_text() + 'name: "lit\\\\${seed}"\ndata: {root: "/data/\\\\${seed}\\\\\\\\${seed}"}\n')
    fit_sees = load_recipe(base)
    assert (fit_sees.name, fit_sees.data.root) == ("lit${seed}", "/data/${seed}\\3")
    out = tmp_path / "sweep"
    assert main(["sweep", "--recipe", str(base), "--grid", "partition.alpha=0.5,5", "--out", str(out)]) == 0
    for written in sorted((out / "recipes").glob("*.yaml")):
        task = load_recipe(written)  # as `fedlight fit --recipe <task recipe>` reads it
        assert (task.name, task.data.root) == (fit_sees.name, fit_sees.data.root)
    assert main(["sweep", "--recipe", str(base), "--grid", "partition.alpha=0.5,5", "--out", str(out)]) == 0


# ---------------------------------------------------------------- local sweeps and collisions

def _fake_sbatch(tmp_path: Path, monkeypatch) -> None:
    """An ``sbatch`` on PATH that accepts anything and answers a new job id each time (its PID)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho $$\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_two_sweeps_at_once_keep_each_others_manifest_entries(tmp_path: Path, tiny_recipe: Path, monkeypatch,
                                                             capsys) -> None:
    """Sweep B runs to its end while sweep A reads its tasks (after A read the manifest, before A
    writes it): A's manifest must keep B's submission, and A submits no task B already did."""
    import fedlight.sweep.command as command

    _fake_sbatch(tmp_path, monkeypatch)
    out = tmp_path / "sweep"
    sweep = ["sweep", "--recipe", str(tiny_recipe), "--grid", "partition.alpha=0.5,5", "--out", str(out), "--submit"]
    real_load, calls = command.load_recipe, []

    def load_while_another_sweep_runs(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # A's first task (the first call is the base recipe): B runs now, start to end
            monkeypatch.setattr(command, "load_recipe", real_load)
            assert main(sweep) == 0
            calls.append(capsys.readouterr().out.split("submitted array job ")[1].split()[0])  # B's job id
            monkeypatch.setattr(command, "load_recipe", load_while_another_sweep_runs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(command, "load_recipe", load_while_another_sweep_runs)
    assert main(sweep) == 0
    submissions = json.loads((out / "manifest.json").read_text())["submissions"]
    assert [(s["job_id"], s["tasks"]) for s in submissions] == [(calls[2], [0, 1])], submissions  # B's, kept
    # and A found nothing left to submit
    assert "0 to submit now" in capsys.readouterr().out


def test_a_task_whose_run_folder_is_in_use_names_the_other_run(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    from fedlight.engine.run.folder_lock import FolderLock as _Lock
    from fedlight.engine.run.run_folder import LOCK

    out = tmp_path / "sweep"
    sweep = ["sweep", "--recipe", str(tiny_recipe), "--out", str(out)]
    assert main(sweep) == 0  # written, not run
    run_dir = out / "runs" / "seed=3"
    run_dir.mkdir(parents=True)
    lock = _Lock.acquire(run_dir / LOCK, run_dir)  # as a fedlight fit still running there holds it
    try:
        assert main([*sweep, "--executor", "local"]) == 1
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert f"task 0 seed=3 failed (exit 2): run folder '{run_dir}' is in use by another fedlight run (PID {os.getpid()})" in err, err
    assert "run the same command to retry" in err.splitlines()[-1]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie waiting for its parent (init here) to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_local_sweep_leaves_no_task_running(tmp_path: Path, tiny_recipe: Path, signum: int) -> None:
    from fedlight.engine.run.run_folder import LOCK

    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    sweep = subprocess.Popen([sys.executable, "-m", "fedlight", "sweep", "--recipe", str(tiny_recipe), "--out", str(out),
                              "--executor", "local", "rounds=1000", "eval.every=1000", "eval.projector_samples=0"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    lock = out / "runs" / "seed=3" / LOCK
    deadline = time.monotonic() + 300  # bounds the wait for the task to start (imports), times nothing
    while not (lock.is_file() and lock.read_text().strip()) and time.monotonic() < deadline:
        assert sweep.poll() is None, "the sweep ended before its task started"
        time.sleep(0.2)
    task = int(lock.read_text().split()[0])
    assert _alive(task)
    sweep.send_signal(signum)
    sweep.wait()
    deadline = time.monotonic() + 120  # the task checkpoints at its next client, then exits
    while _alive(task) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(task):
        os.kill(task, signal.SIGKILL)
        pytest.fail(f"task process {task} still ran after its sweep got signal {signum}")


# ---------------------------------------------------------------- silent surprises

def test_recipe_name_takes_the_local_file_before_the_shipped_one(tmp_path: Path, tiny_recipe: Path, monkeypatch) -> None:
    """The README: a file in the current folder wins over a shipped recipe of the same name."""
    from fedlight.config.bundled import bundled_recipes, resolve_recipe

    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart_fmnist.yaml").write_text(tiny_recipe.read_text())
    assert "quickstart_fmnist" in bundled_recipes()
    assert Path(resolve_recipe("quickstart_fmnist")).resolve() == tmp_path / "quickstart_fmnist.yaml"
    assert Path(resolve_recipe("quickstart_fmnist.yaml")).resolve() == tmp_path / "quickstart_fmnist.yaml"
    assert resolve_recipe("sofed_cifar10") == str(bundled_recipes()["sofed_cifar10"])  # none here: the shipped one


def test_a_missing_recipe_path_suggests_the_shipped_recipe_of_its_name(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--recipe", "recipes/sofed_cifar10.yaml"]) == 2
    (line,) = _errors(capsys)
    assert "'recipes/sofed_cifar10.yaml' not found" in line and "--recipe sofed_cifar10" in line, line


@pytest.mark.parametrize(("override", "key"), [
    (f"seed={2**80}", "'seed' must be in [0, 2**63 - 1"),
    ("partition.alpha=1e-300", "'partition.alpha' must be >= 0.001"),
    ("data.test_subset=1", "'data.test_subset' is 1, fewer test images than the 10 classes"),
])
def test_a_value_that_cannot_mean_anything_is_refused(tiny_recipe: Path, capsys, override: str, key: str) -> None:
    assert main(["fit", "--recipe", str(tiny_recipe), override]) == 2
    (line,) = _errors(capsys)
    assert key in line, line
    assert not (tiny_recipe.parent / "run").exists()


def test_tiny_alphas_draw_among_the_open_clients() -> None:
    """At alpha 0.001-0.01 a Dirichlet draw can be exactly 0 on every client still short of its share
    (float64 underflow): the old code divided 0 by 0 (a RuntimeWarning) and cut the class at NaN,
    which handed the whole class to the last client, full or not, instead of a drawn open one."""
    import warnings

    import numpy as np

    from fedlight.data.partition import dirichlet

    labels = np.repeat(np.arange(10), 120)
    for alpha in (0.001, 0.01):
        for seed in range(10):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # 0 / 0
                parts = dirichlet(labels, 10, np.random.default_rng(seed), alpha, min_size=0)
            assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels))), (alpha, seed)


@pytest.mark.parametrize(("override", "warning"), [
    ("local.batch_size=" + "1" + "0" * 25, "local.batch_size=10000000000000000000000000 is above every client's"),
    ("eval.knn_k=5000", "eval.knn_k=5000 is above the 1200 labelled training samples"),
])
def test_a_size_above_the_data_is_clamped_with_one_warning(tiny_recipe: Path, capsys, override: str,
                                                           warning: str) -> None:
    from fedlight.config import load_recipe
    from fedlight.engine.run.fit import prepare

    *_, clamped = prepare(load_recipe(tiny_recipe, [override]))  # said once the run goes ahead
    assert len(clamped) == 1 and clamped[0].startswith(warning) and capsys.readouterr().err == ""


def test_the_clamp_warning_comes_once_and_only_when_the_run_or_sweep_goes_ahead(tmp_path: Path, tiny_recipe: Path,
                                                                               capsys) -> None:
    """Before, it came before the refusals of fit (the payload budget here) and of a sweep, and once
    for each task of a sweep that went ahead."""
    clamp = "eval.knn_k=5000"
    said = "fedlight: warning: {}eval.knn_k=5000 is above the 1200 labelled training samples"
    run = tmp_path / "over"
    assert main(["fit", "--recipe", str(tiny_recipe), clamp, "server.name=median", "clients.num=4",
                 "run.payload_budget_mb=1", f"run.dir={run}"]) == 2
    (line,) = _errors(capsys)
    assert "run.payload_budget_mb=1" in line
    assert main(["sweep", "--recipe", str(tiny_recipe), clamp, "--grid", "data.subset=1200,5000",
                 "--out", str(tmp_path / "refused")]) == 2
    (line,) = _errors(capsys)
    assert "'data.subset' is 5000" in line

    assert main(["sweep", "--recipe", str(tiny_recipe), clamp, "--seeds", "2", "--out", str(tmp_path / "sweep")]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(said.format("tasks 0 (seed=3), 1 (seed=4): ")), line
    assert main(["fit", "--recipe", str(tiny_recipe), clamp, "rounds=1", "eval.projector_samples=0"]) == 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fedlight: warning")]
    assert line.startswith(said.format("")), line


def test_report_names_a_run_whose_eval_section_is_text(tmp_path: Path, capsys) -> None:
    """Its label fraction unreadable, its numbers would be filed under another fraction's columns."""
    import json

    from tests.test_report import _write_run

    for i, alpha in enumerate((0.1, 1.0)):
        _write_run(tmp_path / f"runs/{i}", alpha, 0, 0.8, 0.7, 1000, label_fraction=0.1)
    damaged = tmp_path / "runs/1/results.json"
    results = json.loads(damaged.read_text())
    results["recipe"]["eval"] = "label_fraction: 0.1"
    damaged.write_text(json.dumps(results))
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 2
    (line,) = _errors(capsys)
    assert str(damaged) in line and "recipe.eval is a str" in line, line
    assert not (tmp_path / "report").exists()
